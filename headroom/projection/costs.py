"""What one op call costs: FLOPs and bytes read and written, from its recorded shapes (data/costs.toml).

`op_cost(call)` applies the formula the cost table names for the op (`gemm`, `attention`, `conv`, `norm`,
`elementwise`, `reduction`, `embedding_bag`, ...; the table's header says what each counts); None for an
op the table has no formula for, or whose recorded inputs do not fit it. Bytes are each input read once and
each output written once: the traffic an ideal kernel for the call moves.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headroom.datafiles import shipped
from headroom.jsonio import encoded, json_key
from headroom.trace.op_inputs import OpCall, Tensor


@dataclass(frozen=True)
class Cost:
    """One call's FLOPs and bytes; `matrix`: its FLOPs run on tensor cores (at `dtype`'s matrix peak)."""

    flops: float
    read: float
    written: float
    matrix: bool = False
    dtype: str = ""

    @property
    def bytes(self) -> float:
        return self.read + self.written


def _table() -> dict[str, Any]:
    return shipped("costs.toml")


def itemsize(dtype: str, default: int = 4) -> int:
    return int(_table()["dtypes"].get(dtype, default))


def nbytes(t: Tensor | None, default: int = 4) -> float:
    """Bytes a tensor argument holds (an expanded view's repeated elements once)."""
    return float(t.stored * itemsize(t.dtype, default)) if t is not None else 0.0


def _ints(text: str) -> list[int] | None:
    """`[1, 1]` or `2` (Concrete Inputs' spelling of an int list) as ints; None when absent or not ints."""
    if not text:
        return None
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    v = [v] if isinstance(v, int) and not isinstance(v, bool) else v
    return list(v) if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v) else None


def _flag(text: str) -> bool:
    return text.strip().lower() == "true"


def _tensors(call: OpCall) -> list[Tensor]:
    return [t for t in call.tensors if t is not None] + [t for lst in call.lists for t in lst]


