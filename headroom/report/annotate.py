"""Write a trace back with each GPU activity's category in its `args`, for Perfetto/chrome://tracing."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from headroom.errors import UserError
from headroom.jsonio import atomic_file, dumps
from headroom.trace.analysis import analyze
from headroom.trace.load import read_trace_json


def annotate_trace(source: str | os.PathLike, out: str | os.PathLike, rules=None, policy=None) -> int:
    """Copy `source` to `out` with `headroom_category`, `headroom_addressable` and `headroom_op`
    in each kernel/memcpy/memset's args. Returns the number of events annotated.

    Every GPU activity is annotated, inside the profiled steps or not. The output
    is written to a temporary file and renamed, so a failure leaves nothing half-written.
    """
    analysis = analyze(source, rules=rules, policy=policy, whole_trace=True)
    if analysis.mode != "gpu" or "index" not in analysis.events.columns:
        raise UserError(
            f"{analysis.source}: no GPU activity to annotate (a CPU-only trace; `headroom classify` shows its CPU ops)"
        )
    doc = read_trace_json(source)
    events = doc["traceEvents"]
    ev = analysis.events
    for idx, cat, addr, op in zip(
        ev["index"].tolist(), ev["category"].tolist(), ev["addressable"].tolist(), ev["op"].tolist()
    ):
        args = events[idx].setdefault("args", {})
        args["headroom_category"] = cat
        args["headroom_addressable"] = bool(addr)
        if op:
            args["headroom_op"] = op
    try:
        data = json.dumps(doc, allow_nan=False).encode()
    except ValueError:  # a number beyond a double in the trace (1e999): null, as headroom writes one
        data = dumps(doc).encode()
    with atomic_file(out) as f:
        f.write(gzip.compress(data, compresslevel=6) if Path(out).name.endswith(".gz") else data)
    return len(ev)
