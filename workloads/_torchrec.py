"""torchrec and fbgemm-gpu on this machine, for the recommender workloads: whether they import (and how to install
them when not), and whether fbgemm-gpu's CUDA kernels run.

`fbgemm_cuda_status` is looked up here at each call (`_torchrec.fbgemm_cuda_status()`), so a test can patch it once.
"""

from __future__ import annotations

from headroom.errors import UserError

INSTALL_HINT = (
    "pip install --no-deps torchrec==1.8.0 && pip install fbgemm-gpu-cpu==1.8.0 tensordict "
    "torchmetrics tqdm pyre-extensions iopath   (or: scripts/install.sh)"
)


def import_torchrec():
    try:
        import torchrec  # noqa: F401
        from torchrec.models import dlrm  # noqa: F401
    except ImportError as e:
        raise UserError(f"the recommender workloads need torchrec ({e}): {INSTALL_HINT}") from None
    except OSError as e:  # fbgemm built for another torch version: undefined symbols
        raise UserError(
            f"torchrec/fbgemm failed to load ({str(e).splitlines()[0][:120]}); "
            f"fbgemm must match torch's minor version: {INSTALL_HINT}"
        ) from None


def fbgemm_cuda_status() -> tuple[bool, str]:
    """Whether fbgemm-gpu's CUDA kernels can run here (the CPU build registers the ops without them)."""
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        import fbgemm_gpu  # noqa: F401
    except Exception as e:  # ImportError, or OSError for a build against another torch
        return False, f"fbgemm_gpu does not import ({type(e).__name__})"
    try:
        lengths = torch.tensor([1, 2, 3], dtype=torch.int64, device="cuda")
        out = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
        torch.cuda.synchronize()
        if out.tolist() != [0, 1, 3, 6]:
            return False, "fbgemm_gpu CUDA op returned a wrong result"
    except Exception as e:
        return False, f"fbgemm_gpu has no CUDA kernels (the CPU build?): {type(e).__name__}"
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen  # noqa: F401
    except Exception as e:
        return False, f"fbgemm_gpu TBE module does not import ({type(e).__name__})"
    version = getattr(__import__("fbgemm_gpu"), "__version__", "?")
    return True, f"fbgemm_gpu {version} with CUDA kernels"
