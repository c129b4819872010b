"""Problem suites in KernelBench format and their catalogues (``catalogue``): DLRM-Bench (``dlrm``),
KernelBench level 1 (catalogue only: its files are KernelBench's own)."""
