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

SIDE_STREAM_WARMUP = 3   # torch.cuda.graph's documented warm-up, on a side stream, before the capture


def _capture(step: Callable[[], Any], device: Any) -> Any:
    import torch

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(SIDE_STREAM_WARMUP):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
    except RuntimeError as e:
        reason = (str(e).strip().splitlines() or ["unknown"])[0]
        raise UserError(f"--graphs: the step cannot be captured as a CUDA graph ({reason}); run without --graphs") \
            from None
    torch.cuda.synchronize(device)
    return graph


def graph_sides(step: Callable[[], Any], use: Callable[[str], None], device: Any
                ) -> tuple[Callable[[], None], Callable[[str], None]]:
    """(replay, use): ``replay()`` replays the graph of the side ``use(side)`` chose last; base first."""
    if getattr(device, "type", "cpu") != "cuda":
        raise UserError("--graphs needs a CUDA device (it captures each side as a CUDA graph)")
    graphs = {}
    for side in ("base", "variant"):
        use(side)
        graphs[side] = _capture(step, device)
    use("base")
    current = ["base"]

    def use_graph(side: str) -> None:
        use(side)
        current[0] = side

    def replay() -> None:
        graphs[current[0]].replay()

    return replay, use_graph
