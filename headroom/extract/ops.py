"""`headroom extract WORKLOAD --module op:aten::NAME`: one op as a problem, with its recorded shapes.

The shapes come from a trace recorded with `record_shapes` (a given `--trace`, or a one-step
profile of the workload): each `aten::NAME` call's "Input Dims", "Input type" and
"Concrete Inputs" (scalars and lists). The most frequent signature becomes `get_inputs()`;
`Model.forward` calls `torch.ops.aten.NAME` with it (the overload is picked by the argument
types, as the dispatcher does). The trace records no values: floating inputs are standard
normal, integer inputs uniform in [0, n) where n is the smallest leading dimension of the
call's floating inputs (an index into them), documented in the header.
"""

from __future__ import annotations

import ast
import gzip
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.extract.problem import comment_block, selector_entry
from headroom.extract.record import record_trace
from headroom.extract.result import ExtractResult, header_config, safe_name
from headroom.jsonio import plain
from headroom.profile.progress import Progress, _stage
from headroom.profile.workload import RunConfig, WorkloadSpec, file_stem
from headroom.trace.ranges import PROFILER_STEP_PREFIX

# Kineto's "Input type" strings -> torch dtypes.
_DTYPES = {
    "float": "float32",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "double": "float64",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
}


def _read_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable trace ({e})") from None
    return doc.get("traceEvents", []) if isinstance(doc, dict) else []


