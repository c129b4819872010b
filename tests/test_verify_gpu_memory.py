"""GPU only (skipped on a CPU): the harness hands back every byte of a problem's GPU memory.

The regression: the input ring was shared with torch's refcounted CUDA IPC; children are killed,
never release their mapping, so every ring stayed in torch's IPC limbo and KernelBench level 1 ran
out of memory after ~40 problems on the H200. Now the ring is a raw allocation (verify.cuda_ipc).
Run on the GPU machine: its result is recorded in docs/gpu/verify_memory.txt.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from verify_support import CHEATERS  # noqa: E402

from headroom.verify import VerifyOptions, prepare_reference, verify_candidate  # noqa: E402

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand({n})]

def get_init_inputs():
    return []
"""


def _free() -> int:
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def test_a_problem_leaves_no_gpu_memory_behind(tmp_path):
    n = 1 << 28  # 1 GiB of float32 input: a ring of several GiB per problem
    problem = tmp_path / "relu_1gib.py"
    problem.write_text(PROBLEM.format(n=n))
    opts = VerifyOptions(device="cuda", env={"HEADROOM_TEST_PROBLEM": str(problem)})
    verdicts, after, results = [], [], []
    start = None
    for _ in range(3):
        ref = prepare_reference(problem, opts)
        try:
            assert ref.error is None, ref.error
            for cand in ("reference", "zeros"):
                results.append(verify_candidate(problem, CHEATERS / "kernelbench" / f"{cand}.py", reference=ref))
                verdicts.append(results[-1].verdict)
        finally:
            ref.close()
        after.append(_free())
        start = after[0] if start is None else start
    print(
        f"free MiB after each problem: {[f >> 20 for f in after]}; verdicts {verdicts}; reasons "
        f"{sorted({(r.reason or '')[:200] for r in results if r.verdict == 'error'})}"
    )
    assert verdicts[1::2] == ["fail"] * 3 and all(v in ("pass", "inconclusive") for v in verdicts[0::2]), verdicts
    # the first problem pays for CUDA contexts and caches; later ones must not keep anything more
    assert start - min(after) < 512 << 20, [f >> 20 for f in after]
