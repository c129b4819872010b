"""The a-priori table (docs/validation.md, "Before integrating"): what `headroom verify` measured on an
extracted problem, projected onto the base trace with no variant run, against what `headroom validate`
then measured with the candidate swapped into the model.

    python -m headroom.report.apriori docs/gpu/apriori            # the Markdown table
    python -m headroom.report.apriori docs/gpu/apriori --json     # the rows as JSON
    python -m headroom.report.apriori docs/gpu/apriori --update docs/validation.md   # the tables there replaced
    python -m headroom.report.apriori docs/gpu/apriori --agreement   # verify against the part in the model
    python -m headroom.report.apriori docs/gpu/apriori --reruns      # every verify run of a row; every whole loop

Each directory under the given one holds one substitution: `base.json.gz` (validate's base trace),
`verify.json` (verify's result on the problem extract wrote), the problem's `.toml` entry, and
`result.json` (validate's measurement), and optionally `verify.<run>.json`: another verify run of the same
problem (`--reruns` projects each onto the same base trace, against the same measurement). The projection
is recomputed here with the code at hand, exactly as `headroom project base.json.gz --problems ENTRY.toml
--speedups verify.json` does. `loop.json`'s whole-loop records (extract, verify, project, validate in one
call, each with its own base trace and measurement) are reported as that call computed them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.trace.analysis import analyze

if TYPE_CHECKING:
    from headroom.projection.calibration import Calibration, Row

GPU_BOUND_TARGET = 0.03  # |estimate / measured - 1| where the GPU is the bottleneck
LAUNCH_BOUND_TARGET = 0.06  # ... and where the CPU's launches are (decode at batch 1)
AGREEMENT_TARGET = 0.10  # |verify's speedup / the part's in-model speedup - 1|
PROBE_STATES = ("cold", "produced", "produced_gemm")  # lab/gpu/gpu_validate.py --l2-probe


@dataclass(frozen=True)
class AprioriRow:
    name: str
    launch_bound: bool
    verify_speedup: float  # verify's headline speedup on the extracted problem
    candidate_clock: str  # "gated" (the GPU's clock) or "plain" (serialised: the candidate synchronises)
    kernel_ratio: float | None  # the reference's / the candidate's profiled kernel time in verify's children
    syncs: float | None  # host synchronisations per call of the candidate (verify)
    part_speedup: float  # the replaced part inside the model (validate: kernel time per step)
    factor: float  # the speedup the projection applied to the part's kernels
    estimate: float
    low: float  # the projector's CPU-outcome bounds (not the interval: `intervals`)
    high: float
    measured: float  # validate's interleaved step-time speedup (its rounds, summarised by headroom.measure)
    error: float  # estimate / measured - 1
    noise: float = 0.0  # the measurement's log-scale standard error (headroom.measure.log_noise)
    measured_ci: tuple[float, float] | None = None
    graphs: bool = False  # both sides captured and replayed as CUDA graphs (validate --graphs)

    @property
    def regime(self) -> str:
        from headroom.projection.calibration import regime

        return regime(self.launch_bound, self.graphs)

    @property
    def target(self) -> float:
        return LAUNCH_BOUND_TARGET if self.launch_bound else GPU_BOUND_TARGET

    @property
    def verify_vs_part(self) -> float:
        return self.verify_speedup / self.part_speedup


def measurement(d: Path) -> dict:
    """validate's measurement of a row, recomputed from its run.json's rounds (``headroom.validate.timing``)."""
    from headroom.validate.timing import summarise

    return summarise(json.loads((d / "run.json").read_text())["timing"])


def _row(d: Path, verify_file: str = "verify.json") -> AprioriRow:
    from headroom.validate.apriori import apriori_projection

    verify = json.loads((d / verify_file).read_text())
    result = json.loads((d / "result.json").read_text())
    speedups, res = apriori_projection(analyze(d / "base.json.gz"), d / verify_file, next(d.glob("*.toml")))
    est = res.estimate
    assert est is not None and est.low is not None and est.high is not None, f"{d / verify_file}: no estimate"
    pc = verify.get("per_call") or {}
    ref_k, cand_k = ((pc.get(w) or {}).get("kernel_us") for w in ("reference", "candidate"))
    m = measurement(d)
    measured = float(m["speedup"])
    return AprioriRow(
        name=d.name,
        launch_bound=bool(result["baseline"]["launch_bound"]),
        verify_speedup=float(verify["speedup"]),
        candidate_clock=str(verify["timing"]["candidate_clock"]),
        kernel_ratio=ref_k / cand_k if ref_k and cand_k else None,
        syncs=(pc.get("candidate") or {}).get("syncs"),
        part_speedup=float(result["part"]["speedup"]),
        factor=float(speedups.entries[0].speedup),
        estimate=float(est.speedup),
        low=float(est.low),
        high=float(est.high),
        measured=measured,
        error=float(est.speedup) / measured - 1.0,
        noise=float(m["noise"] or 0.0),
        measured_ci=(float(m["ci"][0]), float(m["ci"][1])),
        graphs=bool(result.get("config", {}).get("graphs", False)),
    )


def apriori_rows(root: Path) -> list[AprioriRow]:
    return [_row(d) for d in sorted(p for p in Path(root).iterdir() if (p / "verify.json").is_file())]


@dataclass(frozen=True)
class AgreementRow:
    """verify's speedup on the extracted problem beside the replaced part's inside the model (gated rows)."""

    name: str
    verify_speedup: float
    part_speedup: float
    probe: dict[str, float]  # the L2-state probe's speedup per input state, where the row was probed

    @property
    def ratio(self) -> float:
        return self.verify_speedup / self.part_speedup

    @property
    def agrees(self) -> bool:
        return abs(self.ratio - 1.0) <= AGREEMENT_TARGET


def probes(loop: Path) -> dict[str, dict[str, float]]:
    """The newest `l2_probe` speedups per row in lab/gpu/gpu_validate.py's records (`loop.json`)."""
    out: dict[str, dict[str, float]] = {}
    for r in json.loads(loop.read_text())["records"]:
        us = (r.get("l2_probe") or {}).get("us") or {}
        got = {s: float(us[s]["speedup"]) for s in PROBE_STATES if (us.get(s) or {}).get("speedup")}
        if got:
            out[str(r["name"])] = got  # records are in call order: a later call's probe wins
    return out


