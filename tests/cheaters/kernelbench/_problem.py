"""Shared by the generic KernelBench candidates: the problem module the child loaded (scaled), by path.

The candidates are KernelBench-format files that wrap *any* problem's ``Model``
(the problem's path is in ``HEADROOM_TEST_PROBLEM``), so one file per cheat
covers all 100 level-1 problems.
"""

import importlib.util
import os
import sys


def problem_module():
    path = os.path.realpath(os.environ["HEADROOM_TEST_PROBLEM"])
    for mod in list(sys.modules.values()):  # the scaled instance the harness's child imported
        if os.path.realpath(getattr(mod, "__file__", "") or "") == path and hasattr(mod, "Model"):
            return mod
    for name, mod in list(sys.modules.items()):  # a private copy of it (the sealed child's, same file name)
        if (
            name.startswith("_headroom_problem_")
            and hasattr(mod, "Model")
            and os.path.basename(getattr(mod, "__file__", "") or "") == os.path.basename(path)
        ):
            return mod
    spec = importlib.util.spec_from_file_location("_kb_problem", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
