"""verify times a candidate with the parameter dtypes the workload holds (the extracted problem's
PARAM_DTYPE / PARAM_DTYPES), as `headroom validate` runs it inside the model with the original's
parameters. With KernelBench-style float32 parameters the float64 RMSNorm candidate ran an extra cast
(9 kernels alone against 8 in llama-7b: 780 us against 702 us per call on the H200)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from headroom.verify import problem as prob  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

PROBLEM = """
import torch
from torch import nn

{const}


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        for name, p in self.named_parameters():
            p.data = p.data.to({cast})

    def forward(self, x):
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(4, 8).to(torch.bfloat16)]


def get_init_inputs():
    return [8]
"""


def _problem(tmp_path: Path, const: str, cast: str) -> prob.Problem:
    f = tmp_path / "p.py"
    f.write_text(textwrap.dedent(PROBLEM.format(const=const, cast=cast)))
    return prob.load_problem(f)


def _candidate_cls():
    mod = prob.import_file(REPO / "examples" / "substitutions" / "llama_rmsnorm_fp64.py", "cand_fp64")
    return mod.ModelNew


def test_a_candidate_gets_the_workloads_parameter_dtype(tmp_path):
    p = _problem(tmp_path, "PARAM_DTYPE = torch.bfloat16", "PARAM_DTYPE")

    class ModelNew(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(n))
            self.bias = torch.nn.Parameter(torch.zeros(n))
            self.register_buffer("idx", torch.arange(n))

    m = prob.build_model(ModelNew, p, 1, "cpu")
    assert (m.weight.dtype, m.bias.dtype, m.idx.dtype) == (torch.bfloat16, torch.bfloat16, torch.int64)
    assert isinstance(m.weight, torch.nn.Parameter) and torch.equal(m.weight.float(), torch.ones(8))


def test_per_name_dtypes_and_problems_without_them(tmp_path):
    p = _problem(tmp_path, "PARAM_DTYPES = {'weight': torch.float16}", "PARAM_DTYPES.get(name, torch.float32)")
    (tmp_path / "q").mkdir()
    plain = _problem(tmp_path / "q", "", "torch.float32")

    class ModelNew(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(n))
            self.bias = torch.nn.Parameter(torch.zeros(n))

    m = prob.build_model(ModelNew, p, 1, "cpu")
    assert (m.weight.dtype, m.bias.dtype) == (torch.float16, torch.float32)
    m = prob.build_model(ModelNew, plain, 1, "cpu")
    assert (m.weight.dtype, m.bias.dtype) == (torch.float32, torch.float32)


def _full_size_ops(model, x) -> list[tuple[str, str]]:
    """(op, output dtype) of every op one forward runs whose output has the input's size."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[tuple[str, str]] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.numel() == x.numel():
                seen.append((func.overloadpacket.__name__, str(out.dtype).removeprefix("torch.")))
            return out

    with Record():
        model(x)
    return seen


def test_the_float64_rmsnorm_runs_the_ops_it_runs_in_the_model(tmp_path):
    p = _problem(tmp_path, "PARAM_DTYPE = torch.bfloat16", "PARAM_DTYPE")
    cls = _candidate_cls()
    x = torch.randn(2, 3, 8).to(torch.bfloat16)
    as_built = prob.build_model(cls, p, 1, "cpu")  # verify: the workload's bfloat16 weight
    kernelbench = cls(8)  # the candidate's own float32 weight
    assert as_built.weight.dtype == torch.bfloat16 and kernelbench.weight.dtype == torch.float32
    ours, theirs = _full_size_ops(as_built, x), _full_size_ops(kernelbench, x)
    # the float32 weight promotes the product to float32 and adds a cast back: one more full-size pass
    assert ("mul", "float32") in theirs and ("mul", "float32") not in ours
    assert len(theirs) == len(ours) + 1
    assert ours[-1] == ("mul", "bfloat16") and theirs[-1] == ("_to_copy", "bfloat16")
    assert torch.equal(as_built(x), kernelbench(x))
