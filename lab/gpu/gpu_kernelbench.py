"""headroom verify against KernelBench's own files on one GPU, in one command, within a time budget.

    python3 lab/gpu/gpu_kernelbench.py --out $OUT                  # on the H200 (~8 min)
    python3 lab/gpu/gpu_kernelbench.py --out /tmp/kb --dry-run     # on a CPU: scaled shapes, a few problems
    python3 lab/gpu/gpu_kernelbench.py --render docs/gpu/kernelbench_l1.json   # Markdown for docs/verify.md

Order of work (each step skipped, and recorded in ``skipped``, once the budget is spent):

1. builds: every ``load_inline`` candidate (KernelBench's ``examples/`` and ``adversarial/``) is
   compiled first, in parallel across the CPU cores, into a per-run extensions directory, so no
   build time lands in a candidate's time limit or clock; meanwhile ``level1/``'s all-zeros
   candidates run (expected ``fail``: they fail at their first correctness trial, before any
   timing, so the CPU load of the builds cannot bias them);
2. ``examples/``: each ``model_new_ex_X.py`` against ``model_ex_X.py``
   (``model_new_ex_add_triton.py`` against ``model_ex_add.py``), expected ``pass``;
3. ``adversarial/``: KernelBench's three kernels against ``level1/1_Square_matrix_multiplication_``,
   expected ``fail``;
4. ``level1/``: all 100 problems at full size with KernelBench's reference as the candidate
   (expected ``pass`` or ``inconclusive``);
5. ``benchmarks/kernelbench_l1/candidates/``: our honest re-implementations and cheats of 14
   level-1 problems;
6. ``level1/`` again, as time allows: partial-write and shape-cache candidates (expected ``fail``);
7. ``sealed``: the sealed-harness attack corpus (``tests/cheaters/sealed/``) against
   ``tests/cheaters/problems/gelu_linear.py`` (the problem the attacks are written for: their
   ``ModelNew(in_features, out_features)``), each against a fresh reference of a private copy of
   it; attacks expected ``fail`` or ``error``, probes and refused attacks expected ``pass``;
8. ``isolation``: the isolation attacks (``tests/cheaters/isolation/``) against the same problem, each
   with the verdicts ``ISOLATION_EXPECTED`` allows on a CPU and on a GPU.

The GPU run of the sealed harness (docs/verify.md, "On the GPU")::

    source lab/gpu/gpu_setup.sh && timeout -k 15 420 python3 lab/gpu/gpu_kernelbench.py --out $OUT --preset sealed

``--preset sealed`` is ``--groups isolation,sealed,level1 --only <PRESET_LEVEL1> --max-rounds 16 --budget 330
--summary OUT/verify_gpu.json``: the isolation attacks, the sealed corpus, then 20 level-1 problems with
the reference as its own candidate (expected ``pass`` at ~1.00x), about 6 minutes on an H100 (whatever the
budget leaves out is listed in ``skipped``). Explicit options after it override it.

``--only`` picks the level-1 problems of every group, ``--extra-only`` those of ``level1-extra``
(default: ``--only``), so one command reruns a list, e.g.::

    python3 lab/gpu/gpu_kernelbench.py --out $OUT --groups level1,sealed,level1-extra \
        --only 45 68 70 90 19 23 --extra-only 90 97 --budget 480

Writes ``OUT/kernelbench_l1.json`` (headroom verify suite format, so ``headroom project
--speedups`` reads it; every result carries ``group``, ``kind``, ``expected`` and ``as_expected``,
plus the builds, the skipped work and the wall time of the whole run) after every problem, and
``OUT/kernelbench_l1.log``. Needs torch and headroom's dependencies (msgspec) only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

GENERIC = REPO / "tests" / "cheaters" / "kernelbench"
OURS = REPO / "benchmarks" / "kernelbench_l1" / "candidates"
SEALED = REPO / "tests" / "cheaters" / "sealed"
ISOLATION = REPO / "tests" / "cheaters" / "isolation"
SEALED_PROBLEM = REPO / "tests" / "cheaters" / "problems" / "gelu_linear.py"
# sealed candidates that are honest math once their attack is refused (tests/test_verify_sealed.py)
SEALED_HONEST = ("attack_reference_memory", "attack_plant_pyc", "attack_threads", "probe_reach", "probe_state")
# Each sealed candidate's verdict per seal (docs/verify.md, "Threat model"): "uid" where the candidate
# runs as an unprivileged uid in its own network namespace (a root harness on a CPU; on a GPU with
# HEADROOM_VERIFY_SEAL_CUDA_UID=1), "same-uid" on a GPU where it keeps the harness's (the default seal),
# "cpu-same-uid" on a CPU where a root harness keeps both (HEADROOM_VERIFY_SEAL_OFF=uid,ns: the dry run's).
_F, _E, _P = "fail", "error", "pass"
SEALED_EXPECTED = {
    "attack_clone_parent": {"uid": _F, "same-uid": _F, "cpu-same-uid": _F},  # containment: the sibling is in its cgroup
    "attack_forkserver": {
        "uid": _E,
        "same-uid": _F,
        "cpu-same-uid": _F,
    },  # socket out of reach / the server's stray child
    "attack_mount_proc": {
        "uid": _E,
        "same-uid": _F,
        "cpu-same-uid": _F,
    },  # mount refused / its own namespace, contained
    "attack_plant_pyc": {"uid": _P, "same-uid": _P, "cpu-same-uid": _P},  # the reference imports a private copy
    # /proc/<pid>/mem refused / weights on the device / zeroed on a CPU: the reference's timed output against the
    # truth fails the candidate (containment)
    "attack_reference_memory": {"uid": _P, "same-uid": _P, "cpu-same-uid": _F},
    "attack_state_between_calls": {"uid": _E, "same-uid": _E, "cpu-same-uid": _E},  # the state check stops the child
    "attack_threads": {"uid": _P, "same-uid": _P, "cpu-same-uid": _P},  # honest math on the same CPUs
    "attack_trial_flags": {"uid": _F, "same-uid": _F, "cpu-same-uid": _F},  # coarse in its trials too
    "attack_trial_frame": {"uid": _F, "same-uid": _F, "cpu-same-uid": _F},  # timed_outputs: sampled relative L2
    "attack_trial_snapshot": {"uid": _F, "same-uid": _F, "cpu-same-uid": _F},  # coarse in its trials too
    "probe_reach": {"uid": _P, "same-uid": _F, "cpu-same-uid": _F},  # same uid: it stops the fork server (containment)
    "probe_state": {"uid": _P, "same-uid": _P, "cpu-same-uid": _P},
}


_HONEST = frozenset({"pass", "inconclusive"})  # honest math: inconclusive for timing noise only
# tests/cheaters/isolation/ (tests/test_verify_isolation.py): the verdicts each may end with, on a CPU (a root
# harness) and on a GPU (the ring a CUDA allocation the legacy IPC maps read-write; outputs segments).
ISOLATION_EXPECTED = {
    "attack_release_precompute": {"cpu": {_F}, "cuda": {_F}},  # protocol: a forged null reply
    "attack_timer_storm": {"cpu": {_E}, "cuda": {_E}},  # seccomp: timerfd_create refused at import
    "attack_ring_truncate": {"cpu": {_E}, "cuda": _HONEST},  # sealed memfd / no ring descriptor on a GPU
    "attack_ring_write": {"cpu": {_E}, "cuda": {_E, _F}},  # every write refused / a write fails no_input_mutation
    "attack_ring_inplace": {"cpu": {_E}, "cuda": {_F}},  # read-only mapping: SIGSEGV / no_input_mutation
    "attack_output_span": {"cpu": {_F}, "cuda": {_F, _E} | _HONEST},  # strides refused; GPU outputs are segments
    "attack_tmp_leftover": {"cpu": _HONEST, "cuda": _HONEST},  # honest; its files removed
    "attack_import_memory": {"cpu": _HONEST, "cuda": _HONEST},  # honest; flagged memory_footprint
    "attack_widen_cpus": {"cpu": _HONEST, "cuda": _HONEST},  # honest; confined to its half of the CPUs
}


# 20 level-1 problems, the quickest to verify on the H200 (docs/gpu/measure/kernelbench_l1.c.json.gz): the
# identical-kernel control of ``--preset sealed``; 1 (the square matmul) and 19, 23, 40, 97 for their kinds
PRESET_LEVEL1 = (
    "1",
    "19",
    "23",
    "40",
    "97",
    "66",
    "72",
    "75",
    "85",
    "98",
    "49",
    "51",
    "53",
    "83",
    "43",
    "100",
    "94",
    "96",
    "46",
    "59",
)
PRESETS = {
    "sealed": {
        "groups": "isolation,sealed,level1",
        "only": list(PRESET_LEVEL1),
        "max_rounds": 16,
        "budget": 330.0,
        "summary": "verify_gpu.json",
    }
}


def seal_kind(device: str) -> str | None:
    """Which column of ``SEALED_EXPECTED`` applies on ``device`` with this process's environment (None: a
    CPU harness that is not root, or that leaves off other mechanisms than exactly the uid and the network
    namespace: no column)."""
    from headroom.verify import sandbox

    off = os.environ.get(sandbox.OFF_ENV, "")
    uid = os.geteuid() == 0 and "uid" not in off
    if device.startswith("cuda"):
        return "uid" if uid and os.environ.get(sandbox.CUDA_UID_ENV) == "1" else "same-uid"
    if uid:
        return "uid"
    return (
        "cpu-same-uid"
        if os.geteuid() == 0 and {m.strip() for m in off.split(",") if m.strip()} == {"uid", "ns"}
        else None
    )


EXPECTED = {
    "reference": "pass",
    "zeros": "fail",
    "partial_write": "fail",
    "shape_cache": "fail",
    "example": "pass",
    "adversarial": "fail",
    "honest": "pass",
    "cheat": "fail",
    "sealed_probe": "pass",
    "sealed_attack": "fail",
    "isolation": "fail",
}


GROUPS = ("zeros", "examples", "adversarial", "level1", "candidates", "level1-extra", "sealed", "isolation")


@dataclass
class Item:
    group: str  # examples | adversarial | level1 | level1-extra
    problem: Path
    candidates: list = field(default_factory=list)  # (path, kind)


def find_kernelbench(arg: str | None) -> Path:
    for c in (
        arg,
        os.environ.get("HEADROOM_KERNELBENCH"),
        REPO / "shared" / "kernelbench",
        REPO.parent / "shared" / "kernelbench",
        Path("/work/shared/kernelbench"),
    ):
        if c and (Path(c) / "level1").is_dir():
            return Path(c)
    sys.exit("KernelBench not found: pass --kernelbench DIR or set HEADROOM_KERNELBENCH")


def _level1(kb: Path, only: list[str] | None) -> list[Path]:
    level1 = sorted((kb / "level1").glob("*.py"), key=lambda p: int(p.stem.split("_")[0]))
    if only:
        level1 = [p for p in level1 if p.stem.split("_")[0] in only or p.stem in only]
    return level1


def while_building(kb: Path, only: list[str] | None) -> list[Item]:
    """Correctness-only work (candidates that fail before any timing) to overlap with the builds."""
    return [Item("level1", p, [(GENERIC / "zeros.py", "zeros")]) for p in _level1(kb, only)]


def plan(kb: Path, only: list[str] | None, extra_only: list[str] | None = None) -> list[Item]:
    """Everything after the builds, in order."""
    level1 = _level1(kb, only)
    extra = _level1(kb, extra_only) if extra_only else level1
    items: list[Item] = []
    ex = kb / "examples"
    for cand in sorted(ex.glob("model_new_ex_*.py")):
        stem = cand.stem.replace("model_new_ex_", "")
        prob = ex / f"model_ex_{stem.replace('_triton', '')}.py"
        if prob.is_file():
            items.append(Item("examples", prob, [(cand, "example")]))
    matmul = kb / "level1" / "1_Square_matrix_multiplication_.py"
    adv = sorted((kb / "adversarial").glob("*.py"))
    if adv:
        items.append(Item("adversarial", matmul, [(c, "adversarial") for c in adv]))
    for p in level1:
        items.append(Item("level1", p, [(GENERIC / "reference.py", "reference")]))
    for p in level1:
        sub = OURS / p.stem
        if sub.is_dir():
            cands = sorted(sub.glob("*.py"))
            items.append(
                Item("candidates", p, [(c, "cheat" if c.stem.startswith("cheat_") else "honest") for c in cands])
            )
    for p in extra:
        items.append(
            Item(
                "level1-extra",
                p,
                [(GENERIC / "partial_write.py", "partial_write"), (GENERIC / "shape_cache.py", "shape_cache")],
            )
        )
    for a in sorted(SEALED.glob("*.py")):
        if not a.name.startswith("_"):
            items.append(
                Item("sealed", SEALED_PROBLEM, [(a, "sealed_probe" if a.stem in SEALED_HONEST else "sealed_attack")])
            )
    for a in sorted(ISOLATION.glob("*.py")):
        if not a.name.startswith("_"):
            items.append(Item("isolation", SEALED_PROBLEM, [(a, "isolation")]))
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for kernelbench_l1.json and kernelbench_l1.log")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds of work after which nothing new starts")
    ap.add_argument("--kernelbench", help="KernelBench directory (default: $HEADROOM_KERNELBENCH, ../shared)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=6, help="minimum interleaved timing rounds per candidate (>= 6)")
    ap.add_argument("--max-rounds", type=int, default=24, help="rounds at most (they stop once the interval is tight)")
    ap.add_argument("--target-phase-ms", type=float, default=30.0, help="GPU time of one timed phase")
    ap.add_argument(
        "--groups",
        default="zeros,examples,adversarial,level1,candidates,level1-extra,sealed",
        help="which work to do, in this order (comma-separated): " + ", ".join(GROUPS),
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a candidate may work")
    ap.add_argument("--build-timeout", type=float, default=240.0)
    ap.add_argument("--only", nargs="*", help="level-1 problem numbers or names (default: all 100)")
    ap.add_argument("--extra-only", nargs="*", help="level-1 problems of level1-extra (default: --only)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, scaled shapes, quick rounds (a test of the script)")
    ap.add_argument("--render", metavar="RESULTS", help="print the Markdown tables of a results file and exit")
    ap.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="a named run (sealed: the GPU run of the sealed harness, see the module docstring)",
    )
    ap.add_argument(
        "--summary",
        metavar="JSON",
        help="also write a compact summary there (verdicts, speedups, "
        "intervals, round orders, CPU split) after every problem",
    )
    args = ap.parse_args(argv)
    apply_preset(args, argv if argv is not None else sys.argv[1:])
    if args.render:
        print(render_markdown(json.loads(Path(args.render).read_text())))
        return 0
    if not args.out:
        ap.error("--out is required")
    bad = [g for g in args.groups.split(",") if g.strip() and g.strip() not in GROUPS]
    if bad:
        ap.error(f"--groups: unknown group(s) {', '.join(bad)} (known: {', '.join(GROUPS)})")
    return run(args)


def apply_preset(args: argparse.Namespace, argv: list[str]) -> None:
    """``--preset``'s values, where the command line does not give the option itself."""
    if not args.preset:
        return
    given = {a.split("=", 1)[0] for a in argv}
    for key, value in PRESETS[args.preset].items():
        if f"--{key.replace('_', '-')}" not in given:
            setattr(args, key, value)
            if key == "summary" and args.out:
                args.summary = str(Path(args.out) / value)


