"""Shared fixtures: where the real traces are, and a builder for small synthetic Kineto traces."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (CI), else $HEADROOM_SHARED or /work/shared (a developer's worktree).
SHARED = next((p for p in (REPO.parent / "shared", Path(os.environ.get("HEADROOM_SHARED", "/work/shared")))
               if p.is_dir()), REPO.parent / "shared")
HTA_TRACES = SHARED / "hta-traces"
SHIPPED_TRACES = REPO / "traces"


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
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                            "pid": self.pid, "tid": self.tid, "ts": ts, "dur": dur,
                            "args": {"External id": self._ext_id()}})

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int | None = None) -> int:
        ext = self._ext_id()
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": ts, "dur": dur,
                            "args": {"External id": ext}})
        return ext

    def kernel(self, name: str, launch_ts: float, ts: float, dur: float, stream: int = 7,
               ext: int | None = None, kind: str = "kernel", launch: str = "cudaLaunchKernel",
               tid: int | None = None, device: int = 0, corr: int | None = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
            self.events.append({"ph": "X", "cat": "cuda_driver" if launch.startswith("cu") and not launch.startswith("cuda") else "cuda_runtime",
                                "name": launch, "pid": self.pid, "tid": self.tid if tid is None else tid,
                                "ts": launch_ts, "dur": 2.0,
                                "args": {"correlation": corr, **({"External id": ext} if ext else {})}})
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream,
                            "ts": ts, "dur": dur,
                            "args": {"device": device, "stream": stream, "correlation": corr,
                                     **({"External id": ext} if ext else {})}})
        return corr

    def runtime(self, name: str, ts: float, corr: int, dur: float = 1.0) -> None:
        """A CUDA runtime call that launches nothing (cudaEventRecord, cudaStreamWaitEvent, ...)."""
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid, "tid": self.tid,
                            "ts": ts, "dur": dur, "args": {"cbid": 0, "correlation": corr}})

    def sync(self, kind: str, ts: float, stream: int, corr: int, wait_on_stream: int = -1,
             record_corr: int = -1, device: int = 0, dur: float = 0.0) -> None:
        """A CUPTI synchronization record as Kineto writes it (profiles with enable_cuda_sync_events)."""
        args = {"cuda_sync_kind": kind}
        if kind in ("Event Sync", "Stream Wait Event"):
            args.update({"wait_on_stream": wait_on_stream, "wait_on_cuda_event_record_corr_id": record_corr,
                         "wait_on_cuda_event_id": 3})
        args.update({"stream": stream, "correlation": corr, "device": device, "context": 1})
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": device, "tid": stream,
                            "ts": ts, "dur": dur, "args": args})

    def doc(self, **top) -> dict:
        return {"schemaVersion": 1, "traceEvents": self.events, **top}

    def write(self, path: Path, **top) -> Path:
        data = json.dumps(self.doc(**top)).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


@pytest.fixture
def builder() -> TraceBuilder:
    return TraceBuilder()
