"""DLRM-Bench problem files (KernelBench format; loaded by path, not imported as modules)."""