def run(args: argparse.Namespace) -> int:
    import signal

    import torch

    from headroom.jsonio import plain
    from headroom.verify import Policy, VerifyOptions, prepare_reference, verify_candidate, write_json
    from headroom.verify.build import build_all, new_build_dir
    from headroom.verify.results import VerifyResult, suite_document

    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "kernelbench_l1.log", "w")

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    def _terminate(signum, frame):  # `timeout` sends TERM: unwind, so the running children are killed
        raise SystemExit(124)

    signal.signal(signal.SIGTERM, _terminate)
    kb = find_kernelbench(args.kernelbench)
    device = "cpu" if args.dry_run else VerifyOptions(device=args.device).resolved_device()  # builds need it resolved
    policy = Policy(
        rounds=args.rounds,
        max_rounds=args.max_rounds,
        calibration_phases=3,
        target_phase_ms=3.0 if args.dry_run else args.target_phase_ms,
        budget_s=15.0,
        max_iters=20 if args.dry_run else 2000,
        samples_per_output=64 if args.dry_run else 256,
    )
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    build_dir = new_build_dir()
    base = dict(
        device=device,
        policy=policy,
        timeout=args.timeout,
        build_timeout=args.build_timeout,
        reference_timeout=300.0,
        build_dir=build_dir,
    )
    device_name = torch.cuda.get_device_name(0) if device != "cpu" and torch.cuda.is_available() else "cpu"
    log(f"torch {torch.__version__}, device {device_name}, KernelBench {kb}, budget {args.budget:.0f} s")
    items = sorted(
        (it for it in plan(kb, args.only, args.extra_only) if it.group in groups), key=lambda it: groups.index(it.group)
    )
    results: list[dict] = []
    skipped: list[str] = []
    builds: dict = {}
    free_mib: list = []  # [problem, MiB free on the device after it]: a leak in the harness shows here

    def save() -> None:
        doc = suite_document(
            [],
            device_name,
            suite="KernelBench",
            kernelbench=str(kb),
            torch=str(torch.__version__),
            budget_s=args.budget,
            wall_s=round(time.monotonic() - t0, 1),
            skipped=skipped,
            builds=[plain(b) for b in list(builds.values())],
            dry_run=args.dry_run,
            free_mib_after=free_mib,
        )
        doc["results"] = results
        write_json(doc, out / "kernelbench_l1.json")
        if args.summary:
            write_json(summary(doc), Path(args.summary))

    def verify_item(it: Item) -> None:
        label = f"{it.group}:{it.problem.stem}"
        if time.monotonic() - t0 > args.budget:
            skipped.append(label)
            return
        problem = it.problem
        env = {"HEADROOM_TEST_PROBLEM": str(problem)}
        report = None
        if it.group in ("sealed", "isolation"):  # a private copy of the problem and a report file every uid may write
            import shutil
            import tempfile

            d = Path(tempfile.mkdtemp(prefix="headroom-sealed-"))
            d.chmod(0o1777)
            (d / "problem").mkdir()
            problem = d / "problem" / it.problem.name
            shutil.copy(it.problem, problem)
            report = d / "report"
            env = {
                "HEADROOM_TEST_PROBLEM": str(problem),
                "HEADROOM_SEALED_DIR": str(SEALED),
                "HEADROOM_TEST_REPORT": str(report),
            }
        opts = VerifyOptions.quick(**base, env=env) if args.dry_run else VerifyOptions(**base, env=env)
        try:
            ref = prepare_reference(problem, opts, progress=log)
        except Exception as e:  # a broken problem must not end the run
            log(f"{label}: reference failed: {type(e).__name__}: {e}")
            for c, kind in it.candidates:
                err = VerifyResult(it.problem.stem, str(c), "error", reason=f"reference: {e}")
                results.append(_tag(plain(err), it, kind, seal_kind(device), device))
            save()
            return
        try:
            for c, kind in it.candidates:
                if time.monotonic() - t0 > args.budget:
                    skipped.append(f"{label}/{c.name}")
                    continue
                try:
                    r = plain(verify_candidate(problem, c, reference=ref, built=builds.get(str(c))))
                except Exception as e:
                    log(traceback.format_exc(limit=4))
                    r = plain(
                        VerifyResult(it.problem.stem, str(c), "error", reason=f"harness: {type(e).__name__}: {e}")
                    )
                if report is not None:
                    r["report"] = report.read_text(errors="replace")[:2000] if report.exists() else ""
                results.append(_tag(r, it, kind, seal_kind(device), device))
                log(_line(results[-1]))
        finally:
            ref.close()  # frees the harness's GPU memory of this problem (its model, ring, cache)
            if device != "cpu":
                free, total = torch.cuda.mem_get_info(torch.device(device))
                free_mib.append([it.problem.stem, round(free / 2**20)])
                log(f"{label}: {free / 2**20:.0f} of {total / 2**20:.0f} MiB free after the problem")
            save()

    early = while_building(kb, args.only) if "zeros" in groups else []
    pairs = [(it.problem, c) for it in early + items for c, _ in it.candidates]
    n_builds = sum(1 for _, c in dict.fromkeys(pairs) if "load_inline" in c.read_text(errors="replace"))
    log(
        f"building {n_builds} load_inline candidates in parallel; meanwhile the all-zeros candidates "
        f"(correctness only: they fail before any timing, so the build load cannot bias them)"
    )
    builder = threading.Thread(
        target=lambda: builds.update(
            build_all(
                list(dict.fromkeys(pairs)),
                device,
                build_dir,
                args.build_timeout,
                build_dir,
                env={},
                workers=None,
                progress=log,
            )
        ),
        daemon=True,
    )
    builder.start()
    for it in early:
        verify_item(it)
    builder.join()
    log(f"builds done: {sum(b.ok for b in builds.values())} ok, {sum(not b.ok for b in builds.values())} failed")
    save()
    for it in items:
        verify_item(it)
    save()
    n_ok = sum(r["as_expected"] for r in results)
    log(
        f"done: {len(results)} results, {n_ok} as expected, {len(skipped)} items skipped; wall "
        f"{time.monotonic() - t0:.1f} s -> {out / 'kernelbench_l1.json'}"
    )
    logf.close()
    return 0


