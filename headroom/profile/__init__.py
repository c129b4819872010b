"""`headroom profile`: run a workload under torch.profiler; and the API workload plug-ins use.

A workload plug-in (a module in the top-level `workloads/` folder, installed as
`headroom.workloads`, or a file given with `--workload-file`) imports what it needs
from here::

    from headroom.profile import Default, Step, WorkloadSpec, infer_step, register_workload, train_step

Nothing here imports torch until a workload is built or run.
"""

import importlib

# Names resolved on first use (PEP 562), so that importing one submodule (the CLI's progress display,
# a reader of traces) does not import the profiler's whole run machinery.
_HOME = {
    **dict.fromkeys(
        (
            "compile_model",
            "infer_forward",
            "infer_step",
            "init_parameter",
            "materialize",
            "meta_parameters",
            "parallelize",
            "train_forward",
            "train_step",
        ),
        "builders",
    ),
    **dict.fromkeys(("instrument_blocks", "phase_range"), "nvtx"),
    **dict.fromkeys(("get_workload", "list_workloads", "load_workload_file", "register_workload"), "registry"),
    "ProfileResult": "result",
    "profile_workload": "run",
    **dict.fromkeys(("Default", "Options", "RunConfig", "Step", "WorkloadSpec"), "workload"),
}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'headroom.profile' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"headroom.profile.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    "Default",
    "Options",
    "ProfileResult",
    "RunConfig",
    "Step",
    "WorkloadSpec",
    "compile_model",
    "get_workload",
    "infer_forward",
    "infer_step",
    "init_parameter",
    "instrument_blocks",
    "list_workloads",
    "load_workload_file",
    "materialize",
    "meta_parameters",
    "parallelize",
    "phase_range",
    "profile_workload",
    "register_workload",
    "train_forward",
    "train_step",
]
