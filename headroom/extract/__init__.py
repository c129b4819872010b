"""`headroom extract`: KernelBench problems with the real shapes, from the modules and ops of a workload.

    from headroom.extract import extract
    r = extract("llama-7b", "LlamaRMSNorm", out="out/problems")
    r.problem, r.entry, r.share

See docs/extract.md.
"""

from headroom.extract.result import ExtractResult
from headroom.extract.run import extract

__all__ = ["ExtractResult", "extract"]
