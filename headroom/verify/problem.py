"""Loading KernelBench-format files and building models and inputs from them.

A *problem* file defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``; a *candidate* file defines ``class ModelNew`` with the
same constructor and forward signature. Files are used unchanged: they are
imported as modules from their path (so Triton's ``@jit``, which reads source
files, works).

Models and inputs are created the KernelBench way (seed, then
``get_init_inputs()``, seed again, then the constructor, so ``Model`` and
``ModelNew`` that create parameters in the same order get the same weights),
with two differences: the seed is secret and fresh per run, and construction
and ``get_inputs()`` run under ``torch.device(device)``, so a 10 GB embedding
table is initialised on the GPU instead of on the CPU. Every process that
calls these functions with the same seed and device gets bit-identical
parameters and inputs.

The problem file is trusted (the harness imports it); the candidate file never
is, and is only imported inside a child process (``headroom.verify.child``).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from headroom.errors import UserError
from headroom.pyfile import import_file

REQUIRED_PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")


def problem_name(path: str | Path) -> str:
    """The name of a problem: its file stem (``23_Softmax.py`` -> ``23_Softmax``)."""
    return Path(path).stem


def check_file(path: str | Path, what: str) -> Path:
    """A readable ``.py`` file, or a UserError naming it."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: {what} file not found")
    if not p.is_file():
        raise UserError(f"{p}: {what} is not a file")
    if p.suffix != ".py":
        raise UserError(f"{p}: {what} must be a .py file in KernelBench format")
    return p


def defined_names(path: Path) -> set[str]:
    """Top-level names a file defines, read with ``ast`` (nothing is executed)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise UserError(f"{path}: syntax error on line {e.lineno}: {e.msg}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
    return names


def check_problem_file(path: str | Path) -> Path:
    """A problem file that defines Model, get_inputs and get_init_inputs (checked without running it)."""
    p = check_file(path, "problem")
    missing = [n for n in REQUIRED_PROBLEM_NAMES if n not in defined_names(p)]
    if missing:
        raise UserError(f"{p}: not a KernelBench problem: it does not define {', '.join(missing)}")
    return p


@dataclass
class Problem:
    """A loaded KernelBench problem."""

    name: str
    path: Path
    module: ModuleType

    @property
    def Model(self) -> Any:
        return self.module.Model

    def get_inputs(self) -> list:
        return list(self.module.get_inputs())

    def get_init_inputs(self) -> list:
        return list(self.module.get_init_inputs())


def load_problem(
    path: str | Path, env: dict[str, str] | None = None, overrides: dict[str, Any] | None = None
) -> Problem:
    """Import a problem file (trusted), with ``env`` set in os.environ while it is imported.

    ``overrides`` replaces the values of module-level assignments (``batch_size = 4096``) before
    the module runs, so everything computed from them follows (a scaled instance; ``scale``).
    """
    import os

    p = check_problem_file(path)
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        mod = _exec_with_overrides(p, overrides) if overrides else import_file(p, "problem")
    except UserError:
        raise
    except Exception as e:  # the problem itself is broken: a user error naming the file
        raise UserError(f"{p}: the problem fails to import: {type(e).__name__}: {e}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for n in REQUIRED_PROBLEM_NAMES:
        if not hasattr(mod, n):
            raise UserError(f"{p}: not a KernelBench problem: it does not define {n}")
    return Problem(problem_name(p), p, mod)


def module_assignments(path: Path) -> list[str]:
    """Names bound by simple module-level assignments (``name = expr``), in file order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        n.targets[0].id
        for n in tree.body
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    ]


def _exec_with_overrides(path: Path, overrides: dict[str, Any]) -> ModuleType:
    import hashlib
    import sys

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in overrides:
                v = overrides[name]
                node.value = ast.copy_location(ast.Constant(tuple(v) if isinstance(v, list) else v), node.value)  # type: ignore[arg-type]
    code = compile(tree, str(path), "exec")
    digest = hashlib.sha1(f"{path}{sorted(overrides.items())}".encode()).hexdigest()[:10]
    name = f"_headroom_problem_{path.stem.replace('-', '_').replace('.', '_')}_{digest}"
    mod = ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    try:
        exec(code, mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


# --- seeding, models and inputs ---------------------------------------------------------


@contextmanager
def seeded(seed: int, device: Any = "cpu") -> Iterator[None]:
    """Seed python, numpy and torch for what the block creates (CUDA generators too on a GPU)."""
    import torch

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass
    if str(device).startswith("cuda"):
        torch.manual_seed(seed)
    else:  # the CPU generator only: torch.manual_seed also queues lazy CUDA seeding (with a stack trace)
        torch.default_generator.manual_seed(seed)
    yield


def to_device(x: Any, device: Any) -> Any:
    """Move tensors (also inside lists/tuples) to ``device``; leave everything else alone."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


def init_inputs(problem: Problem, seed: int, device: Any) -> list:
    import torch

    with seeded(seed, device), torch.device(device):
        return [to_device(v, device) for v in problem.get_init_inputs()]


def build_model(cls: Any, problem: Problem, seed: int, device: Any) -> Any:
    """Instantiate ``cls`` (Model or ModelNew) the KernelBench way, on ``device``."""
    import torch

    args = init_inputs(problem, seed, device)
    with seeded(seed, device), torch.device(device):
        model = cls(*args)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if cls is not problem.Model:
            workload_param_dtypes(model, problem)
    return model


def workload_param_dtypes(model: Any, problem: Problem) -> None:
    """A candidate's floating-point parameters in the dtypes the workload holds them in.

    ``headroom extract`` writes them as ``PARAM_DTYPE`` (one dtype) or ``PARAM_DTYPES`` (by parameter
    name), and its ``Model`` casts itself; a candidate written the KernelBench way creates float32
    parameters. Inside the model, ``headroom validate`` gives the candidate the original's parameters
    (their dtype), so timed with float32 ones it would run other kernels than in the model (e.g.
    ``weight * h`` promoted to float32, plus a cast back). Problems without the constants: unchanged."""
    import torch

    one = getattr(problem.module, "PARAM_DTYPE", None)
    named = getattr(problem.module, "PARAM_DTYPES", None)
    for name, p in model.named_parameters():
        dt = named.get(name) if isinstance(named, dict) else one
        if isinstance(dt, torch.dtype) and p.is_floating_point() and p.dtype != dt:
            p.data = p.data.to(dt)


def published_inputs(problem: Problem, seed: int, device: Any) -> list:
    """``get_inputs()`` under ``seed``, created on ``device``."""
    import torch

    with seeded(seed, device), torch.device(device):
        xs = problem.get_inputs()
    return [to_device(v, device) for v in xs]


def flatten_outputs(out: Any) -> list:
    """A model's output as a flat list (a tensor, or a tuple/list of them; scalars become tensors)."""
    if isinstance(out, (list, tuple)):
        flat: list = []
        for o in out:
            flat.extend(flatten_outputs(o))
        return flat
    return [out]
