"""headroom: how much faster does a real model get if someone writes a faster GPU kernel?

    import headroom
    a = headroom.analyze("traces/dlrm.train.json.gz")       # an Analysis; a.to_frame(): per category
    headroom.project(a, speedup=["category:embedding=1.552"]).to_frame()
    headroom.targets(a).to_frame()

The functions live in :mod:`headroom.api` and are imported on first use, so `import headroom`
stays cheap for the processes that need only a part of it (the verify children, the CLI).
"""

from headroom._version import __version__

_API = ("analyze", "analyze_all", "diff", "diff_html", "Diff", "predict", "project", "summary", "targets", "Analysis", "Prediction",
        "ProjectResult", "Targets", "analyze_ranks", "project_ranks", "read_inputs", "report_html", "RankSet",
        "RanksProjection", "coverage", "Coverage")


def __getattr__(name: str):
    if name in _API:
        from headroom import api

        return getattr(api, name)
    raise AttributeError(f"module 'headroom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


def _checkout_workloads() -> None:
    """Make the top-level `workloads/` folder `headroom.workloads` in a source checkout run without
    installing (PYTHONPATH=repo), as the package-dir mapping in pyproject.toml does in an install."""
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec("headroom.workloads") is not None:
        return
    folder = Path(__file__).resolve().parent.parent / "workloads"
    if not (folder / "__init__.py").is_file():
        return
    spec = importlib.util.spec_from_file_location("headroom.workloads", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:   # pragma: no cover - a folder with an __init__.py has a spec
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["headroom.workloads"] = module
    spec.loader.exec_module(module)
    globals()["workloads"] = module


_checkout_workloads()