def agreement_rows(rows: list[AprioriRow], probed: dict[str, dict[str, float]]) -> list[AgreementRow]:
    """The rows verify timed on the GPU's clock (a serialised candidate's speedup also counts its waits)."""
    return [
        AgreementRow(r.name, r.verify_speedup, r.part_speedup, probed.get(r.name, {}))
        for r in rows
        if r.candidate_clock == "gated"
    ]


def agreement_table(rows: list[AgreementRow]) -> str:
    out = [
        "| substitution | verify | in model | verify / in model | within ±10% | "
        "L2 probe: cold / produced / produced after a GEMM |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        probe = " / ".join(f"{r.probe[s]:.2f}x" if s in r.probe else "–" for s in PROBE_STATES) if r.probe else ""
        out.append(
            f"| {r.name} | {r.verify_speedup:.3f}x | {r.part_speedup:.3f}x | {r.ratio:.3f} | "
            f"{'yes' if r.agrees else '**no**'} | {probe} |"
        )
    return "\n".join(out)


def intervals(rows: list[AprioriRow], fit_rows: list[AprioriRow] | None = None) -> list[tuple[float, float]]:
    """Each row's calibrated 90% interval, fitted on ``fit_rows`` (default ``rows``) less the row's substitution."""
    from headroom.projection.calibration import leave_one_out

    checks = leave_one_out([_cal_row(r) for r in rows], fit_rows=[_cal_row(r) for r in (fit_rows or rows)])
    return [(c.low, c.high) for c in checks]


def _inside(lo: float, hi: float, x: float) -> str:
    return "yes" if lo <= x <= hi else "**no**"


def apriori_table(rows: list[AprioriRow], shipped: bool = False) -> str:
    """The rows with their calibrated intervals: each fitted on the other rows (`shipped`: the shipped
    calibration, for rows that did not shape it)."""
    if shipped:
        from headroom.projection.calibration import shipped_calibration

        cal = shipped_calibration()
        bounds = [cal.interval(r.estimate, r.noise) for r in rows]
    else:
        bounds = intervals(rows)
    out = [
        "| substitution | regime | verify (clock) | in model | verify / in model | applied | "
        f"a-priori estimate [90% interval, {'the shipped calibration' if shipped else 'row left out'}] | "
        "measured | inside | error (target) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r, (lo, hi) in zip(rows, bounds):
        clock = r.candidate_clock + (f", {r.syncs:g} sync/call" if r.syncs else "")
        ok = "yes" if abs(r.error) <= r.target else "**no**"
        out.append(
            f"| {r.name} | {r.regime} | "
            f"{r.verify_speedup:.3f}x ({clock}) | {r.part_speedup:.3f}x | {r.verify_vs_part:.3f} | "
            f"{r.factor:.3f}x | {r.estimate:.4f}x [{lo:.4f}, {hi:.4f}] | {r.measured:.4f}x | "
            f"{_inside(lo, hi, r.measured)} | {100 * r.error:+.1f}% (±{100 * r.target:.0f}%: {ok}) |"
        )
    return "\n".join(out)


@dataclass(frozen=True)
class RerunRow:
    """One verify run of a row's problem projected onto the row's base trace, against the row's measurement."""

    run: str  # "table" (the row's verify.json) or the tag of verify.<tag>.json
    row: AprioriRow
    call_us: tuple[float, float] | None  # verify's CPU time per call: candidate, reference (us)

    @property
    def call_ratio(self) -> float | None:
        return self.call_us[0] / self.call_us[1] if self.call_us and self.call_us[1] > 0 else None


def _call_us(path: Path) -> tuple[float, float] | None:
    pc = json.loads(path.read_text()).get("per_call") or {}
    c, r = ((pc.get(w) or {}).get("call_us") for w in ("candidate", "reference"))
    return (float(c), float(r)) if c is not None and r is not None else None


def rerun_rows(root: Path) -> list[RerunRow]:
    """Every row with more than one verify run: each run's projection, the table's run first."""
    out: list[RerunRow] = []
    for d in sorted(p for p in Path(root).iterdir() if (p / "verify.json").is_file()):
        others = sorted(p.name for p in d.glob("verify.*.json"))
        if not others:
            continue
        for f in ["verify.json", *others]:
            tag = "table" if f == "verify.json" else f[len("verify.") : -len(".json")]
            out.append(RerunRow(tag, _row(d, f), _call_us(d / f)))
    return out


def rerun_table(rows: list[RerunRow], fit_rows: list[AprioriRow]) -> str:
    out = [
        "| substitution | regime | verify run | verify | call_us candidate / reference (µs) | "
        "a-priori estimate [90% interval, substitution left out] | measured | inside | error (target) |",
        "|---|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for x, (lo, hi) in zip(rows, intervals([x.row for x in rows], fit_rows)):
        r = x.row
        calls = f"{x.call_us[0]:.1f} / {x.call_us[1]:.1f} ({x.call_ratio:.3f})" if x.call_us else "–"
        ok = "yes" if abs(r.error) <= r.target else "**no**"
        out.append(
            f"| {r.name} | {r.regime} | {x.run} | "
            f"{r.verify_speedup:.3f}x | {calls} | {r.estimate:.4f}x [{lo:.4f}, {hi:.4f}] | "
            f"{r.measured:.4f}x | {_inside(lo, hi, r.measured)} | "
            f"{100 * r.error:+.1f}% (±{100 * r.target:.0f}%: {ok}) |"
        )
    return "\n".join(out)


@dataclass(frozen=True)
class LoopRun:
    """One whole loop of `lab/gpu/gpu_validate.py` (its own base trace, verify run and measurement)."""

    name: str
    call: int
    launch_bound: bool
    verify_speedup: float
    part_speedup: float
    estimate: float
    low: float
    high: float
    measured: float
    measured_ci: tuple[float, float]
    error: float

    @property
    def target(self) -> float:
        return LAUNCH_BOUND_TARGET if self.launch_bound else GPU_BOUND_TARGET


def loop_runs(loop: Path) -> list[LoopRun]:
    """The records of `loop.json` that ran the whole loop and projected verify's speedup, by row then call."""
    out = []
    for r in json.loads(loop.read_text())["records"]:
        v, p = r.get("validate"), r.get("project_from_verify")
        if not v or not p or p.get("measured") is None:
            continue
        ci = v["measured"]["ci"]
        out.append(
            LoopRun(
                str(r["name"]),
                int(r["call"]),
                bool(v["baseline"]["launch_bound"]),
                float(r["verify"]["speedup"]),
                float(r["in_model"]["part_speedup"]),
                float(p["estimate"]),
                float(p["low"]),
                float(p["high"]),
                float(p["measured"]),
                (float(ci[0]), float(ci[1])),
                float(p["error"]),
            )
        )
    return sorted(out, key=lambda x: (x.name, x.call))


def loop_table(runs: list[LoopRun], fit_rows: list[AprioriRow]) -> str:
    """The whole loops as each call computed them; the 90% interval from the committed rows less the substitution,
    with the noise of the measurement that call printed (its t interval: no raw rounds in loop.json)."""
    from headroom.projection.calibration import leave_one_out

    checks = leave_one_out(loop_cal_rows(runs), fit_rows=[_cal_row(r) for r in fit_rows])
    out = [
        "| substitution | call | verify | in model | a-priori estimate [90% interval, substitution left out] | "
        "measured (95% CI) | inside | error (target) |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for x, c in zip(runs, checks):
        ok = "yes" if abs(x.error) <= x.target else "**no**"
        out.append(
            f"| {x.name} | {x.call} | {x.verify_speedup:.3f}x | {x.part_speedup:.3f}x | "
            f"{x.estimate:.4f}x [{c.low:.4f}, {c.high:.4f}] | "
            f"{x.measured:.4f}x ({x.measured_ci[0]:.4f}–{x.measured_ci[1]:.4f}) | "
            f"{_inside(c.low, c.high, x.measured)} | "
            f"{100 * x.error:+.1f}% (±{100 * x.target:.0f}%: {ok}) |"
        )
    return "\n".join(out)


# --- the calibrated interval (headroom.projection.calibration) -----------------------------------------


def _cal_row(r: AprioriRow, group: str | None = None) -> Row:
    from headroom.projection.calibration import Row

    return Row(r.name, r.estimate, r.measured, r.noise, r.launch_bound, group or r.name, r.graphs)


def loop_cal_rows(runs: list[LoopRun]) -> list:
    """The whole loops as check rows: noise from the t interval that run printed (no raw rounds in loop.json)."""
    import math

    from headroom.projection.calibration import Row, t_quantile

    t = t_quantile(0.975, 6)
    return [
        Row(
            f"{x.name} (call {x.call})",
            x.estimate,
            x.measured,
            math.log(x.measured_ci[1] / x.measured_ci[0]) / (2 * t),
            x.launch_bound,
            x.name,
        )
        for x in runs
    ]


def interval_table(checks: list, fit_note: str) -> str:
    out = [
        "| row | regime | a-priori estimate | 90% interval (" + fit_note + ") | measured | noise | error | inside |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in checks:
        r = c.row
        out.append(
            f"| {r.name} | {r.regime} | {r.estimate:.4f}x | "
            f"[{c.low:.4f}, {c.high:.4f}] | {r.measured:.4f}x | {100 * r.noise:.2f}% | "
            f"{100 * (r.estimate / r.measured - 1):+.1f}% | {'yes' if c.inside else '**no**'} |"
        )
    return "\n".join(out)


def calibration_report(root: Path, checked: Sequence[Path] = ()) -> tuple[str, Calibration]:
    """The calibration fitted on the committed rows, and its checks: each row left out (with its
    substitution), each rerun of verify (its substitution left out), each whole loop (likewise), and the
    rows of `checked` (directories of rows that did not shape it) against the shipped calibration."""
    from headroom.projection.calibration import Check, coverage, fit, leave_one_out, shipped_calibration

    rows = [_cal_row(r) for r in apriori_rows(root)]
    others = [_cal_row(r) for d in checked for r in apriori_rows(d)]
    shipped = shipped_calibration()
    unseen = [Check(r, *shipped.interval(r.estimate, r.noise)) for r in rows + others if r.name not in shipped.names]
    cal = fit(rows, source=f"docs/gpu/{root.name}: {len(rows)} rows")
    loo = leave_one_out(rows)
    reruns = [_cal_row(x.row) for x in rerun_rows(root) if x.run != "table"]
    rer = leave_one_out(reruns, fit_rows=rows)
    loops = leave_one_out(loop_cal_rows(loop_runs(root / "loop.json")), fit_rows=rows)
    lines = [
        f"calibration: {cal.method}",
        f"rows left out one at a time: {coverage(loo)[0]} of {coverage(loo)[1]} inside",
        f"verify reruns (substitution left out): {coverage(rer)[0]} of {coverage(rer)[1]} inside",
        f"whole loops (substitution left out): {coverage(loops)[0]} of {coverage(loops)[1]} inside",
        f"rows the shipped interval did not see ({shipped.rows} rows, s = {shipped.scale:.4f}): "
        f"{coverage(unseen)[0]} of {coverage(unseen)[1]} inside",
        "",
        interval_table(loo, "row left out"),
        "",
        interval_table(rer + loops, "substitution left out"),
    ]
    if unseen:
        lines += ["", interval_table(unseen, "the shipped calibration")]
    return "\n".join(lines), cal


def update_table(text: str, table: str) -> str:
    """`text` with the table that has `table`'s header (from the header row to the last row after it)
    replaced by `table`."""
    lines = text.split("\n")
    head = table.split("\n", 1)[0]
    starts = [i for i, ln in enumerate(lines) if ln == head]
    if len(starts) != 1:
        raise ValueError(f"expected one table header {head[:40]!r}..., found {len(starts)}")
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[: starts[0]] + table.split("\n") + lines[end:])


def main(argv: list[str]) -> int:
    usage = (
        "usage: python -m headroom.report.apriori DIR [--shipped] [--json | --agreement | --reruns | --update DOC.md]"
    )
    if not argv or not Path(argv[0]).is_dir():
        print(usage, file=sys.stderr)
        return 2
    root = Path(argv[0])
    rows = apriori_rows(root)
    if "--shipped" in argv[1:]:  # rows that did not shape the calibration: their table alone
        table = apriori_table(rows, shipped=True)
        if "--update" not in argv[1:]:
            print(table)
            return 0
        return _update(argv, usage, [table])
    agree = agreement_table(agreement_rows(rows, probes(root / "loop.json")))
    reruns, loops = rerun_table(rerun_rows(root), rows), loop_table(loop_runs(root / "loop.json"), rows)
    if "--update" in argv[1:]:
        return _update(argv, usage, [apriori_table(rows), agree, reruns, loops])
    if "--json" in argv[1:]:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    elif "--agreement" in argv[1:]:
        print(agree)
    elif "--reruns" in argv[1:]:
        print(reruns + "\n\n" + loops)
    else:
        print(apriori_table(rows))
    return 0


def _update(argv: list[str], usage: str, tables: list[str]) -> int:
    """`--update DOC.md`: each table in DOC.md replaced by its new version."""
    i = argv.index("--update")
    doc = Path(argv[i + 1]) if i + 1 < len(argv) else None
    if doc is None or not doc.is_file():
        print(usage, file=sys.stderr)
        return 2
    text = doc.read_text()
    try:
        for table in tables:
            text = update_table(text, table)
    except ValueError as e:
        print(f"{doc}: {e}", file=sys.stderr)
        return 2
    doc.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
