"""Names of the ranges headroom reads in traces: the profiler's steps, nn.Module ranges, and the
record_function/NVTX ranges `headroom profile` puts around stages, phases, blocks and modules."""

from __future__ import annotations

PROFILER_STEP_PREFIX = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "  # torch.profiler(with_modules=True) python_function events
FRAME_PREFIX = "headroom/"  # NVTX/record_function ranges headroom profile puts around phases and blocks
BLOCK_RANGE_PREFIX = "headroom/block "
# One range per call of an nn.Module: `headroom/module <path> (<Class>)`, e.g.
# `headroom/module model.model.layers.3.input_layernorm (LlamaRMSNorm)`.
MODULE_RANGE_PREFIX = "headroom/module "
# Modules that only hold others (no forward of their own, or one that only chains its children):
# they get no range, so a kernel's innermost module is one that does work.
CONTAINER_MODULES = ("ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict")


def module_range_name(path: str, module_type: str) -> str:
    return f"{MODULE_RANGE_PREFIX}{path} ({module_type})"


def parse_module_range(name: str) -> tuple[str, str]:
    """``headroom/module a.b (Foo)`` -> ``("a.b", "Foo")``; ``("", "")`` if `name` is not a module range."""
    if not name.startswith(MODULE_RANGE_PREFIX) or not name.endswith(")"):
        return "", ""
    body = name[len(MODULE_RANGE_PREFIX) : -1]
    path, sep, module_type = body.rpartition(" (")
    if not sep:
        return "", ""
    return path, module_type
