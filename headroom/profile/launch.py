"""`headroom profile WORKLOAD --nproc N`: one process per GPU (or per CPU slot, with gloo), started by
torch's elastic launcher, the machinery behind torchrun (`torch.distributed.launcher.api.elastic_launch`).

The parent checks the options, launches N ranks on this host (c10d rendezvous on a free port, no
restarts), and waits. Each rank initialises its process group from the launcher's environment
(NCCL on GPUs, gloo on CPUs), builds the workload data-parallel as `--parallel` says (DDP, FSDP2, or
torchrec's sharded tables), and runs the same stages as a one-process profile, starting each stage
together, into ``OUT/<name>/rank-K.json.gz`` with the same manifest plus its place in the run. The
parent then writes ``manifest.json`` and analyses the ranks together (headroom.trace.rank_set).

Every rank runs with NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the GPU machines require; the manifest records it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from headroom.errors import UserError
from headroom.files import check_output_dir
from headroom.jsonio import encoded, member
from headroom.profile.manifest import MANIFEST_NAME, update_manifest
from headroom.profile.progress import OutputCapture, Progress
from headroom.profile.rank_context import NCCL_ENV, RankContext
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options, RunConfig

RANK_TRACE = "rank-{rank}.json.gz"
_RANK_TRACE_RE = re.compile(r"^rank-\d+\.json\.gz$")


@dataclass(frozen=True)
class RankRequest:
    """What every rank runs (plain data, handed to the launched processes as a JSON file)."""

    workload: str
    options: Options
    device_type: str
    out_dir: str
    steps: int | None
    warmup: int | None
    timed_steps: int | None
    workload_file: str | None
    command: str
    record_shapes: bool = True

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": asdict(self.options)})

    @classmethod
    def from_json(cls, text: str) -> RankRequest:
        d = json.loads(text)
        return cls(**{**d, "options": Options(**d["options"])})


class _RankProgress(Progress):
    """Rank 0 says which stage ran, one plain line each on stderr (the other ranks are quiet). What the
    libraries print is captured and shown after each stage, prefixed by the rank, Kineto's noise left out."""

    def __init__(self, rank: int, verbose: bool):
        self.rank, self.verbose = rank, verbose
        self._err = os.fdopen(os.dup(2), "w", buffering=1)  # the real stderr, while fd 2 is captured
        self.capture = OutputCapture(lambda line: self._say(line))

    def _say(self, line: str) -> None:
        print(f"  rank {self.rank}: {line}", file=self._err, flush=True)

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.capture.flush()
        if self.verbose:
            self._say(f"{name:<10} {time.perf_counter() - t0:7.1f} s  {detail}")

    def note(self, message: str) -> None:
        if self.verbose:
            print(f"headroom: warning: rank {self.rank}: {message}", file=self._err, flush=True)


def _error_file(out_dir: str, rank: int) -> Path:
    return Path(out_dir) / f".rank-{rank}.error"


def _result_file(out_dir: str, rank: int) -> Path:
    return Path(out_dir) / f".rank-{rank}.result.json"


