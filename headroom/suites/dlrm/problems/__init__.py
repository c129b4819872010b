"""DLRM-Bench problem files (KernelBench format; a package so that they ship with headroom)."""
