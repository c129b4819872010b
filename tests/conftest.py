"""Shared fixtures: where the real traces are, and a builder for small synthetic Kineto traces."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (derandomize): a suite that passes on a commit passes on
# it again. HYPOTHESIS_PROFILE=explore draws fresh ones each run, to look for new failures.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (CI), else $HEADROOM_SHARED or /work/shared (a developer's worktree).
SHARED = next(
    (p for p in (REPO.parent / "shared", Path(os.environ.get("HEADROOM_SHARED", "/work/shared"))) if p.is_dir()),
    REPO.parent / "shared",
)
HTA_TRACES = SHARED / "hta-traces"
SHIPPED_TRACES = REPO / "traces"


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Every test leaves SIGINT's and SIGTERM's handlers as it found them. The command line run in this process
    (`headroom` below) installs its own, which stayed for the rest of the session: a later HTA test's forked
    pool worker inherited the Python SIGTERM handler, and a SIGTERM from Pool.terminate that lands just before
    the worker blocks on the queue's lock is never acted on (the worker waits for ever, and the session with it)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        if handler is not None and signal.getsignal(s) is not handler:  # (None: a handler not set from Python)
            signal.signal(s, handler)


@pytest.fixture
def headroom(capfd, monkeypatch):
    """`headroom ARGS...` in this process (the same entry point, without the interpreter's start-up):
    returns the exit code and what went to stdout and stderr."""
    from headroom.cli.app import run

    monkeypatch.chdir(REPO)

    def call(*args) -> subprocess.CompletedProcess:
        capfd.readouterr()
        try:
            run([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call


@pytest.fixture
def quick_verify_timing(monkeypatch):
    """`headroom verify` on the command line with `VerifyOptions.quick()`'s timing policy (6 to 8 short rounds, a
    10 s budget) instead of the default (up to 30 rounds and 30 s a candidate on a CPU); every check and the
    verdict's rules unchanged. For tests whose assertions hold for either verdict an honest candidate can reach
    (pass or inconclusive), not for the precision of its timing."""
    import dataclasses

    from headroom.cli import verify as cli_verify
    from headroom.verify import VerifyOptions

    options = cli_verify._options

    def quick(*args, **kwargs):
        return dataclasses.replace(options(*args, **kwargs), policy=VerifyOptions.quick().policy)

    monkeypatch.setattr(cli_verify, "_options", quick)


def hta_trace(name: str) -> Path:
    """A real trace from HolisticTraceAnalysis' test data, read in place from ../shared."""
    matches = sorted(HTA_TRACES.glob(f"{name}*.json.gz"))
    if not matches:
        pytest.skip(f"{HTA_TRACES} is not present (it is beside the checkout in CI)")
    return matches[0]