def _widest(ts: list[Tensor]) -> str:
    """The result dtype of an elementwise op: the widest float (a 0-dim tensor, a wrapped Python number,
    does not widen a tensor with dimensions)."""
    ts = [t for t in ts if t.shape] or ts
    floats = [t.dtype for t in ts if t.dtype.startswith(("f", "bf", "c"))]
    pool = floats or [t.dtype for t in ts]
    return max(pool, key=lambda d: itemsize(d)) if pool else ""


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _gemm(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    a, b = call.tensor(int(rule.get("a", 0))), call.tensor(int(rule.get("b", 1)))
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2:
        return None
    batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 else 1
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out = batch * m * n * itemsize(a.dtype)
    bias = nbytes(call.tensor(int(rule["bias"]))) if "bias" in rule else 0.0
    return Cost(2.0 * batch * m * n * k, nbytes(a) + nbytes(b) + bias, float(out), True, a.dtype)


def _linear(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    x, w = call.tensor(0), call.tensor(1)
    if x is None or w is None or len(w.shape) != 2 or not x.shape:
        return None
    m, (n, k) = math.prod(x.shape[:-1]), w.shape
    return Cost(
        2.0 * m * n * k, nbytes(x) + nbytes(w) + nbytes(call.tensor(2)), float(m * n * itemsize(x.dtype)), True, x.dtype
    )


def _attention(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    qi = int(rule.get("q", 0))
    q, k, v = call.tensor(qi), call.tensor(qi + 1), call.tensor(qi + 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4:
        return None
    b, h, sq, d = q.shape
    sk = k.shape[2]
    flops = 4.0 * b * h * sq * sk * d
    if "causal" in rule and _flag(call.value(int(rule["causal"]))):
        flops *= 0.5
    out = float(b * h * sq * v.shape[3] * itemsize(q.dtype))
    qkv = nbytes(q) + nbytes(k) + nbytes(v)
    if rule.get("backward"):
        return Cost(2.5 * flops, qkv + 2 * out, qkv, True, q.dtype)
    return Cost(flops, qkv, out, True, q.dtype)


def _conv_out(x: Tensor, w: Tensor, call: OpCall, rule: Mapping[str, Any]) -> list[int] | None:
    spatial = len(x.shape) - 2

    def arg(name: str, default: int) -> list[int]:
        v = _ints(call.value(int(rule[name]))) if name in rule else None
        v = v or [default]
        return v * spatial if len(v) == 1 else v

    stride, padding, dilation = arg("stride", 1), arg("padding", 0), arg("dilation", 1)
    if min(len(stride), len(padding), len(dilation)) < spatial:
        return None
    out = [
        (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(spatial)
    ]
    return out if all(o > 0 for o in out) else None


def _conv(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    x, w = call.tensor(0), call.tensor(1)
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        return None
    spatial = _conv_out(x, w, call, rule)
    if spatial is None:
        return None
    n, k = x.shape[0], w.shape[0]
    out = n * k * math.prod(spatial)
    flops = 2.0 * out * math.prod(w.shape[1:])
    bias = nbytes(call.tensor(int(rule["bias"]))) if "bias" in rule else 0.0
    return Cost(flops, nbytes(x) + nbytes(w) + bias, float(out * itemsize(x.dtype)), True, x.dtype)


def _conv_backward(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    g, x, w = call.tensor(0), call.tensor(1), call.tensor(2)
    if g is None or x is None or w is None or len(w.shape) != len(x.shape):
        return None
    flops = 2.0 * 2.0 * g.numel * math.prod(w.shape[1:])
    return Cost(flops, nbytes(g) + nbytes(x) + nbytes(w), nbytes(x) + nbytes(w), True, x.dtype)


def _norm(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    ts, x = _tensors(call), call.tensor(0)
    if x is None:
        return None
    return Cost(float(rule.get("flops", 8)) * x.numel, sum(nbytes(t) for t in ts), nbytes(x))


def _norm_backward(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    ts, like = _tensors(call), call.tensor(int(rule.get("like", 1)))
    if like is None:
        return None
    small = sum(nbytes(t) for t in ts if t.numel < like.numel)
    return Cost(float(rule.get("flops", 12)) * like.numel, sum(nbytes(t) for t in ts), nbytes(like) + small)


def elementwise(call: OpCall, flops_per_element: float) -> Cost | None:
    ts = [t for t in call.tensors if t is not None]
    if not ts:
        return None
    if call.name.endswith("_"):
        out, dtype = ts[0].shape, ts[0].dtype
    else:
        shape, dtype = _broadcast([t.shape for t in ts]), _widest(ts)
        if shape is None:
            return None
        out = shape
    numel = math.prod(out)
    return Cost(flops_per_element * numel, sum(nbytes(t) for t in ts), float(numel * itemsize(dtype)))


def _copy(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    dst, src = call.tensor(0), call.tensor(1)
    if dst is None or src is None:
        return None
    return Cost(0.0, nbytes(src), nbytes(dst))


def _fill(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    t = call.tensor(0)
    return None if t is None else Cost(0.0, 0.0, nbytes(t))


def _cat(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    parts = call.lists[0] if call.lists else ()
    if not parts:
        return None
    total = sum(nbytes(t) for t in parts)
    return Cost(0.0, total, total)


def _reduction(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    x = call.tensor(0)
    if x is None:
        return None
    dims = _ints(call.value(int(rule["dims"]))) if "dims" in rule else None
    if dims is None or not x.shape:
        kept = 1
    else:
        axes = {d % len(x.shape) for d in dims} if dims else set(range(len(x.shape)))
        kept = math.prod(n for i, n in enumerate(x.shape) if i not in axes)
    return Cost(float(x.numel), nbytes(x), float(kept * itemsize(x.dtype)))


def _gather(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    src, index = call.tensor(0), call.tensor(int(rule.get("index", 2)))
    if src is None or index is None or not src.shape:
        return None
    if len(index.shape) == 1 and len(src.shape) > 1 and call.name.endswith("index_select"):
        dim = (_ints(call.value(1)) or [0])[0] % len(src.shape)
        numel = index.numel * (src.numel // src.shape[dim])
    else:
        numel = index.numel
    out = float(numel * itemsize(src.dtype))
    return Cost(0.0, nbytes(index) + out, out)


def _embedding(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    w, idx = call.tensor(0), call.tensor(1)
    if w is None or idx is None or len(w.shape) != 2:
        return None
    out = float(idx.numel * w.shape[1] * itemsize(w.dtype))
    return Cost(0.0, nbytes(idx) + out, out)


def _embedding_bag(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    w, idx, off = call.tensor(0), call.tensor(1), call.tensor(2)
    if w is None or idx is None or off is None or len(w.shape) != 2:
        return None
    bags = off.numel - (1 if _flag(call.value(int(rule.get("include_last_offset", 7)))) else 0)
    d, size = w.shape[1], itemsize(w.dtype)
    rows = float(idx.numel * d * size)
    return Cost(float(idx.numel * d), nbytes(idx) + nbytes(off) + rows, float(max(bags, 0) * d * size))


def _foreach(call: OpCall, rule: Mapping[str, Any]) -> Cost | None:
    lists = [call.lists[i] for i in rule.get("lists", [0]) if i < len(call.lists) and call.lists[i]]
    if not lists:
        return None
    first = lists[0]
    numel = sum(t.numel for t in first)
    written = sum(nbytes(t) for t in first)
    return Cost(float(rule.get("flops", 1)) * numel, sum(nbytes(t) for lst in lists for t in lst), written)


FORMULAS: dict[str, Callable[[OpCall, Mapping[str, Any]], Cost | None]] = {
    "gemm": _gemm,
    "bmm": _gemm,
    "linear": _linear,
    "attention": _attention,
    "conv": _conv,
    "conv_backward": _conv_backward,
    "norm": _norm,
    "norm_backward": _norm_backward,
    "elementwise": lambda call, rule: elementwise(call, float(rule.get("flops", 1))),
    "copy": _copy,
    "fill": _fill,
    "cat": _cat,
    "reduction": _reduction,
    "gather": _gather,
    "embedding": _embedding,
    "embedding_bag": _embedding_bag,
    "foreach": _foreach,
}


def op_cost(call: OpCall) -> Cost | None:
    """The call's cost by the cost table's formula for its op; None when the table has none (or the
    recorded inputs do not fit it)."""
    table = _table()
    rule = table["ops"].get(call.name)
    if rule is not None:
        return FORMULAS[rule["cost"]](call, rule)
    per = table["elementwise"].get(call.name)
    return elementwise(call, float(per)) if per is not None else None


def check_table(table: Mapping[str, Any]) -> list[str]:
    """Problems of a cost table: an op naming a formula that does not exist (tests/test_roofline.py)."""
    return [
        f"{op}: unknown cost {r.get('cost')!r}"
        for op, r in table.get("ops", {}).items()
        if r.get("cost") not in FORMULAS
    ]


@dataclass(frozen=True)
class Device:
    """A device's peaks (data/devices.toml); `peaks` False: none known (a CPU)."""

    key: str
    name: str
    peaks: bool
    memory_tb_s: float = math.nan
    vector_tflops: float = math.nan
    matrix: tuple[tuple[str, float], ...] = field(default=(), metadata={**json_key("matrix_tflops"), **encoded(dict)})
    min_kernel_us: float = 0.0

    def compute_tflops(self, cost: Cost, tf32: bool) -> float:
        if not cost.matrix:
            return self.vector_tflops
        rates = dict(self.matrix)
        dtype = "tf32" if cost.dtype == "f32" and tf32 else cost.dtype
        return rates.get(dtype, self.vector_tflops)


def devices() -> dict[str, Device]:
    out = {}
    for key, d in shipped("devices.toml")["devices"].items():
        out[key] = Device(
            key,
            d["name"],
            bool(d.get("peaks", True)),
            float(d.get("memory_tb_s", math.nan)),
            float(d.get("vector", math.nan)),
            tuple(sorted(d.get("matrix", {}).items())),
            float(d.get("min_kernel_us", 0.0)),
        )
    return out
