"""`python -m headroom.validate.worker REQUEST.json`: one validate run in its own process.

The candidate's code runs in the model, so it runs here, not in the command's process:
a candidate that hangs is killed with this process group at the time limit, one that
crashes the interpreter (a segfault in a custom kernel) takes only this process down, and
either way the parent reports one line and leaves nothing behind. Exit status: 0 with
`result.json` in the run directory; 2 with `error.txt` (one line) for anything the user's
input caused (bad candidate, differing outputs, out of memory).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from headroom.errors import UserError

ERROR_FILE = "error.txt"


def _candidate_frame(tb, candidates: list[str]) -> str | None:
    """The innermost traceback frame in a candidate file, as `file:line`."""
    hit = None
    for fs in traceback.extract_tb(tb):
        if any(os.path.abspath(fs.filename) == c for c in candidates):
            hit = f"{os.path.basename(fs.filename)}:{fs.lineno}"
    return hit


def explain(e: BaseException, stage: str, candidates: list[str]) -> str:
    """One line for an exception of the run (see the module docstring)."""
    from headroom.profile.oom import _is_oom

    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, UserError):
        return str(e)
    if _is_oom(e):
        return (
            f"out of memory during {stage} ({text[:160]}); two variants share one model, so try a "
            f"smaller --batch or --seq"
        )
    where = _candidate_frame(e.__traceback__, candidates)
    if where:
        return f"the candidate raised {type(e).__name__} during {stage} ({where}): {text[:200]}"
    return f"validate failed during {stage}: {type(e).__name__}: {text[:200]}"


def main(argv: list[str]) -> int:
    from headroom.errors import library_warnings_in_one_style
    from headroom.validate.run import Request, Say, run

    library_warnings_in_one_style()  # relayed by the parent: in the style of its own lines
    req = Request.from_json(Path(argv[0]).read_text())
    out = Path(req.out)
    out.mkdir(parents=True, exist_ok=True)
    say = Say(lambda s: print(s, file=sys.stderr, flush=True))
    candidates = [os.path.abspath(p) for _, p in req.replace]
    try:
        run(req, say)
    except BaseException as e:  # noqa: BLE001 - every failure becomes one line for the parent
        if os.environ.get("HEADROOM_DEBUG"):
            traceback.print_exc()
        stage = say.stages[-1] if say.stages else "start-up"
        (out / ERROR_FILE).write_text(explain(e, stage, candidates) + "\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
