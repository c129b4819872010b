"""`headroom validate`: swap candidates into a real workload, measure the end-to-end speedup
(interleaved A/B), and score the projections made from the base trace alone.

    from headroom.validate import validate, recompute
    result = validate("llama-7b", [("LlamaRMSNorm", "examples/substitutions/llama_rmsnorm.py")],
                      out="out/validate/rmsnorm")
    again = recompute("out/validate/rmsnorm")      # offline, from the saved traces and timings

See docs/validate.md.
"""

from headroom.validate.api import check_candidate_file, validate
from headroom.validate.result import ValidateResult, compute, recompute

__all__ = ["ValidateResult", "check_candidate_file", "compute", "recompute", "validate"]
