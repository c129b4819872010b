"""The columns of `headroom report`'s table, in its order: its JSON rows' keys, `report/tables.summary_frame`'s
columns and what a kept summary's row must hold (`report/summary.py`). No imports: the summary reads it
without pandas."""

SUMMARY_COLUMNS = [
    "workload",
    "trace",
    "mode",
    "device",
    "basis",
    "num_steps",
    "step_us",
    "gpu_us_per_step",
    "idle_fraction",
    "unprofiled_step_us",
    "unprofiled_idle_fraction",
    "gemm_attention_conv_fraction",
    "addressable_fraction",
    "top_addressable_op",
    "top_addressable_op_fraction",
    "layers",
    "extrapolated",
    "dtype",
    "batch",
]