def _tag(r: dict, it: Item, kind: str, seal: str | None = None, device: str = "cpu") -> dict:
    r["candidate"] = os.path.relpath(r["candidate"], REPO) if r["candidate"].startswith(str(REPO)) else r["candidate"]
    expected = EXPECTED[kind]
    stem = Path(r["candidate"]).stem
    if it.group == "sealed" and seal is not None and stem in SEALED_EXPECTED:
        expected = SEALED_EXPECTED[stem][seal]
        r["seal"] = seal
    if it.group == "isolation" and stem in ISOLATION_EXPECTED:
        allowed = ISOLATION_EXPECTED[stem]["cuda" if device.startswith("cuda") else "cpu"]
        r.update(group=it.group, kind=kind, expected="|".join(sorted(allowed)), as_expected=r["verdict"] in allowed)
        return r
    r.update(group=it.group, kind=kind, expected=expected)
    if expected == "pass":
        r["as_expected"] = r["verdict"] in ("pass", "inconclusive")
    elif it.group == "sealed":  # each sealed attack is caught one known way on each seal
        r["as_expected"] = r["verdict"] == expected
    else:
        r["as_expected"] = r["verdict"] != "pass"
    return r


def summary(doc: dict) -> dict:
    """The run in a few lines per result: what the GPU run is judged on (``--summary``)."""
    rows = []
    for r in doc.get("results", []):
        t = r.get("timing") or {}
        ci = r.get("speedup_ci") or t.get("speedup_ci")
        split = t.get("cpu_split") or {}
        rows.append(
            {
                "group": r.get("group"),
                "problem": r.get("problem"),
                "candidate": Path(r["candidate"]).name,
                "kind": r.get("kind"),
                "verdict": r.get("verdict"),
                "expected": r.get("expected"),
                "as_expected": r.get("as_expected"),
                "speedup": r.get("speedup"),
                "speedup_estimate": t.get("speedup_estimate"),
                "speedup_ci": ci,
                "ci_width": (ci[1] / ci[0]) if ci and ci[0] else None,
                "order_medians": t.get("order_medians"),
                "rounds": t.get("rounds"),
                "reference_cpu_drift": t.get("reference_cpu_drift"),
                "cpu_split": {k: split.get(k) for k in ("reference", "candidate", "swapped", "disjoint_in_every_round")}
                if split
                else None,
                "failed": [c["name"] for c in r.get("checks", []) if not c["passed"]],
                "reason": (r.get("reason") or "")[:300],
                "elapsed_s": r.get("elapsed_s"),
            }
        )
    groups: dict = {}
    for row in rows:
        g = groups.setdefault(row["group"], {"results": 0, "as_expected": 0, "verdicts": {}})
        g["results"] += 1
        g["as_expected"] += bool(row["as_expected"])
        g["verdicts"][row["verdict"]] = g["verdicts"].get(row["verdict"], 0) + 1
    identical = [row for row in rows if row["kind"] == "reference" and row["verdict"] == "pass"]
    return {
        "device": doc.get("device"),
        "torch": doc.get("torch"),
        "wall_s": doc.get("wall_s"),
        "budget_s": doc.get("budget_s"),
        "dry_run": doc.get("dry_run"),
        "skipped": doc.get("skipped"),
        "groups": groups,
        "unexpected": [row for row in rows if not row["as_expected"]],
        "identical_kernels": {
            "pass": len(identical),
            "speedups": sorted(round(row["speedup"], 4) for row in identical if row["speedup"]),
            "widest_ci": max((row["ci_width"] for row in identical if row["ci_width"]), default=None),
        },
        "results": rows,
    }


