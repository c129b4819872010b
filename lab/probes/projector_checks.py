"""The projector's mechanisms on the committed H200 traces (docs/projection.md, "Checked").

The shipped traces have no nn.Module ranges yet, so this script adds them where the op sequence is
unmistakable -- the eager chains fused by hand in the hand-measured substitutions:

* Llama's RMSNorm in the static-cache decode trace (launch-bound): ``to, pow, mean, add, rsqrt, mul,
  to, mul``, 65 calls a step;
* GPT-2's NewGELU in the GPT2-XL prefill trace (GPU-bound): ``mul, pow, mul, add, mul, tanh, add,
  mul``, 48 calls a step;

as ``nn.Module:`` python_function ranges from the first op's start to the last op's end (no Python
before or after them: the footprint is, if anything, short). Then it projects each chain fused into
one kernel per call with and without the CPU model, on both clocks.

    python lab/probes/projector_checks.py [--json]
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from headroom.projection.project import project  # noqa: E402
from headroom.projection.speedups import parse_cli_speedup  # noqa: E402
from headroom.trace.analysis import analyze  # noqa: E402

CHAINS = {
    "decode-rmsnorm": (
        "traces/llama-7b.infer.decode.static-cache.json.gz",
        "LlamaRMSNorm",
        ["aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::to", "aten::mul"],
    ),
    "prefill-gelu": (
        "traces/gpt2-xl.infer.prefill.json.gz",
        "NewGELUActivation",
        ["aten::mul", "aten::pow", "aten::mul", "aten::add", "aten::mul", "aten::tanh", "aten::add", "aten::mul"],
    ),
}


def with_module_ranges(trace: str, module: str, ops: list[str], out: Path) -> tuple[Path, int]:
    """A copy of `trace` with an ``nn.Module: <module>_k`` range around each run of `ops` (top-level ops).
    A trace recorded with module ranges is used as it is, with its own count of `module` calls."""
    doc = json.loads(gzip.decompress((REPO / trace).read_bytes()))
    native = sum(
        1
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("headroom/module ")
        and str(e["name"]).endswith(f"({module})")
    )
    if native:
        return REPO / trace, native
    cpu = sorted(
        (e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    top, end = [], -1.0
    for e in cpu:  # top-level ops, per thread in practice (one thread here)
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e["dur"]
    names = [e["name"] for e in top]
    n, i, k = len(ops), 0, 0
    while i + n <= len(top):
        if names[i : i + n] == ops:
            first, last = top[i], top[i + n - 1]
            doc["traceEvents"].append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": f"nn.Module: {module}_{k}",
                    "pid": first["pid"],
                    "tid": first["tid"],
                    "ts": first["ts"],
                    "dur": last["ts"] + last["dur"] - first["ts"],
                    "args": {},
                }
            )
            k += 1
            i += n
        else:
            i += 1
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out, k


def fused_speedup(a, module: str) -> float:
    """The part speedup a fused kernel would have: the chain's kernel time over its cheapest kernel's
    (one fused elementwise pass reads and writes what the cheapest of them does)."""
    ev = a.events[a.events["module"].astype(str).str.contains(module)]
    per_call = ev.groupby("module")["dur"]
    return float((per_call.sum() / per_call.min()).median())


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (trace, module, ops) in CHAINS.items():
            path, calls = with_module_ranges(trace, module, ops, Path(tmp) / f"{name}.json.gz")
            a = analyze(path)
            s = fused_speedup(a, module)
            row = {
                "trace": trace,
                "module": module,
                "calls_per_step": calls / a.num_steps,
                "part_speedup": s,
                "profiled_step_ms": a.step_us / 1e3,
            }
            for label, spec in (
                ("pinned", f"module:{module}={s:.4f}"),
                ("cpu_model", f"module:{module}={s:.4f},launches=1"),
            ):
                r = project(a, [parse_cli_speedup(spec)])
                am, rp, e = r.get("amdahl"), r.get("replay"), r.estimate
                row[label] = {
                    "amdahl": am.speedup,
                    "replay": rp.speedup,
                    "amdahl_unprofiled": am.unprofiled.speedup if am.unprofiled else None,
                    "estimate": e.speedup,
                    "low": e.low,
                    "high": e.high,
                    "clock": e.clock,
                    "cpu_scale": e.cpu_scale,
                }
                c = r.entries[0].cpu
                if c:
                    row[label]["cpu_saved_ms_per_step"] = (c["removed_cpu_us"] - c["added_cpu_us"]) / 1e3 / a.num_steps
                    row[label]["launch_cost"] = c["launch_cost"]
            if r.unprofiled is not None:
                row["unprofiled_step_ms"] = r.unprofiled.step_us / 1e3
            out[name] = row
    print(json.dumps(out, indent=None if "--json" in argv else 2))
    return out


if __name__ == "__main__":
    main()
