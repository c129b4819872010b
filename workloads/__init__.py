"""Workload plug-ins, installed as `headroom.workloads`.

Every module here whose name does not start with `_` is imported by the registry
(`headroom.profile.registry.discover`) and registers its `WorkloadSpec`s
(`register_workload(...)`, or a module-level `WORKLOAD` / `WORKLOADS`). Adding a
workload is adding a module: no core code changes. Plug-ins import only the plug-in
API, `headroom.profile` (tests/test_architecture.py checks it).
"""
