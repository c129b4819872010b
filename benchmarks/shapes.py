"""Benchmark traces of the shapes users have, built from real traces by replication.

Each shape replicates one real trace (committed in traces/ or in the shared HTA
traces) until the file reaches a size: every copy is shifted past the end of the
previous one, with fresh correlation / External / flow ids and step numbers,
so attribution, flows and steps stay valid. Files are written in the layout
torch.profiler's exporter uses (one event over several lines, args on their
own lines), one copy at a time (memory stays that of one copy), as text: a 4 GB trace
is written in about a minute.

    python benchmarks/shapes.py --shape training --mb 2000 --out /tmp/train-2g.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The team's shared folder: $HEADROOM_SHARED, ../shared beside the clone (CI), or /work/shared."""
    for candidate in (os.environ.get("HEADROOM_SHARED"), REPO.parent / "shared", "/work/shared"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return REPO.parent / "shared"


SHAPES = {
    # H200 Llama-7B prefill: kernels, cpu_ops, runtime calls, ac2g flows, overhead events.
    "inference": REPO / "traces" / "llama-7b.infer.prefill.json.gz",
    # H200 ResNet-50 training step: forward + backward (autograd threads, fwdbwd flows), optimizer.
    "training": REPO / "traces" / "resnet-50.train.json.gz",
    # A100 rank with NCCL kernels on their own streams beside compute, memcpy, distributedInfo.
    "communication": shared_dir() / "hta-traces" / "nccl_parser_config__nccl_data.json.gz",
}

ID_STRIDE = 10**7
STEP_STRIDE = 100


def _read(source: Path) -> dict:
    raw = source.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _span(events: list[dict]) -> float:
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    return end - start


def _copy(e: dict, c: int, shift: float) -> dict:
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + shift
    if isinstance(e.get("id"), int):
        e["id"] = e["id"] + c * ID_STRIDE
    args = e.get("args")
    if args:
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] = args[key] + c * ID_STRIDE
        e["args"] = args
    name = e.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + c * STEP_STRIDE}"
    return e


def _event_text(e: dict) -> str:
    def items(d: dict) -> str:
        return ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in d.items())

    text = "  {\n    " + items({k: v for k, v in e.items() if k != "args"})
    if e.get("args") is not None:
        text += ',\n    "args": {\n      ' + items(e["args"]) + "\n    }"
    return text + "\n  }"


def build(source: Path, target_mb: float, out: Path) -> dict:
    """Replicate `source` into `out` until it holds at least `target_mb` MB; returns what was written.

    The copies are text: each event is written once as a template with a slot for every number a copy
    rewrites (``ts``, ``id``, correlation / External id, the step number), and a copy is the template
    filled with one ``%`` format of numpy-shifted numbers (the same file `build_reference` writes, byte
    for byte, at ~100x its speed)."""
    doc = _read(source)
    events = doc.pop("traceEvents")
    span = _span(events)
    first, slots_first = _template(events, with_metadata=True)
    later, slots_later = _template(events, with_metadata=False)
    per_copy = (len(first % _numbers(*slots_first, 0, 0.0)) + 2) / 1e6  # as build_reference counts it
    copies = max(1, int(target_mb / per_copy) + 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        f.write(_head(doc))
        for c in range(copies):
            template, (kinds, bases) = (first, slots_first) if c == 0 else (later, slots_later)
            f.write(("" if c == 0 else ",\n") + template % _numbers(kinds, bases, c, c * (span + 1000.0)))
        f.write("\n  ]\n}\n")
    n = len(events) + (copies - 1) * sum(1 for e in events if e.get("ph") != "M")
    return {"source": source.name, "copies": copies, "events": n, "mb": round(out.stat().st_size / 1e6, 1)}


def _head(doc: dict) -> str:
    return "{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in doc.items()) + '  "traceEvents": [\n'


# The numbers a copy rewrites, by slot kind: ts (float, shifted), ids (int, + copy * ID_STRIDE), steps.
TS, ID, STEP = 0, 1, 2


def _template(events: list[dict], with_metadata: bool) -> tuple[str, tuple[np.ndarray, np.ndarray]]:
    """The events' text (as `_event_text` writes it) with a %-slot per rewritten number, and the slots'
    kinds and copy-0 values in text order."""
    kinds: list[int] = []
    bases: list[float | int] = []

    def value(key: str, v, slot: int | None) -> str:
        if slot is None:
            return f"{json.dumps(key)}: {json.dumps(v)}".replace("%", "%%")
        kinds.append(slot)
        bases.append(v)
        return f"{json.dumps(key)}: %r"

    texts = []
    for e in events:
        if e.get("ph") == "M" and not with_metadata:
            continue
        fields = []
        for k, v in e.items():
            if k == "args":
                continue
            if k == "name" and isinstance(v, str) and v.startswith("ProfilerStep#"):
                kinds.append(STEP)
                bases.append(int(v.split("#")[1]))
                fields.append(f'{json.dumps(k)}: "ProfilerStep#%r"')
                continue
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            fields.append(
                value(
                    k,
                    v,
                    TS
                    if k == "ts" and numeric
                    else ID
                    if k == "id" and isinstance(v, int) and not isinstance(v, bool)
                    else None,
                )
            )
        text = "  {\n    " + ", ".join(fields)
        if e.get("args") is not None:
            args = [
                value(
                    k,
                    v,
                    ID
                    if k in ("correlation", "External id") and isinstance(v, int) and not isinstance(v, bool)
                    else None,
                )
                for k, v in e["args"].items()
            ]
            text += ',\n    "args": {\n      ' + ", ".join(args) + "\n    }"
        texts.append(text + "\n  }")
    kind = np.array(kinds, dtype=np.int8)
    base = np.array(bases, dtype=object)
    return ",\n".join(texts), (kind, base)


def _numbers(kinds: np.ndarray, bases: np.ndarray, c: int, shift: float) -> tuple:
    """One copy's numbers in slot order: Python floats for ts (the sum `_copy` makes), ints for the rest."""
    out = np.empty(len(kinds), dtype=object)
    ts = kinds == TS
    out[ts] = (bases[ts].astype(np.float64) + shift).tolist()
    ids = kinds == ID
    out[ids] = (bases[ids].astype(np.int64) + c * ID_STRIDE).tolist()
    steps = kinds == STEP
    out[steps] = (bases[steps].astype(np.int64) + c * STEP_STRIDE).tolist()
    return tuple(out.tolist())


def build_reference(source: Path, target_mb: float, out: Path) -> dict:
    """`build` one event at a time through dicts (the definition `build` is checked against)."""
    doc = _read(source)
    events = doc.pop("traceEvents")
    span = _span(events)
    per_copy = sum(len(_event_text(e)) + 2 for e in events) / 1e6
    copies = max(1, int(target_mb / per_copy) + 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out, "w") as f:
        f.write("{\n")
        for key, value in doc.items():
            f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        first = True
        for c in range(copies):
            shift = c * (span + 1000.0)
            parts = []
            for e in events:
                if e.get("ph") == "M" and c:
                    continue  # process/thread names once
                parts.append(_event_text(_copy(e, c, shift)))
            n += len(parts)
            f.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
        f.write("\n  ]\n}\n")
    return {"source": source.name, "copies": copies, "events": n, "mb": round(out.stat().st_size / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--mb", type=float, default=250.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(json.dumps(build(SHAPES[args.shape], args.mb, args.out)))


if __name__ == "__main__":
    main()
