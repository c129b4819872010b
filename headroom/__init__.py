"""headroom: how much faster does a real model get if someone writes a faster GPU kernel?"""

__version__ = "0.1.0"


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
    module = importlib.util.module_from_spec(spec)
    sys.modules["headroom.workloads"] = module
    spec.loader.exec_module(module)
    globals()["workloads"] = module


_checkout_workloads()