class TraceBuilder:
    """Builds a Kineto-shaped trace: a CPU thread that launches kernels inside ProfilerSteps."""

    def __init__(self, pid: int = 100, tid: int = 100):
        self.pid, self.tid = pid, tid
        self.events: list[dict] = []
        self._corr = 1000
        self._ext = 1

    def _ext_id(self) -> int:
        self._ext += 1
        return self._ext

    def step(self, n: int, ts: float, dur: float) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self._ext_id()},
            }
        )

    def cpu(
        self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int | None = None, args: dict | None = None
    ) -> int:
        ext = self._ext_id()
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": self.tid if tid is None else tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": ext, **(args or {})},
            }
        )
        return ext

    def fwdbwd(
        self,
        flow_id: int,
        forward_ts: float,
        backward_ts: float,
        forward_tid: int | None = None,
        backward_tid: int | None = None,
    ) -> None:
        """Kineto's link from a forward op (s) to the backward op autograd ran for it (f)."""
        for ph, ts, tid in (("s", forward_ts, forward_tid), ("f", backward_ts, backward_tid)):
            self.events.append(
                {
                    "ph": ph,
                    "id": flow_id,
                    "pid": self.pid,
                    "tid": self.tid if tid is None else tid,
                    "ts": ts,
                    "cat": "fwdbwd",
                    "name": "fwdbwd",
                    **({"bp": "e"} if ph == "f" else {}),
                }
            )

    def kernel(
        self,
        name: str,
        launch_ts: float,
        ts: float,
        dur: float,
        stream: int = 7,
        ext: int | None = None,
        kind: str = "kernel",
        launch: str = "cudaLaunchKernel",
        tid: int | None = None,
        device: int = 0,
        corr: int | None = None,
    ) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
            driver = launch.startswith("cu") and not launch.startswith("cuda")
            self.events.append(
                {
                    "ph": "X",
                    "cat": "cuda_driver" if driver else "cuda_runtime",
                    "name": launch,
                    "pid": self.pid,
                    "tid": self.tid if tid is None else tid,
                    "ts": launch_ts,
                    "dur": 2.0,
                    "args": {"correlation": corr, **({"External id": ext} if ext else {})},
                }
            )
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": device,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {
                    "device": device,
                    "stream": stream,
                    "correlation": corr,
                    **({"External id": ext} if ext else {}),
                },
            }
        )
        return corr

    def runtime(self, name: str, ts: float, corr: int, dur: float = 1.0) -> None:
        """A CUDA runtime call that launches nothing (cudaEventRecord, cudaStreamWaitEvent, ...)."""
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "dur": dur,
                "args": {"cbid": 0, "correlation": corr},
            }
        )

    def sync(
        self,
        kind: str,
        ts: float,
        stream: int,
        corr: int,
        wait_on_stream: int = -1,
        record_corr: int = -1,
        device: int = 0,
        dur: float = 0.0,
    ) -> None:
        """A CUPTI synchronization record as Kineto writes it (profiles with enable_cuda_sync_events)."""
        args = {"cuda_sync_kind": kind}
        if kind in ("Event Sync", "Stream Wait Event"):
            args.update(
                {
                    "wait_on_stream": wait_on_stream,
                    "wait_on_cuda_event_record_corr_id": record_corr,
                    "wait_on_cuda_event_id": 3,
                }
            )
        args.update({"stream": stream, "correlation": corr, "device": device, "context": 1})
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": kind,
                "pid": device,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def doc(self, **top) -> dict:
        return {"schemaVersion": 1, "traceEvents": self.events, **top}

    def write(self, path: Path, **top) -> Path:
        data = json.dumps(self.doc(**top)).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


@pytest.fixture
def builder() -> TraceBuilder:
    return TraceBuilder()


@pytest.fixture(scope="session")
def gloo_bert_ddp(tmp_path_factory):
    """`headroom profile bert-base --mode train --nproc 2 --parallel ddp` on this CPU: two gloo ranks (tiny BERT)."""
    from headroom.profile.launch import profile_ranks
    from headroom.profile.workload import Options

    out = tmp_path_factory.mktemp("gloo-bert")
    return profile_ranks(
        "bert-base",
        Options(mode="train", flavour="tiny", batch=2, seq=32, parallel="ddp"),
        nproc=2,
        device="cpu",
        out=out,
        steps=2,
        warmup=1,
        timed_steps=1,
    )


# Tests that time something or take both cores for themselves: verify's two children pinned to their own
# cores, validate's A/B rounds and time limits, bench, Ray and gloo ranks, signals sent mid-run; and HTA, whose
# TraceAnalysis forks a process pool (a fork of a pytest-xdist worker, whose execnet threads run, can hang). They
# are marked `serial`: `make test` runs the others on two workers (pytest-xdist), then these alone in one process.
SERIAL = {
    "test_bench.py",
    "test_extract.py",
    "test_facade.py",
    "test_fleet.py",
    "test_hardening_interrupt.py",
    "test_hardening_streams.py",
    "test_hta_crosscheck.py",
    "test_hta_ranks.py",
    "test_launch.py",
    "test_validate.py",
}


def pytest_collection_modifyitems(session, config, items):
    """Marks the `serial` tests (above, and every verify test). Puts the Ray tests last: a process that has
    run Ray keeps gRPC's threads and fork handlers after `ray.shutdown()`, and a later fork of this process
    (subprocess, multiprocessing) can hang in them."""
    for item in items:
        name = item.path.name
        if name in SERIAL or name.startswith("test_verify_"):
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: item.module.__name__.endswith("test_fleet"))
