"""`headroom validate --graphs`: base and variant each captured as a CUDA graph after warm-up and replayed,
timed interleaved as the eager steps are (as serving engines run decode; `headroom profile --graphs` profiles
such replays). Only the timing replays: the check and the two profiles run the eager step, so the estimate
and the diagnostics are the eager model's (a regime the calibrated interval does not cover). GPU only; a
step that cannot be captured (a host synchronisation, a data-dependent shape) is refused with CUDA's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headroom.errors import UserError
from headroom.profile.graphs import capture_step


def graph_sides(step: Callable[[], Any], use: Callable[[str], None], device: Any
                ) -> tuple[Callable[[], None], Callable[[str], None]]:
    """(replay, use): ``replay()`` replays the graph of the side ``use(side)`` chose last; base first."""
    if getattr(device, "type", "cpu") != "cuda":
        raise UserError("--graphs needs a CUDA device (it captures each side as a CUDA graph)")
    graphs = {}
    for side in ("base", "variant"):
        use(side)
        graphs[side] = capture_step(step, device)   # kept alive: its graph and memory pool
    use("base")
    current = ["base"]

    def use_graph(side: str) -> None:
        use(side)
        current[0] = side

    def replay() -> None:
        graphs[current[0]].replay()

    return replay, use_graph
