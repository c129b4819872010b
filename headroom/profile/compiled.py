"""torch.compile'd code by module: what each post-grad graph node ran for, recorded while Inductor compiles.

Module ranges (headroom/profile/modules.py) do nothing inside compiled code, so a compiled trace has no
module for any kernel. Inductor knows it at compile time: every node of the post-grad FX graph it lowers
carries Dynamo's `nn_module_stack` (the modules whose forward the node was traced in). `recording()` sets,
for the run, Inductor's `post_grad_custom_post_pass` to a recorder (chaining any pass already set) that
keeps, per graph, each node's innermost module (path below the compiled module, and class), the nodes
that only view data, and the nodes Inductor calls as extern kernels (GEMMs, attention: aten ops named in
headroom/data/compiled.toml) in order with their input shapes; and it names generated kernels after their
nodes (`descriptive_names = "inductor_node"`: `triton_red_fused_mean_2_pow_3_add_12_4`), with CPU kernels
recorded by the profiler (`cpp.enable_kernel_profile`). The run's manifest keeps it under
`compiled_modules` (`compiled_manifest`); headroom/trace/compiled.py reads it back.

A plain callable as the pass makes Inductor skip its FX graph cache (a CustomGraphPass would be cached,
and a cached graph runs no pass): every graph of the run is compiled, and recorded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from headroom.datafiles import shipped

__all__ = ["CompiledModules", "compiled_manifest", "dynamo_path", "recording"]

_ROOT = re.compile(r"^L(\[[^\]]*\])+")
_GETATTR = re.compile(r"getattr\(([^()]*), '([^']*)'\)")
_SUBSCRIPT = re.compile(r"\[\s*'?([^\]']*)'?\s*\]")


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, re.Pattern]:
    doc = shipped("compiled.toml")
    return re.compile(doc["extern_op"]), re.compile(doc["view_op"])


def dynamo_path(key: str) -> str | None:
    """A module's path below the compiled object, from Dynamo's `nn_module_stack` path
    (``L['self'].model.layers[0].mlp`` or ``getattr(L['fn'].layers, '0')`` -> ``model.layers.0.mlp``; the
    compiled object itself -> ""); None for a module reached through a global (``G['...']``), which is not
    in the compiled object's tree."""
    while True:
        new = _GETATTR.sub(r"\1.\2", key)
        if new == key:
            break
        key = new
    root = _ROOT.match(key)
    if root is None:
        return None
    rest = key[root.end() :]
    rest = rest.replace("._modules", "")
    rest = _SUBSCRIPT.sub(r".\1", rest)
    return rest.strip(".")


def _op_name(target: Any) -> str:
    """`aten::mm` for torch.ops.aten.mm.default; `_operator::getitem` for operator.getitem."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name)
    return f"{getattr(target, '__module__', '') or ''}::{getattr(target, '__name__', str(target))}"


def _innermost(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The node's module stack as (path below the compiled object, class name), outermost first; modules
    reached through globals left out."""
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack") or {}
    out = []
    for value in stack.values():
        if not isinstance(value, tuple) or len(value) < 2:
            continue
        path = dynamo_path(str(value[0]))
        if path is None:
            continue
        cls = value[1]
        out.append((path, cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))))
    return out


def _shape(arg: Any) -> list[int] | None:
    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    shape = getattr(val, "shape", None)
    if shape is None:
        return None
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):  # a symbolic size
        return None


def graph_record(graph: Any, compile_id: str = "") -> dict[str, Any]:
    """One post-grad graph: its modules ([path, class], "" for the compiled object), each call node's module
    (index, -1 none), the nodes that only view data, and the extern-kernel nodes in order
    ([name, op, input shapes by position])."""
    extern_rx, view_rx = _patterns()
    modules: dict[tuple[str, str], int] = {}
    nodes: dict[str, int] = {}
    views: list[str] = []
    externs: list[list[Any]] = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        stack = _innermost(node.meta)
        for entry in stack:
            modules.setdefault(entry, len(modules))
        nodes[node.name] = modules[stack[-1]] if stack else -1
        op = _op_name(node.target)
        if view_rx.search(op):
            views.append(node.name)
        elif extern_rx.search(op):
            externs.append([node.name, op, [_shape(a) for a in node.args]])
    return {
        "compile_id": compile_id,
        "modules": [list(m) for m in modules],
        "nodes": nodes,
        "views": views,
        "externs": externs,
    }


def _compile_id() -> str:
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except (ImportError, AttributeError):
        return ""
    return str(cid) if cid is not None else ""


@dataclass
class CompiledModules:
    """Inductor's post-grad custom pass that records each graph (`graph_record`), after running the pass
    that was set before it (`previous`)."""

    previous: Any = None
    graphs: list[dict[str, Any]] = field(default_factory=list)
    root_type: str = ""  # the class of the module the paths' root names (set by headroom profile)

    def __call__(self, graph: Any) -> None:
        before = self.previous
        for p in before if isinstance(before, (list, tuple)) else [before] if before is not None else []:
            p(graph)
        self.graphs.append(graph_record(graph, _compile_id()))


def _settings(recorder: CompiledModules, device_type: str) -> dict[str, Any]:
    import torch._inductor.config as config

    out: dict[str, Any] = {"post_grad_custom_post_pass": recorder, "triton.descriptive_names": "inductor_node"}
    if hasattr(config.cpp, "descriptive_names"):
        out["cpp.descriptive_names"] = "inductor_node"
    if device_type == "cpu":
        out["cpp.enable_kernel_profile"] = True
    return out


@contextmanager
def recording(device_type: str) -> Iterator[CompiledModules]:
    """Inductor set up, while inside, to record the graphs it compiles and to name kernels after their
    nodes (and on a CPU to record its kernels in the profiler); yields the recorder."""
    import torch._inductor.config as config

    recorder = CompiledModules(previous=config.post_grad_custom_post_pass)
    with config.patch(_settings(recorder, device_type)):
        yield recorder


def compiled_manifest(recorder: CompiledModules, root: str) -> dict[str, Any]:
    """The manifest's `compiled_modules`: `root`, the path of the compiled object where no module range
    holds a compiled call ("" when each block's forward is compiled: the block's range holds its calls),
    and the recorded graphs."""
    return {"root": root, "root_type": recorder.root_type, "graphs": recorder.graphs}
