"""``headroom verify``: speedups a skeptic would accept, on KernelBench's own file format.

    from headroom.verify import VerifyOptions, verify_candidate, verify_suite
    r = verify_candidate("23_Softmax.py", "my_softmax.py", VerifyOptions(device="cuda"))
    r.verdict, r.speedup, r.to_dict()

See docs/verify.md for the protocol and the results-file format.
"""

from headroom.verify.harness import (
    Check,
    ReferenceRun,
    VerifyOptions,
    VerifyResult,
    candidates_for,
    dumps,
    prepare_reference,
    suite_document,
    verify_candidate,
    verify_suite,
    write_json,
)

__all__ = ["Check", "ReferenceRun", "VerifyOptions", "VerifyResult", "candidates_for", "dumps",
           "prepare_reference", "suite_document", "verify_candidate", "verify_suite", "write_json"]