def rank_main(req: RankRequest) -> None:
    """One rank (each launched process runs ``python -m headroom.profile.launch REQUEST``): profile,
    write rank-K.json.gz, and hand its manifest to the parent in a result file."""
    os.environ.update(NCCL_ENV)
    os.dup2(2, 1)  # stdout belongs to the parent (--json); ranks speak on stderr
    sys.stdout = sys.stderr
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world, local_world = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    import torch
    import torch.distributed as dist

    from headroom.profile.run import profile_workload

    if req.device_type == "cuda":
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
        if "OMP_NUM_THREADS" not in os.environ:  # the cores are shared by the ranks
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    # A collective that waits longer than this fails the run instead of hanging it.
    timeout = timedelta(seconds=float(os.environ.get("HEADROOM_COLLECTIVE_TIMEOUT_S", "600")))
    dist.init_process_group(backend=backend, device_id=device if backend == "nccl" else None, timeout=timeout)
    ctx = RankContext(rank, local, world, backend, req.options.parallel or "", device)
    try:
        if req.workload_file:
            load_workload_file(req.workload_file)
        progress = _RankProgress(rank, verbose=rank == 0)
        with progress.capture.capturing():
            r = profile_workload(
                req.workload,
                req.options,
                out=req.out_dir,
                steps=req.steps,
                warmup=req.warmup,
                timed_steps=req.timed_steps,
                progress=progress,
                command=req.command,
                record_shapes=req.record_shapes,
                trace_name=RANK_TRACE.format(rank=rank),
                rank=ctx,
            )
        result = {"rank": rank, "trace": str(r.trace_path), "manifest": r.manifest}
        _result_file(req.out_dir, rank).write_text(json.dumps(result, default=str))
    except UserError as e:
        # One line for the parent; a non-zero exit makes the launcher stop the other ranks.
        _error_file(req.out_dir, rank).write_text(str(e))
        raise SystemExit(2) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class RanksProfileResult:
    workload: str
    config: RunConfig
    out_dir: Path = field(metadata={"json_key": "out"})
    traces: list[Path]
    manifest_path: Path
    entries: dict[int, dict[str, Any]]
    # headroom.trace.rank_set.RankSet, as its `classify --json` document
    ranks: Any = field(metadata={**encoded(lambda r: r.to_dict()), "json_key": "analysis"})

    # `headroom profile --nproc N --json` (docs/cli.md): times in microseconds, as `headroom profile`'s.
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("workload", "out_dir", "traces", "manifest", "timing", "ranks")

    @property
    def manifest(self) -> dict[str, Any]:
        """The lowest rank's manifest entry."""
        return self.entries[min(self.entries)] if self.entries else {}

    @property
    def timing(self) -> dict[str, dict[str, Any] | None]:
        """Per rank (as text), its timed and profiled stages in microseconds (None: not recorded)."""
        from headroom.profile.result import timing_us
        from headroom.stepstats import StepStats

        def one(m: dict[str, Any]) -> dict[str, Any] | None:
            t = member(m, "timing")
            if not isinstance(t.get("timed"), dict) or not isinstance(t.get("profiled"), dict):
                return None
            stats = [
                StepStats(list(t[k].get("times_ms") or []), str(t[k].get("method", ""))) for k in ("timed", "profiled")
            ]
            return timing_us(*stats)

        return {str(r): one(e) for r, e in sorted(self.entries.items())}


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _launch(nproc: int, req: RankRequest) -> dict[int, dict[str, Any]]:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"headroom-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    request = Path(req.out_dir) / ".request.json"
    request.write_text(req.to_json())
    try:
        try:
            with _environment(NCCL_ENV):
                elastic_launch(config, sys.executable)("-m", "headroom.profile.launch", str(request))
        except SignalException:  # Ctrl-C or SIGTERM: the launcher has stopped the ranks
            raise KeyboardInterrupt from None
        except ChildFailedError as e:
            messages = [
                f.read_text().strip() for f in (_error_file(req.out_dir, r) for r in range(nproc)) if f.exists()
            ]
            if messages:
                raise UserError(messages[0]) from None
            r, failure = min(e.failures.items())
            msg = (failure.message or "").strip().splitlines()
            raise UserError(
                f"rank {r} failed (exit code {failure.exitcode})"
                + (f": {msg[-1][:300]}" if msg else "")
                + " (its output is above)"
            ) from None
        out = {}
        for r in range(nproc):
            f = _result_file(req.out_dir, r)
            if not f.exists():
                raise UserError(f"rank {r} ended without a result (its output is above)")
            out[r] = json.loads(f.read_text())
        return out
    finally:  # no request, result or error file stays behind
        request.unlink(missing_ok=True)
        for r in range(nproc):
            _result_file(req.out_dir, r).unlink(missing_ok=True)
            _error_file(req.out_dir, r).unlink(missing_ok=True)


