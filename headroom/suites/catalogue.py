"""Suite catalogues: one TOML file per suite, prose and selectors in one place.

``kernelbench_l1.toml`` (KernelBench level 1) and ``dlrm_bench.toml``
(DLRM-Bench) say, for every problem, what it stands for in a real model's
trace: the selectors ``headroom project`` applies a verified speedup to, and
the prose ``headroom bench list`` prints. ``headroom/data/problems.toml`` — the
problem map the projection reads — is generated from them
(``python -m headroom.suites --write``) and a test checks it is current.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import tomllib

CATALOGUES = ("kernelbench_l1", "dlrm_bench")
PROBLEMS_TOML = Path(__file__).resolve().parents[1] / "data" / "problems.toml"


@dataclass(frozen=True)
class SuiteProblem:
    name: str
    suite: str
    select: tuple[str, ...]
    note: str = ""
    group: str = ""
    summary: str = ""
    shapes: str = ""
    stands_for: str = ""


def load(catalogue: str) -> tuple[SuiteProblem, ...]:
    if catalogue not in CATALOGUES:
        raise ValueError(f"unknown catalogue {catalogue!r} (one of {', '.join(CATALOGUES)})")
    doc = tomllib.loads(resources.files("headroom.suites").joinpath(f"{catalogue}.toml").read_text())
    suite = doc["suite"]
    return tuple(
        SuiteProblem(
            name,
            suite,
            tuple(e["select"]),
            e.get("note", ""),
            e.get("group", ""),
            e.get("summary", ""),
            e.get("shapes", ""),
            e.get("stands_for", ""),
        )
        for name, e in doc["problem"].items()
    )


_HEADER = """\
# GENERATED from headroom/suites/{kernelbench_l1,dlrm_bench}.toml by
# `python -m headroom.suites --write`: edit those, not this file.
#
# Benchmark problem name -> the kernel time it stands for in a real model's trace.
#
# Used by `problem:NAME` selectors and by `headroom verify` results, which name
# their problem. Each problem lists selectors (see docs/projection.md); a kernel
# belongs to the problem if ANY selector matches, and a selector's atoms joined
# by " & " must ALL match. `op:` matches the innermost launching aten op OR the
# top-level op on the launching thread, exactly (or as a glob with * ? [ ]).
#
# Conventions:
# - A KernelBench problem is one aten op's forward; it selects that op wherever
#   it runs (a bmm in the backward pass is a bmm too). The ops' backward
#   counterparts (threshold_backward, native_layer_norm_backward, ...) are
#   different ops and are not selected.
# - A model-part problem (DLRM-Bench), and any `module:` selector of a forward
#   problem, selects its forward with `& phase:forward`: a training trace
#   attributes backward kernels to the module of the forward op that made them
#   (phase: backward = a backward op Kineto links to a forward op, the autograd
#   engine, *Backward nodes, *_backward ops or a "backward" range).
# - `module:PATTERN` matches kernels inside a module (at any depth) whose path or
#   class matches, e.g. `module:RMSNorm` everything under each LlamaRMSNorm.
# - GEMM/conv problems add `& category:gemm` / `& category:conv` so the copies and
#   casts an op also launches are not counted as the problem's time.
# - Several problems stand for the same op (e.g. the matmul shape variants, or
#   EmbeddingBag sum and weighted mean). Giving speedups for two of them selects
#   the same kernels: headroom warns and the first entry wins.
# - Problems with no aten op of their own (DCN cross, FM, attention pooling)
#   select by nn.Module path or class or by record_function range, so they match
#   only traces recorded with module ranges (`headroom profile` records them) or
#   annotations.
# Names are matched exactly, then ignoring case, ".py" and trailing "_".
# Users add or replace problems with `--problems FILE` (same format).
"""

_SECTIONS = {"kernelbench_l1": "KernelBench level 1", "dlrm_bench": "DLRM-Bench (headroom verify)"}


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _array(xs: tuple[str, ...]) -> str:
    one = "[" + ", ".join(_q(x) for x in xs) + "]"
    if len(one) <= 96:
        return one
    return "[\n" + "".join(f"    {_q(x)},\n" for x in xs) + "]"


def problems_toml() -> str:
    """The text of headroom/data/problems.toml, from the catalogues."""
    out = [_HEADER]
    for cat in CATALOGUES:
        out.append(f"\n# {'=' * 28} {_SECTIONS[cat]} {'=' * max(4, 48 - len(_SECTIONS[cat]))}\n")
        group = None
        for p in load(cat):
            if p.group and p.group != group:
                group = p.group
                out.append(f"\n# --- {group} {'-' * max(4, 74 - len(group))}\n")
            out.append(f"\n[problem.{_q(p.name)}]\nsuite = {_q(p.suite)}\nselect = {_array(p.select)}\n")
            if p.note:
                out.append(f"note = {_q(p.note)}\n")
    return "".join(out)


def write_problems_toml(path: Path = PROBLEMS_TOML) -> None:
    path.write_text(problems_toml())