def _line(r: dict) -> str:
    failed = [c["name"] for c in r.get("checks", []) if not c["passed"]]
    sp = f" {r['speedup']:.3g}x" if r.get("speedup") else ""
    ci = r.get("speedup_ci")
    why = (", ".join(failed) if failed else (r.get("reason") or ""))[:160]
    return (
        f"{r['problem']} <- {Path(r['candidate']).name}: {r['verdict']}{sp}"
        + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
        + (f" ({why})" if why and r["verdict"] != "pass" else "")
        + _kernels_note(r)
        + ("" if r["as_expected"] else "  [UNEXPECTED]")
    )


def _kernels_note(r: dict) -> str:
    """Whether the reference's timed child and the candidate's ran the same top kernels, and their time."""
    pc = r.get("per_call") or {}
    ref = (pc.get("reference") or {}).get("child") or {}
    cand = pc.get("candidate") or {}
    a = [k["name"] for k in ref.get("top_kernels") or []]
    b = [k["name"] for k in cand.get("top_kernels") or []]
    if not a or not b:
        return ""
    us = (
        f" {ref['kernel_us']:.0f}/{cand['kernel_us']:.0f} us"
        if ref.get("kernel_us") is not None and cand.get("kernel_us") is not None
        else ""
    )
    if a == b:
        return f"; kernels ref/cand{us}: same"
    return f"; kernels ref/cand{us}: DIFFER: [{', '.join(x[:60] for x in a)}] vs [{', '.join(x[:60] for x in b)}]"


