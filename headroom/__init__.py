"""headroom: how much faster does a real model get if someone writes a faster GPU kernel?

    import headroom
    a = headroom.analyze("traces/dlrm.train.json.gz")       # an Analysis; a.to_frame(): per category
    headroom.project(a, speedup=["category:embedding=1.552"]).to_frame()
    headroom.targets(a).to_frame()
    headroom.profile("llama-7b"); headroom.verify("problem.py", "candidate.py")

The functions live in :mod:`headroom.api` and are imported on first use, so `import headroom`
stays cheap for the processes that need only a part of it (the verify children, the CLI).

`headroom.profile`, `.extract`, `.verify` and `.validate` are also the names of subpackages: each is the
package (`headroom.verify.VerifyOptions`, `import headroom.profile.run`) and, called, its task
(`headroom.verify(problem, candidate)` runs `headroom.api.verify`).
"""

import sys
import types

from headroom._version import __version__

_API = (
    "analyze",
    "analyze_all",
    "diff",
    "diff_html",
    "Diff",
    "predict",
    "project",
    "summary",
    "targets",
    "Analysis",
    "Prediction",
    "ProjectResult",
    "Targets",
    "analyze_ranks",
    "project_ranks",
    "read_inputs",
    "report_html",
    "RankSet",
    "RanksProjection",
    "coverage",
    "Coverage",
    "plot",
    "Plots",
    "ReadOptions",
    "WorkloadOptions",
    "VerifyOptions",
    "ProfileResult",
    "RanksProfileResult",
    "ExtractResult",
    "VerifyResult",
    "ValidateResult",
    "UserError",
    "find_trace_files",
)
# The tasks whose names are also subpackages (callable: see _TaskPackage).
_TASK_PACKAGES = ("profile", "extract", "verify", "validate")


class _TaskPackage(types.ModuleType):
    """A subpackage that, called, runs its task: `headroom.profile("llama-7b")` is `headroom.api.profile(...)`,
    and `headroom.profile.run` is still the module (`inspect.signature` follows `__wrapped__` to the task)."""

    @property
    def __wrapped__(self):
        from headroom import api

        return getattr(api, self.__name__.rpartition(".")[2])

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)


class _Root(types.ModuleType):
    """The root package: a task's subpackage is made callable when the import system sets it here."""

    def __setattr__(self, name, value):
        if name in _TASK_PACKAGES and type(value) is types.ModuleType and value.__name__ == f"headroom.{name}":
            value.__class__ = _TaskPackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Root


def __getattr__(name: str):
    import importlib

    if name in _TASK_PACKAGES or name == "api":
        return importlib.import_module(f"headroom.{name}")  # a task's package made callable as it is set here
    if name in _API:
        from headroom import api

        return getattr(api, name)
    raise AttributeError(f"module 'headroom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API, *_TASK_PACKAGES})


def _checkout_workloads() -> None:
    """Make the top-level `workloads/` folder `headroom.workloads` in a source checkout run without
    installing (PYTHONPATH=repo), as the package-dir mapping in pyproject.toml does in an install."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("headroom.workloads") is not None:
        return
    folder = Path(__file__).resolve().parent.parent / "workloads"
    if not (folder / "__init__.py").is_file():
        return
    spec = importlib.util.spec_from_file_location(
        "headroom.workloads", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:  # pragma: no cover - a folder with an __init__.py has a spec
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["headroom.workloads"] = module
    spec.loader.exec_module(module)
    globals()["workloads"] = module


_checkout_workloads()
