"""`headroom verify --graphs` on a GPU: what it says of honest and capture-breaking candidates, and the gated
clock against a plain CUDA graph replay (docs/verify.md, "Under CUDA graphs").

    PYTHONPATH=. python lab/probes/verify_graphs.py --out /tmp/verify_graphs.json [--kernelbench DIR]

Problems: KernelBench level 1 GELU (26), softmax (23) and square matmul (1), their sizes shrunk so that the
run takes under 150 s on an H100. Candidates: ``identical`` (``ModelNew = Model``; expected: capture ``ok``,
verdict pass or inconclusive) on each; on the GELU also ``item`` (``.item()`` inside forward) and
``nonzero`` (``torch.nonzero``: a data-dependent shape), both expected ``breaks capture`` (verdict error).
For each problem it also times the reference in this process by a plain capture and replay on CUDA events
(one replay, median of 20; 20 replays of one graph back to back; 16 graphs on inputs of their own replayed
back to back, median of 20) and writes these next to the harness's gated clock, to back the claim that the
gated clock measures what a graph replay runs. Without a GPU it says so and exits 2. Where the harness cannot
map a sealed child's CUDA IPC outputs (`mapping of buffer object failed`, with or without --graphs), run it
with HEADROOM_VERIFY_SEAL_OFF=all.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (file in level1, the globals shrunk so that the run is short)
PROBLEMS = {
    "gelu": ("26_GELU_.py", {"batch_size": 256, "dim": 16384}),
    "softmax": ("23_Softmax.py", {"batch_size": 256, "dim": 16384}),
    "matmul": ("1_Square_matrix_multiplication_.py", {"N": 1024}),
}

IDENTICAL = "\n\nModelNew = Model  # control: the reference itself\n"
ITEM = '''

class ModelNew(Model):
    """Breaks capture: a host synchronisation (.item()) inside forward."""

    def forward(self, *args):
        y = super().forward(*args)
        if float(y.reshape(-1)[0].item()) != float(y.reshape(-1)[0].item()):
            return y * 2
        return y
'''
NONZERO = '''

class ModelNew(Model):
    """Breaks capture: a data-dependent shape (torch.nonzero) inside forward; the output is unchanged."""

    def forward(self, *args):
        y = super().forward(*args).clone()
        flat = y.reshape(-1)
        flat[torch.nonzero(flat < -1e30).reshape(-1)] = 0
        return y
'''
CANDIDATES = {"identical": IDENTICAL, "item": ITEM, "nonzero": NONZERO}
BREAKERS = ("item", "nonzero")


def kernelbench(given: str | None) -> Path | None:
    for c in (
        [given]
        if given
        else [".kb", str(REPO / ".kb"), "../shared/kernelbench", str(REPO.parent / "shared" / "kernelbench")]
    ):
        if (Path(c) / "level1").is_dir():
            return Path(c)
    return None


def shrunk(src: str, sizes: dict) -> str:
    for name, value in sizes.items():
        src, n = re.subn(rf"^{name}\s*=.*$", f"{name} = {value}", src, flags=re.M)
        if n != 1:
            raise SystemExit(f"verify_graphs: {name} is not a global of the problem (the file changed?)")
    return src


def write_files(kb: Path, work: Path, names: list[str]) -> dict:
    """Per problem: its shrunk file and its candidates (the problem's source with a ModelNew)."""
    out = {}
    for name in names:
        fname, sizes = PROBLEMS[name]
        src = shrunk((kb / "level1" / fname).read_text(), sizes)
        prob = work / f"{name}.py"
        prob.write_text(src)
        cands = {}
        for cand, tail in CANDIDATES.items():
            if cand in BREAKERS and name != names[0]:
                continue  # the capture breakers on the first problem only
            p = work / f"{name}_{cand}.py"
            p.write_text(src + tail)
            cands[cand] = p
        out[name] = (prob, cands)
    for p in work.iterdir():
        p.chmod(0o644)  # the candidate's uid reads them
    return out


def _captured(model, xs: list):
    """One call of ``model`` on ``xs`` captured (after three warm-up calls on a side stream)."""
    import torch

    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(*xs)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(*xs)
    return g


def _timed(replay, times: int) -> float:
    """CUDA events around ``replay()``, ms; the median over ``times`` calls."""
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    each = []
    for _ in range(times):
        a.record()
        replay()
        b.record()
        b.synchronize()
        each.append(a.elapsed_time(b))
    return statistics.median(each)


def replay_ms(problem: Path, replays: int = 20, sets: int = 16) -> dict:
    """The reference captured in a CUDA graph and replayed, on CUDA events (TF32 on, as the harness's
    headline reference): one replay (median of ``replays``); ``replays`` replays of one graph back to back,
    per replay (its inputs stay in L2); and ``sets`` graphs on inputs of their own replayed back to back,
    per replay, median of ``replays`` (fresh inputs each call, as a phase of the gated clock has)."""
    import torch

    from headroom.verify import problem as prob
    from headroom.verify.precision import set_tf32

    set_tf32(True)
    p = prob.load_problem(problem)
    model = prob.build_model(p.Model, p, 0, torch.device("cuda"))
    inputs = [[x.cuda() if isinstance(x, torch.Tensor) else x for x in p.module.get_inputs()] for _ in range(sets)]
    graphs = [_captured(model, xs) for xs in inputs]
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    one = graphs[0]

    def same() -> None:
        for _ in range(replays):
            one.replay()

    def fresh() -> None:
        for g in graphs:
            g.replay()

    return {
        "replay_ms_median": _timed(one.replay, replays),
        "replay_ms_back_to_back": _timed(same, 1) / replays,
        "replay_ms_fresh_inputs": _timed(fresh, replays) / sets,
        "fresh_input_sets": sets,
    }


def summarise(r) -> dict:
    t = r.timing or {}
    return {
        "verdict": r.verdict,
        "capture": r.capture,
        "reason": r.reason,
        "speedup": r.speedup,
        "clock": t.get("clock"),
        "candidate_clock": t.get("candidate_clock"),
        "iters_per_phase": t.get("iters_per_phase"),
        "rounds": t.get("rounds"),
        "reference_ms": (t.get("reference_tf32") or {}).get("median"),
        "candidate_ms": (t.get("candidate") or {}).get("median"),
        "reference_standalone_ms": t.get("reference_standalone_ms"),
        "failed": [c.name for c in r.checks if not c.passed],
        "elapsed_s": r.elapsed_s,
    }


def expected(cand: str, s: dict) -> bool:
    if cand in BREAKERS:
        return s["verdict"] == "error" and str(s["capture"]).startswith("breaks capture:")
    return (
        s["capture"] == "ok" and not s["failed"] and s["verdict"] in ("pass", "inconclusive") and s["clock"] == "gated"
    )


def verify_problem(name: str, prob: Path, cands: dict, budget_s: float) -> list[dict]:
    from headroom.verify import VerifyOptions, prepare_reference, verify_candidate
    from headroom.verify.timing import Policy

    policy = Policy(rounds=6, max_rounds=12, budget_s=budget_s, calibration_phases=3, target_phase_ms=5.0)
    ref = prepare_reference(prob, VerifyOptions(device="cuda", graphs=True, policy=policy))
    runs = []
    try:
        for cand, path in cands.items():
            s = {"problem": name, "candidate": cand, **summarise(verify_candidate(prob, path, reference=ref))}
            s["as_expected"] = expected(cand, s)
            runs.append(s)
            print(
                f"{name} <- {cand}: {s['verdict']} capture {s['capture']!r} clock {s['clock']} "
                f"({'as expected' if s['as_expected'] else 'UNEXPECTED'}) {s['reason'] or ''}"[:400],
                flush=True,
            )
    finally:
        ref.close()
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument(
        "--kernelbench", default=None, help="KernelBench checkout (default: .kb, then ../shared/kernelbench)"
    )
    ap.add_argument("--problems", nargs="*", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--budget", type=float, default=6.0, help="seconds of timing rounds per candidate")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch

    if not torch.cuda.is_available():
        print("verify_graphs: no CUDA GPU here; verify --graphs captures CUDA graphs and needs one", file=sys.stderr)
        return 2
    kb = kernelbench(args.kernelbench)
    if kb is None:
        print("verify_graphs: no KernelBench checkout (a folder with level1/); give --kernelbench DIR", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="headroom-graphs-"))
    work.chmod(0o755)
    t0 = time.monotonic()
    try:
        files = write_files(kb, work, args.problems)
        runs, clocks = [], []
        for name, (prob, cands) in files.items():
            got = verify_problem(name, prob, cands, args.budget)
            runs.extend(got)
            honest = next(s for s in got if s["candidate"] == "identical")
            rep = replay_ms(prob)
            gated = honest["reference_ms"]
            clocks.append(
                {
                    "problem": name,
                    "gated_ms": gated,
                    "gated_standalone_ms": honest["reference_standalone_ms"],
                    **rep,
                    "gated_over_replay": gated / rep["replay_ms_median"] if gated else None,
                    "gated_over_fresh_replay": gated / rep["replay_ms_fresh_inputs"] if gated else None,
                }
            )
            print(
                f"{name}: reference {gated or float('nan'):.4g} ms on the gated clock; graph replay "
                f"{rep['replay_ms_median']:.4g} ms (one replay, median of 20), {rep['replay_ms_back_to_back']:.4g} "
                f"ms back to back, {rep['replay_ms_fresh_inputs']:.4g} ms back to back on fresh inputs",
                flush=True,
            )
        doc = {
            "tool": "lab/probes/verify_graphs.py",
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "kernelbench": str(kb),
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": runs,
            "clocks": clocks,
            "expected": "identical: capture ok, gated clock, pass or inconclusive; item and nonzero: verdict "
            "error, capture 'breaks capture: ...'",
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"{sum(r['as_expected'] for r in runs)} of {len(runs)} as expected in {doc['wall_s']} s -> {out}")
        return 0 if all(r["as_expected"] for r in runs) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