def render_markdown(doc: dict) -> str:
    """The tables of docs/verify.md's H200 section, from a results file."""
    rs = doc.get("results", [])

    def x(v) -> str:
        return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"

    def ms(s) -> str:
        return f"{s['median']:.3f}" if isinstance(s, dict) and s.get("median") is not None else "-"

    lines = [
        f"Device: {doc.get('device')}; torch {doc.get('torch')}; whole run {doc.get('wall_s')} s "
        f"(budget {doc.get('budget_s')} s); {len(rs)} results, {sum(r.get('as_expected', False) for r in rs)} "
        f"as expected" + (f"; skipped: {len(doc['skipped'])} items" if doc.get("skipped") else ""),
        "",
    ]
    counts: dict = {}
    for r in rs:
        counts.setdefault((r["group"], r["kind"]), {}).setdefault(r["verdict"], 0)
        counts[(r["group"], r["kind"])][r["verdict"]] += 1
    lines += ["| group | candidate | expected | verdicts |", "|---|---|---|---|"]
    for (g, k), v in counts.items():
        lines.append(f"| {g} | {k} | {EXPECTED[k]} | " + ", ".join(f"{n} {c}" for c, n in sorted(v.items())) + " |")
    if doc.get("builds"):
        lines += ["", "| build | ok | seconds | error |", "|---|---|---:|---|"]
        for b in doc["builds"]:
            lines.append(
                f"| {Path(b['candidate']).name} | {b['ok']} | {b['seconds']} | "
                f"{(b.get('error') or '').splitlines()[0][:80] if b.get('error') else ''} |"
            )
    lines += [
        "",
        "| problem | candidate | verdict | speedup [95% CI] | TF32 ms (ref / cand) | FP32/TF32 | "
        "launches (ref / cand) | failed checks / reason |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rs:
        t = r.get("timing") or {}
        ci = r.get("speedup_ci") or t.get("speedup_ci")
        est = r.get("speedup") or t.get("speedup_estimate")
        sp = f"{est:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") if est else "-"
        fp = None
        if t.get("reference_fp32") and t.get("reference_tf32") and t["reference_tf32"].get("median"):
            fp = t["reference_fp32"]["median"] / t["reference_tf32"]["median"]
        lc = r.get("launches_per_call") or {}
        failed = ", ".join(c["name"] for c in r.get("checks", []) if not c["passed"])
        why = failed or ((r.get("reason") or "")[:90] if r["verdict"] != "pass" else "")
        lines.append(
            f"| {r['problem']} | {Path(r['candidate']).name} | {r['verdict']} | {sp} | "
            f"{ms(t.get('reference_tf32'))} / {ms(t.get('candidate'))} | {x(fp)} | "
            f"{lc.get('reference', '-')} / {lc.get('candidate', '-')} | {why} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