def _concrete(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def op_calls(path: Path, op: str) -> tuple[list[tuple], int]:
    """Signatures (per argument: ("tensor", shape, dtype) or ("value", v)) of every `op` call inside
    the profiled steps, and the number of steps."""
    events = _read_events(path)
    steps = [
        (e["ts"], e["ts"] + e.get("dur", 0))
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith(PROFILER_STEP_PREFIX)
    ]
    calls = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "cpu_op" or e.get("name") != op:
            continue
        if steps and not any(a <= e["ts"] <= b for a, b in steps):
            continue
        args = e.get("args") or {}
        dims, types = args.get("Input Dims"), args.get("Input type")
        if dims is None or types is None:
            raise UserError(f"{path}: {op} has no recorded shapes (profile with record_shapes=True)")
        conc = args.get("Concrete Inputs") or [""] * len(dims)
        sig: list[tuple[Any, ...]] = []
        for d, t, c in zip(dims, types, conc):
            if t in _DTYPES:
                sig.append(("tensor", tuple(int(x) for x in d), _DTYPES[t]))
            elif t == "" and not d and c == "":
                sig.append(("value", None))
            elif c != "":
                sig.append(("value", _concrete(c)))
            else:
                raise UserError(f"{op}: argument of type {t!r} (shape {d}) cannot be reproduced from the trace")
        calls.append(tuple(sig))
    return calls, max(len(steps), 1)


def _tensor_code(shape: tuple, dtype: str, bound: int) -> str:
    if dtype == "float32":
        return f"torch.randn({shape!r})"
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        return f"torch.randn({shape!r}, dtype=torch.float32).to(torch.{dtype})"
    if dtype == "bool":
        return f"torch.rand({shape!r}) < 0.5"
    return f"torch.randint(0, {max(bound, 1)}, {shape!r}, dtype=torch.{dtype})"


def op_problem(
    op: str,
    sig: tuple,
    name: str,
    workload: str,
    config: dict,
    counts: Counter,
    n_steps: int,
    share_text: str,
    command: str,
) -> str:
    floats = [s[1] for s in sig if s[0] == "tensor" and ("float" in s[2]) and s[1]]
    bound = min((sh[0] for sh in floats), default=2)
    params = [f"x{i}" for i in range(len(sig))]
    header = [
        f"{name}: {op} from the {workload} workload, in KernelBench's format.",
        f"Written by `{command}`.",
        "",
        "workload: " + ", ".join(f"{k} {v}" for k, v in config.items() if v not in (None, "", [], {})),
        f"calls per step: {sum(counts.values()) / n_steps:g} ({len(counts)} signature(s)); "
        f"get_inputs() makes the most frequent ({counts[sig]} of {sum(counts.values())} calls)",
        f"share: {share_text}",
    ]
    if any(s[0] == "tensor" and not ("float" in s[2] or s[2] == "bool") for s in sig):
        header.append(
            "values are not in the trace: floats standard normal, integers uniform in "
            f"[0, {bound}) (the smallest leading dimension of the floating inputs)"
        )
    else:
        header.append("values are not in the trace: floats standard normal")
    inputs = []
    for p, s in zip(params, sig):
        if s[0] == "tensor":
            inputs.append(f"        {_tensor_code(s[1], s[2], bound)},  # {p}: {s[1]} {s[2]}")
        else:
            inputs.append(f"        {s[1]!r},  # {p}")
    aten = op.split("::", 1)[1]
    return "\n".join(
        [
            comment_block(header),
            "",
            "import torch",
            "import torch.nn as nn",
            "",
            "",
            "class Model(nn.Module):",
            f'    """{op} with the arguments {workload} passes it most often."""',
            "",
            f"    def forward(self, {', '.join(params)}):",
            f"        return torch.ops.aten.{aten}({', '.join(params)})",
            "",
            "",
            "def get_inputs():",
            "    return [",
            *inputs,
            "    ]",
            "",
            "",
            "def get_init_inputs():",
            "    return []",
            "",
        ]
    )


def extract_op(
    spec: WorkloadSpec,
    cfg: RunConfig,
    dev: Any,
    op: str,
    out_dir: Path,
    *,
    trace: Any,
    command: str,
    progress: Progress,
    window: str | None = None,
):
    from headroom.files import write_atomic
    from headroom.projection.matching import select
    from headroom.trace.analysis import analyze

    if not op.startswith("aten::") or len(op) <= len("aten::"):
        raise UserError(f"--module op:{op}: expected op:aten::NAME (e.g. op:aten::mul)")
    name = f"{file_stem(spec.name)}__{safe_name(op.replace('::', '_'))}"
    with tempfile.TemporaryDirectory(prefix=".headroom-extract-") as tmp:
        if trace is None:
            step = None
            try:
                with _stage(progress, "build", f"{spec.name} ({cfg.variant})"):
                    step = spec.build(cfg, dev)
                    step()
                with _stage(progress, "profile", "1 step with record_shapes"):
                    path = Path(tmp) / "shapes.json.gz"
                    record_trace(step, dev, path, {"tool": "headroom extract", **plain(cfg)}, steps=1)
            finally:
                if step is not None:
                    step.close()
            source = "a 1-step profile"
        else:
            path = Path(trace)
            source = str(trace)
        calls, n_steps = op_calls(path, op)
        if not calls:
            raise UserError(f"{spec.name}: {op} is not called in {source} (see `headroom targets TRACE --by op`)")
        counts = Counter(calls)
        sig = counts.most_common(1)[0][0]
        a = analyze(path, window=window if trace is not None else None)
        mask = select(a.events, f"op:{op}")
        us = float(a.events["dur"].to_numpy()[mask].sum()) / max(a.num_steps, 1)
        total = a.total_us / max(a.num_steps, 1)
        what = "GPU kernel time" if a.mode == "gpu" else "CPU operator time (no GPU in the trace)"
        pct = 100 * us / total if total else 0.0
        share = f"{pct:.2f}% of {what}: {us / 1e3:.3f} ms of {total / 1e3:.3f} ms per step ({source})"
        text = op_problem(op, sig, name, spec.name, header_config(cfg), counts, n_steps, share, command)
        out_dir.mkdir(parents=True, exist_ok=True)
        problem = out_dir / f"{name}.py"
        entry = out_dir / f"{name}.toml"
        selectors = [f"op:{op}"]
        write_atomic(entry, selector_entry(name, selectors, f"{op} in {spec.name} ({cfg.variant})"))
        write_atomic(problem, text)
    return ExtractResult(
        name=name,
        problem=problem,
        entry=entry,
        trace=None,
        selectors=selectors,
        share=None,
        calls_per_step=int(round(sum(counts.values()) / n_steps)),
        config=header_config(cfg),
        notes=[f"{a.source}: {n}" for n in a.notes] if trace is not None else [],
    )