def profile_ranks(
    workload: str,
    options: Options | None = None,
    *,
    nproc: int,
    device: str | None = None,
    out: str | os.PathLike = "out",
    steps: int | None = None,
    warmup: int | None = None,
    timed_steps: int | None = None,
    workload_file: str | os.PathLike | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    record_shapes: bool = True,
) -> RanksProfileResult:
    """Profile `workload` on `nproc` ranks of this host; return the rank traces, analysed together."""
    import torch

    from headroom.devices import resolve_device
    from headroom.profile.run import check_step_counts
    from headroom.trace.analysis import analyze
    from headroom.trace.rank_set import rank_set

    progress = progress or Progress()
    if nproc < 2:
        raise UserError("--nproc must be at least 2 for a multi-rank run")
    check_step_counts(steps, warmup, timed_steps)
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = get_workload(workload)
    dev = resolve_device(device)
    if dev.type == "cuda" and torch.cuda.device_count() < nproc:
        raise UserError(f"--nproc {nproc}: one process per GPU, and this machine has {torch.cuda.device_count()}")
    options = replace(options or Options(), nproc=nproc)
    cfg = spec.resolve(options, dev.type)  # every bad option fails here, before any launch
    options = replace(options, parallel=cfg.parallel)
    out_dir = check_output_dir(Path(out) / cfg.tag)  # now, not after the run
    # The ranks write into a directory of their own; their traces replace an earlier run's only once
    # every rank has finished (a failed or interrupted run leaves the earlier traces as they were).
    staging = Path(tempfile.mkdtemp(prefix=".ranks-", dir=out_dir))
    backend = "nccl" if dev.type == "cuda" else "gloo"
    progress.note(
        f"{nproc} ranks ({cfg.parallel}, {backend}) launched by torch's elastic launcher; traces in {out_dir}/"
    )
    req = RankRequest(
        spec.name,
        options,
        dev.type,
        str(staging),
        steps,
        warmup,
        timed_steps,
        str(workload_file) if workload_file else None,
        command or " ".join(sys.argv),
        record_shapes,
    )
    t0 = time.perf_counter()
    try:
        entries = _launch(nproc, req)  # no spinner here: the ranks print their own progress lines
        _place_traces(entries, staging, out_dir, progress)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress.note(f"{nproc} ranks done in {time.perf_counter() - t0:.1f} s")
    traces = [Path(entries[r]["trace"]) for r in sorted(entries)]
    with progress.stage("classify", f"{len(traces)} ranks together"):
        rs = rank_set([analyze(p) for p in traces], source=str(out_dir))
    for r, e in entries.items():
        e["entry"] = dict(e["manifest"], results=_rank_results(rs, r))
        update_manifest(out_dir, Path(e["trace"]).name, e["entry"])
    return RanksProfileResult(
        spec.name, cfg, out_dir, traces, out_dir / MANIFEST_NAME, {r: e["manifest"] for r, e in entries.items()}, rs
    )


def _place_traces(entries: dict[int, dict[str, Any]], staging: Path, out_dir: Path, progress: Progress) -> None:
    """The ranks' traces moved from the staging directory into `out_dir`, in place of an earlier run's."""
    stale = sorted(p for p in out_dir.iterdir() if _RANK_TRACE_RE.match(p.name))
    for p in stale:
        p.unlink()
    if stale:
        progress.note(f"replaced {len(stale)} rank trace(s) of an earlier run in {out_dir}")
    for e in entries.values():
        name = Path(e["trace"]).name
        os.replace(staging / name, out_dir / name)
        e["trace"] = str(out_dir / name)


def _rank_results(rs: Any, rank: int) -> dict[str, Any]:
    """A rank's manifest entry's `results`: what its analysis found, and its communication among the ranks."""
    a = rs.analysis(rank)
    row = rs.per_rank.set_index("rank").loc[rank]
    return {
        "mode": a.mode,
        "step_us_profiled": a.step_us,
        "idle_fraction": a.idle_fraction,
        "addressable_fraction": a.addressable_fraction,
        "categories": {c.name: float(c.fraction) for c in a.categories.itertuples(index=False)},
        "comm_exposed_us": float(row["comm_exposed_us"]),
        "comm_overlapped_us": float(row["comm_overlapped_us"]),
        "wait_us": float(row["wait_us"]),
    }


if __name__ == "__main__":  # a launched rank
    rank_main(RankRequest.from_json(Path(sys.argv[1]).read_text()))
