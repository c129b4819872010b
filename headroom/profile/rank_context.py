"""This process's place in a `--nproc` run (`RankContext`), and the environment every rank runs with:
NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1),
as the GPU machines require. headroom.profile.launch starts the ranks; headroom.profile.run runs one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LAUNCHER = "torch.distributed.launcher.api.elastic_launch (torchrun's launcher), c10d rendezvous"


@dataclass
class RankContext:
    """This process's place in a `--nproc` run."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    parallel: str
    device: Any

    # The manifest's `distributed`: the rank's place, the launcher, the NCCL environment it ran with.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "rank",
        "local_rank",
        "world_size",
        "backend",
        "parallel",
        "launcher",
        "env",
    )

    @property
    def launcher(self) -> str:
        return LAUNCHER

    @property
    def env(self) -> dict[str, str | None]:
        return {k: os.environ.get(k) for k in NCCL_ENV}

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.backend == "nccl":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()
