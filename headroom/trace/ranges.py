"""Names of the ranges headroom reads in traces: the profiler's steps, nn.Module ranges, and the
record_function/NVTX ranges `headroom profile` puts around stages, phases and blocks."""

PROFILER_STEP_PREFIX = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "
FRAME_PREFIX = "headroom/"  # NVTX/record_function ranges headroom profile puts around phases and blocks
BLOCK_RANGE_PREFIX = "headroom/block "
MODULE_RANGE_PREFIX = "headroom/module "  # a named part of a model (e.g. DLRM's arches), for selectors
