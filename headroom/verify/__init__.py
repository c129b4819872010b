"""``headroom verify``: speedups a skeptic would accept, on KernelBench's own file format.

    from headroom.verify import VerifyOptions, verify_candidate, verify_suite
    r = verify_candidate("23_Softmax.py", "my_softmax.py", VerifyOptions(device="cuda"))
    r.verdict, r.speedup, r.speedup_ci, headroom.jsonio.plain(r)

Modules, in the order data flows: ``options`` -> ``problem``/``scale``/``inputs``
(what is run, at what size, on what values) -> ``reference`` (the trusted side)
-> ``protocol``/``process``/``shared`` (the child, its messages, the memory both
see) -> ``child`` (runs there) -> ``checks``/``compare`` (pure comparison) ->
``session``/``timing`` (the harness's clock, rounds, statistics) -> ``candidate``
(one candidate) -> ``build``/``suite`` (many) -> ``results``. See docs/verify.md.
"""

from headroom.verify.candidate import verify_candidate
from headroom.verify.compare import Check
from headroom.verify.options import VerifyOptions
from headroom.verify.reference import ReferenceRun, prepare_reference
from headroom.verify.results import VerifyResult, dumps, suite_document, write_json
from headroom.verify.suite import candidates_for, verify_pairs, verify_suite
from headroom.verify.timing import Policy

__all__ = [
    "Check",
    "Policy",
    "ReferenceRun",
    "VerifyOptions",
    "VerifyResult",
    "candidates_for",
    "dumps",
    "prepare_reference",
    "suite_document",
    "verify_candidate",
    "verify_pairs",
    "verify_suite",
    "write_json",
]
