"""One validate run, in the worker process: build, substitute, check, time interleaved, profile both.

build (constructor arguments of each replaced class recorded)
  -> candidates for every instance (weights tied)   -> one step counting their calls
  -> check: outputs (and gradients) base vs variant  -> refuse when they differ
  -> interleaved rounds                             -> profile base, profile variant (module ranges)
  -> run.json, base.json.gz, variant.json.gz, result.json in the run's directory
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from headroom.devices import resolve_device
from headroom.errors import UserError
from headroom.extract.capture import find_class, instances_of, record_calls, record_constructions
from headroom.extract.record import module_ranges, record_trace, remove
from headroom.jsonio import dumps, plain
from headroom.profile.environment import environment
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options, RunConfig, WorkloadSpec
from headroom.validate.compare import check
from headroom.validate.result import (
    BASE_TRACE,
    RESULT_FILE,
    RUN_FILE,
    VARIANT_TRACE,
    ValidateResult,
    compute,
    saved_form,
)
from headroom.validate.substitute import ReplaceSpec, load_candidate_class, substitute
from headroom.validate.timing import MIN_ROUNDS, interleave, policy, summarise

RUN_SCHEMA = 1


@dataclass
class Request:
    """What the parent asks the worker to do (JSON across the process boundary)."""

    workload: str
    replace: list[tuple[str, str]]  # (CLASS, candidate path as given)
    options: dict[str, Any]  # headroom.profile.workload.Options fields
    out: str  # the run's (temporary) directory
    device: str | None = None
    rounds: int = MIN_ROUNDS
    steps_per_round: int | None = None
    profile_steps: int | None = None
    gate: float | None = None
    workload_file: str | None = None
    command: str = ""
    threads: int | None = None  # torch CPU threads (None: torch's default)
    max_rounds: int | None = None  # adaptive rounds (headroom.validate.timing.policy)
    target_width: float | None = None
    budget_s: float | None = None
    timer: str | None = None  # headroom.measure.timers (None: the device's default)
    speedups: str | None = None  # verify's result of the candidate (the a-priori estimate)
    problems: str | None = None  # the extracted problem's entry (.toml)
    graphs: bool = False  # time CUDA-graph replays of each side (headroom.validate.graphs)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> Request:
        d = json.loads(text)
        d["replace"] = [tuple(x) for x in d["replace"]]
        return cls(**d)


@dataclass
class Say:
    """Progress lines on stderr (`headroom validate: <stage> ...`): the parent shows them and names
    the last stage when a run hangs or dies."""

    write: Callable[[str], None]
    stages: list[str] = field(default_factory=list)

    def stage(self, name: str, detail: str = "") -> None:
        self.stages.append(name)
        self.write(f"headroom validate: {name}{': ' + detail if detail else ''}")

    def note(self, text: str) -> None:
        self.write(f"headroom validate:   {text}")


def _timing(req: Request, step: Any, use: Callable[[str], None], dev: Any, say: Say) -> tuple[dict, dict]:
    """The interleaved rounds (headroom.measure's adaptive policy) and their summary."""
    pol = policy(req.rounds, req.max_rounds, req.target_width, req.budget_s)
    if req.graphs:
        from headroom.validate.graphs import graph_sides

        say.stage("graphs", "base and variant each captured as a CUDA graph; the rounds time their replays")
        step, use = graph_sides(step, use, dev)
    say.stage(
        "timing",
        f"interleaved rounds (base/variant alternating): {pol.min_rounds} to {pol.max_rounds}, "
        f"until the interval is {pol.target_width:g} tight or {pol.budget_s:g} s are spent",
    )
    timing = interleave(step, use, dev, k=req.steps_per_round, progress=say.note, round_policy=pol, timer=req.timer)
    timing["graphs"] = bool(req.graphs)
    m = summarise(timing)
    ci = "-".join(f"{x:.4f}" for x in m["ci"]) if None not in m["ci"] else "none"
    say.note(
        f"measured {m['speedup']:.4f}x ({100 * (m['coverage'] or 0):.1f}% interval {ci}; {m['rounds']} rounds, "
        f"stopped: {m['stop']}), base {m['base_ms']:.3f} ms, variant {m['variant_ms']:.3f} ms"
    )
    return timing, m


def _keep_inputs(req: Request, out: Path) -> tuple[Path | None, Path | None] | None:
    """verify's result and the problem's entry copied into the run's directory (``--from`` finds them there)."""
    import shutil

    from headroom.validate.apriori import VERIFY_FILE

    if not req.speedups:
        return None
    suffix = Path(req.speedups).suffix.lower()
    verify = out / (VERIFY_FILE if suffix == ".json" else f"speedups{suffix}")  # the format goes by its suffix
    shutil.copyfile(req.speedups, verify)
    entry = None
    if req.problems:
        entry = out / Path(req.problems).name
        shutil.copyfile(req.problems, entry)
    return verify, entry


def _candidates(req: Request, spec: Any, cfg: Any, say: Say) -> list[ReplaceSpec]:
    """Each --replace CLASS=CANDIDATE: the workload's class, and the candidate file's ModelNew (imported)."""
    say.stage("resolve", ", ".join(f"{c}={p}" for c, p in req.replace))
    classes: list[ReplaceSpec] = []
    for name, cand in req.replace:
        cls = find_class(spec, cfg, name)
        if any(cls is c.cls for c in classes):
            raise UserError(f"--replace {name} is given twice")
        say.stage("candidate", f"importing {cand}")
        classes.append(ReplaceSpec(name, cls, Path(cand), load_candidate_class(Path(cand))))
    return classes


def _checked(req: Request, workload: str, cfg: Any, step: Any, sub: Any, dev: Any, say: Say) -> Any:
    """The outputs (and gradients) of the base and the variant compared: the comparison, or a UserError when they
    differ beyond the dtype's gate (nothing written)."""
    say.stage("check", "outputs" + (" and gradients" if step.train else "") + " of base vs variant")
    res = check(step, sub.use, sub.active_modules, dev, cfg.dtype, req.gate)
    if not res.compared:
        raise UserError(f"{workload}: its forward returned no tensor to compare base and variant with")
    w = res.worst
    assert w is not None, "a comparison of one tensor or more has a worst one"
    if not res.passed:
        raise UserError(
            f"the substituted model differs from the original: {w.name} relative L2 error "
            f"{w.rel_l2:.3g} > {w.gate:g} ({cfg.dtype} gate); nothing written"
        )
    say.note(f"passed: {len(res.compared)} tensors, worst {w.name} {w.rel_l2:.2e} (gate {w.gate:g})")
    return res


def run(req: Request, say: Say) -> ValidateResult:
    import torch

    if req.threads:
        torch.set_num_threads(req.threads)
    spec, dev, cfg = _resolved(req, say)
    out = Path(req.out)
    out.mkdir(parents=True, exist_ok=True)

    classes = _candidates(req, spec, cfg, say)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
    torch.manual_seed(0)
    say.stage(
        "build",
        f"{spec.name} ({cfg.variant}, batch {cfg.batch}{', seq ' + str(cfg.seq) if cfg.seq else ''}, "
        f"{cfg.dtype}, {dev})",
    )
    step = None
    try:
        with contextlib.ExitStack() as stack:
            built = {c.cls: stack.enter_context(record_constructions(c.cls)) for c in classes}
            step = spec.build(cfg, dev)
        sub = _substituted(step, classes, built, dev, say)

        res = _checked(req, spec.name, cfg, step, sub, dev, say)
        timing, m = _timing(req, step, sub.use, dev, say)

        n_prof = req.profile_steps or 3
        env = environment(dev)
        rep_dicts = [dict(plain(r), candidate=str(c.candidate)) for r, c in zip(sub.replacements, classes)]
        date = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for side, name, step_ms in (("base", BASE_TRACE, m["base_ms"]), ("variant", VARIANT_TRACE, m["variant_ms"])):
            say.stage("profile", f"{side}: {n_prof} step(s) with module ranges")
            sub.use(side)
            handles = module_ranges(step)
            try:
                model = {"domain": spec.domain, "model": spec.model, "params": step.params, "info": dict(step.info)}
                manifest = _side_manifest(side, name, cfg, model, dev, env, rep_dicts, step_ms, timing["method"])
                manifest.update(command=req.command, date=date, trace=name)
                if req.graphs:  # the capture profiled, then its replays (headroom.validate.graphs)
                    from headroom.validate.graphs import record_graph_trace

                    record_graph_trace(step, dev, out / name, manifest, cfg, record_trace, steps=n_prof)
                else:
                    record_trace(step, dev, out / name, manifest, steps=n_prof)
            finally:
                remove(handles)
            sub.use("base")
        peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    finally:
        if step is not None:
            step.close()

    record = {
        "schema": RUN_SCHEMA,
        "tool": "headroom validate",
        "workload": spec.name,
        "config": plain(cfg),
        "device": str(dev),
        "gpu": env.get("gpu"),
        "replacements": rep_dicts,
        "check": plain(res),
        "timing": timing,
        "profiled_steps": n_prof,
        "traces": {"base": BASE_TRACE, "variant": VARIANT_TRACE},
        "peak_memory_gb": round(peak, 2) if peak is not None else None,
        "command": req.command,
        "date": date,
    }
    return _write(req, record, out, say)


def _resolved(req: Request, say: Say) -> tuple[WorkloadSpec, Any, RunConfig]:
    """The workload, the device and the run's configuration the request names (a CPU's scaling said)."""
    if req.workload_file:
        load_workload_file(req.workload_file)
    spec = get_workload(req.workload)
    dev = resolve_device(req.device)
    cfg = spec.resolve(Options(**req.options), dev.type)
    if cfg.compile:
        raise UserError("validate swaps modules of an eager model; --compile is not supported")
    for note in cfg.notes:
        say.note(f"scaled for the CPU: {note}")
    return spec, dev, cfg


def _substituted(step: Any, classes: list[Any], built: dict[Any, Any], dev: Any, say: Say) -> Any:
    """Every instance of the replaced classes swapped for its candidate (weights tied), each replaced module's calls
    per step counted, and one variant step run; the base side in use."""
    say.stage("substitute", "ModelNew(*get_init_inputs()) for every instance, weights tied to the originals")
    sub = substitute(step.modules, classes, built, dev, step.train)
    for r in sub.replacements:
        say.note(
            f"{r.module}: {len(r.paths)} instance(s) -> {r.candidate.name} "
            f"({'tied' if r.tied else 'own copy of the'} weights)"
        )
    say.stage("calls", "one base step counting the replaced modules' calls")
    for r in sub.replacements:
        r.calls_per_step = len(record_calls(step, r.cls, instances_of(step.modules, r.cls)))
    say.stage("candidate-step", "one variant step")
    sub.use("variant")
    step()
    sub.use("base")
    return sub


def _side_manifest(
    side: str,
    name: str,
    cfg: RunConfig,
    model: dict[str, Any],
    dev: Any,
    env: dict[str, Any],
    replacements: list[dict[str, Any]],
    step_ms: float,
    method: str,
) -> dict[str, Any]:
    """One side's trace manifest, less the command, date and trace name: the configuration, the model, the
    environment, the replacements, the side's step time from the interleaved rounds."""
    return {
        "tool": "headroom validate",
        "side": side,
        **plain(cfg),
        **model,
        "device_type": dev.type,
        **env,
        "replacements": replacements,
        "timing": {"step_ms": step_ms, "method": method, "source": "interleaved rounds (headroom validate)"},
    }


def _write(req: Request, record: dict, out: Path, say: Say) -> ValidateResult:
    """run.json, then the result from it and the two traces (with the a-priori inputs kept beside them)."""
    from headroom.trace.analysis import analyze

    (out / RUN_FILE).write_text(dumps(record, indent=1) + "\n")
    say.stage("project", "the a-priori estimate (verify's result on the base trace); diagnostics from the variant")
    inputs = _keep_inputs(req, out)
    result = saved_form(compute(record, analyze(out / BASE_TRACE), analyze(out / VARIANT_TRACE), inputs, out))
    (out / RESULT_FILE).write_text(dumps(result, indent=1) + "\n")
    return result
