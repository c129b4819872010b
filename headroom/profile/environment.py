"""How the numbers were made: hardware, driver, library versions, numeric flags."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from headroom._version import __version__
from headroom.profile.nvtx import nvtx_backend


def _pkg_version(*names: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for n in names:
        try:
            return version(n)
        except PackageNotFoundError:
            continue
    return None


def _nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = (
            subprocess.run(
                [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=15,
            )
            .stdout.strip()
            .splitlines()
        )
    except Exception:
        return {}
    if not out:
        return {}
    parts = [p.strip() for p in out[0].split(",")]
    return {
        "name": parts[0],
        "driver": parts[1] if len(parts) > 1 else "",
        "memory": parts[2] if len(parts) > 2 else "",
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: Any) -> dict[str, Any]:
    """How the numbers were made: hardware, driver, library versions, numeric flags."""
    import torch

    env: dict[str, Any] = {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "transformers": _pkg_version("transformers"),
            "torchrec": _pkg_version("torchrec"),
            "fbgemm_gpu": _pkg_version("fbgemm-gpu", "fbgemm_gpu", "fbgemm-gpu-cpu", "fbgemm_gpu_cpu"),
            "headroom": __version__,
            "nvtx": nvtx_backend(),
        },
        "tf32": {
            "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        smi = _nvidia_smi()
        env["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gb": round(props.total_memory / 2**30, 1),
            "count": torch.cuda.device_count(),
            "driver": smi.get("driver"),
        }
    else:
        env["gpu"] = None
    return env
