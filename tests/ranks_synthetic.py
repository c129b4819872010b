"""Two-rank GPU traces with a known answer (tests of headroom.trace.rank_set and headroom.project.ranks).

Every step, on each rank (times from the step start, microseconds):

    rank 0: gemm [10, 1010]   elementwise [1010, 1510]   all-reduce [1010, 2010]   optimizer [2010, 2510]
    rank 1: gemm [10, 1510]   elementwise [1510, 2010]   all-reduce [1510, 2010]   optimizer [2010, 2510]

Rank 1's gemm takes DELAY = 500 us longer, so rank 0 reaches the all-reduce 500 us early and waits:
its all-reduce takes 1000 us, rank 1's 500 us (the transfer). The optimizer waits for the all-reduce.
(`delay` changes the 500 us: the all-reduce ends at 1510 + delay on both ranks.)
Two steps, 3000 us apart; rank 1's clock reads SHIFT later than rank 0's (another host).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TraceBuilder

DELAY = 500.0
STEP = 3000.0
SHIFT = 1_000_000.0
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"  # as NCCL 2.17 names it
GEMM = "ampere_sgemm_128x64_nn"
ELEMENTWISE = "elementwise_kernel"
OPTIMIZER = "multi_tensor_apply_kernel"
WALL = STEP + 2010.0 + DELAY  # first step start to the second step's last kernel end: 5510


def rank_trace(rank: int, delay: float = DELAY, shift: float = SHIFT, steps: int = 2) -> TraceBuilder:
    b = TraceBuilder(pid=100 + rank, tid=100 + rank)
    late = delay if rank == 1 else 0.0
    base = shift if rank == 1 else 0.0
    for k in range(1, steps + 1):
        t0 = base + (k - 1) * STEP
        b.step(k, t0, 2400.0)
        b.kernel(GEMM, t0 + 1, t0 + 10, 1000.0 + late, stream=7)
        b.kernel(ELEMENTWISE, t0 + 2, t0 + 1010 + late, 500.0, stream=7)
        # the all-reduce ends when the last rank's transfer (500 us) is done
        b.kernel(NCCL, t0 + 3, t0 + 1010 + late, 500.0 + delay - late, stream=20)
        b.kernel(OPTIMIZER, t0 + 4, t0 + 1510 + delay, 500.0, stream=7)
    return b


def write_pair(
    directory: Path,
    names: tuple[str, str] = ("rank-0.json.gz", "rank-1.json.gz"),
    distributed_info: bool = True,
    delay: float = DELAY,
    steps: int = 2,
    shift: float = SHIFT,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank, name in enumerate(names):
        top = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}} if distributed_info else {}
        rank_trace(rank, delay, shift, steps).write(directory / name, **top)
    return directory
