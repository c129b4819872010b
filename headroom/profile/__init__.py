"""`headroom profile`: run a workload under torch.profiler; and the API workload plug-ins use.

A workload plug-in (a module in the top-level `workloads/` folder, installed as
`headroom.workloads`, or a file given with `--workload-file`) imports what it needs
from here::

    from headroom.profile import Default, Step, WorkloadSpec, infer_step, register_workload, train_step

Nothing here imports torch until a workload is built or run.
"""

from headroom.profile.builders import (compile_model, infer_forward, infer_step, init_parameter, materialize,
                                       meta_parameters, parallelize, train_forward, train_step)
from headroom.profile.nvtx import instrument_blocks, phase_range
from headroom.profile.registry import get_workload, list_workloads, load_workload_file, register_workload
from headroom.profile.run import ProfileResult, profile_workload
from headroom.profile.workload import Default, Options, RunConfig, Step, WorkloadSpec

__all__ = ["Default", "Options", "ProfileResult", "RunConfig", "Step", "WorkloadSpec", "compile_model",
           "get_workload", "infer_forward", "infer_step", "init_parameter", "instrument_blocks", "list_workloads",
           "load_workload_file", "materialize", "meta_parameters", "parallelize", "phase_range", "profile_workload",
           "register_workload", "train_forward", "train_step"]
