"""What a module class really is inside a built workload: its class, its instances, the
arguments each instance was constructed with, and what each call receives.

    cls = find_class(spec, cfg, "LlamaRMSNorm")          # from the model on the meta device
    with record_constructions(cls) as built:             # wraps cls.__init__ while the workload builds
        step = spec.build(cfg, device)
    cap = capture(step, cls, built)                       # runs one real step with forward hooks

Constructor arguments are recorded by wrapping ``cls.__init__`` during ``spec.build``
(the objects themselves: a config object stays a config object); call arguments are
bound to ``cls.forward``'s signature by a forward pre-hook and summarised (shape,
dtype, value range), because ``get_inputs()`` makes fresh tensors of that kind.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from headroom.errors import UserError
from headroom.profile.workload import RunConfig, Step, WorkloadSpec

# --- the class -----------------------------------------------------------------------------


def class_label(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def module_classes(model: Any) -> dict[str, list[type]]:
    """Class name -> the distinct classes of that name among the model's modules."""
    out: dict[str, list[type]] = {}
    for _, m in model.named_modules():
        cls = type(m)
        seen = out.setdefault(cls.__name__, [])
        if cls not in seen:
            seen.append(cls)
    return out


def match_class(model: Any, name: str, where: str) -> type:
    """The class called `name` (or `module.qualname`) among `model`'s modules; did-you-mean otherwise."""
    classes = module_classes(model)
    if "." in name:
        hits = [c for cs in classes.values() for c in cs if class_label(c) == name]
    else:
        hits = classes.get(name, [])
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise UserError(
            f"{where}: {len(hits)} classes are called {name} "
            f"({', '.join(class_label(c) for c in hits)}); give the dotted name"
        )
    close = difflib.get_close_matches(name.rsplit(".", 1)[-1], list(classes), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UserError(
        f"{where} has no module of class {name}{hint} "
        f"({len(classes)} module classes; `headroom targets TRACE --by module` ranks them)"
    )


def find_class(spec: WorkloadSpec, cfg: RunConfig, name: str) -> type:
    """Resolve `name` on the workload's model built on the meta device (no memory, seconds)."""
    model = spec.meta_model(cfg.flavour)
    return match_class(model, name, f"{spec.name} ({cfg.flavour})")


# --- constructions --------------------------------------------------------------------------


@dataclass
class Construction:
    """The arguments one instance was constructed with, as the builder passed them."""

    args: tuple
    kwargs: dict[str, Any]


@contextlib.contextmanager
def record_constructions(cls: type) -> Iterator[dict[int, Construction]]:
    """While active, every `cls(...)` (not a subclass) records its arguments under id(instance)."""
    original = cls.__dict__.get("__init__")
    init = getattr(cls, "__init__")
    built: dict[int, Construction] = {}

    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if type(self) is cls:
            built[id(self)] = Construction(tuple(args), dict(kwargs))

    wrapped.__wrapped__ = init  # type: ignore[attr-defined]
    setattr(cls, "__init__", wrapped)
    try:
        yield built
    finally:
        if original is None:
            delattr(cls, "__init__")
        else:
            setattr(cls, "__init__", original)


@dataclass(frozen=True)
class Argument:
    """One constructor argument, bound to the constructor's signature."""

    name: str
    value: Any
    keyword: bool  # a keyword-only (or **kwargs) argument: cannot be passed positionally


def bind_init(cls: type, c: Construction) -> list[Argument]:
    """The constructor's arguments in signature order, up to the last one given (defaults filled
    in between), so `cls(*[a.value for a in args])` builds the same module when none is keyword."""
    init = getattr(cls, "__init__")
    sig = inspect.signature(getattr(init, "__wrapped__", init))
    params = list(sig.parameters.values())[1:]  # drop self
    try:
        bound = sig.bind(None, *c.args, **c.kwargs)
    except TypeError as e:
        raise UserError(f"{cls.__name__}: its recorded constructor call does not bind ({e})") from None
    given = bound.arguments
    out: list[Argument] = []
    last = max((i for i, p in enumerate(params) if p.name in given), default=-1)
    for _i, p in enumerate(params[: last + 1]):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            out.extend(Argument(f"{p.name}[{k}]", v, False) for k, v in enumerate(given.get(p.name, ())))
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            out.extend(Argument(k, v, True) for k, v in given.get(p.name, {}).items())
        elif p.name in given:
            out.append(Argument(p.name, given[p.name], p.kind is inspect.Parameter.KEYWORD_ONLY))
        elif p.kind is not inspect.Parameter.KEYWORD_ONLY:
            if p.default is inspect.Parameter.empty:
                raise UserError(f"{cls.__name__}: constructor argument {p.name} was not given")
            out.append(Argument(p.name, p.default, False))
    return out


def positional_init(cls: type, c: Construction) -> list[Any]:
    """The positional list `ModelNew(*...)` is called with (KernelBench's `get_init_inputs()`)."""
    return [a.value for a in bind_init(cls, c)]


# --- calls ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """What a call received in one tensor argument: enough to make a fresh one of the same kind."""

    shape: tuple[int, ...]
    dtype: str  # "bfloat16", "int64", ...
    requires_grad: bool = False
    lo: float | None = None  # value range (integer, bool and float tensors)
    hi: float | None = None
    mean: float | None = None  # float tensors
    std: float | None = None
    channels_last: bool = False  # a 4-D tensor laid out channels-last (what convolutions in NHWC see)

    @property
    def floating(self) -> bool:
        return self.dtype in ("float16", "bfloat16", "float32", "float64")

    def signature(self) -> str:
        return f"{tuple(self.shape)} {self.dtype}"


def describe_tensor(t: Any) -> TensorSpec:
    import torch

    dtype = str(t.dtype).replace("torch.", "")
    lo = hi = mean = std = None
    if t.numel() and not t.is_complex():
        with torch.no_grad():
            d = t.detach()
            if t.is_floating_point():
                f = d.float()
                lo, hi = float(f.min()), float(f.max())
                mean, std = float(f.mean()), float(f.std()) if t.numel() > 1 else 0.0
            else:
                i = d.long() if d.dtype != torch.bool else d.to(torch.int64)
                lo, hi = float(i.min()), float(i.max())
                if d.dtype == torch.bool:
                    mean = float(i.float().mean())
    return TensorSpec(
        tuple(int(s) for s in t.shape), dtype, bool(t.requires_grad), lo, hi, mean, std, channels_last_layout(t)
    )


def channels_last_layout(t: Any) -> bool:
    """A 4-D tensor stored channels-last (and not also plain contiguous, as size-1 dims allow)."""
    import torch

    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


@dataclass
class Call:
    """One call of one instance: its arguments bound to `cls.forward` (TensorSpec or a constant)."""

    path: str
    arguments: list[tuple[str, Any]]
    autocast: str | None = None  # the autocast dtype when the call ran under autocast
    grad: bool = False  # autograd was recording
    output: Any = None  # TensorSpec, a tuple of them, or Unsupported

    def signature(self) -> str:
        parts = []
        for name, v in self.arguments:
            parts.append(f"{name}={v.signature()}" if isinstance(v, TensorSpec) else f"{name}={v!r}")
        return ", ".join(parts)


class Unsupported:
    """A call argument extract cannot reproduce (a cache object, a module, ...)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unsupported) and other.what == self.what

    def __hash__(self) -> int:
        return hash(self.what)


_CONSTANTS = (type(None), bool, int, float, str)


def _summarise(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if isinstance(value, _CONSTANTS) or isinstance(value, torch.dtype):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, _CONSTANTS) for v in value):
        return tuple(value)
    return Unsupported(type(value).__name__)


def bind_call(cls: type, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The call's arguments in `cls.forward`'s parameter order (raw values)."""
    sig = inspect.signature(getattr(cls, "forward"))
    bound = sig.bind(None, *args, **kwargs)
    out: list[tuple[str, Any]] = []
    for name, value in list(bound.arguments.items())[1:]:
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out.extend((f"*{name}[{i}]", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.extend((f"**{k}", v) for k, v in value.items())
        else:
            out.append((name, value))
    return out


@dataclass
class Capture:
    """A module class in a built workload: instances, constructions, and one step's calls."""

    cls: type
    instances: list[tuple[str, Any]]  # (path in step.modules, module)
    constructions: dict[str, Construction]  # path -> how it was built
    calls: list[Call] = field(default_factory=list)  # one real step's calls, in order
    param_dtypes: dict[str, str] = field(default_factory=dict)  # parameter name -> dtype (first instance)
    channels_last: bool = False  # its 4-D parameters are stored channels-last

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.instances]

    @property
    def calls_per_step(self) -> int:
        return len(self.calls)

    def common_call(self) -> tuple[Call, int]:
        """The most frequent call signature (ties: the first seen) and how many calls had it."""
        counts = Counter(c.signature() for c in self.calls)
        best = max(counts.values())
        for c in self.calls:
            if counts[c.signature()] == best:
                return c, best
        raise UserError(f"{self.cls.__name__}: no call was recorded")

    def common_construction(self) -> tuple[str, Construction, int]:
        """(a path, its construction, how many instances were built with the same arguments)."""
        keys = {p: repr(bind_init(self.cls, c)) for p, c in self.constructions.items()}
        counts = Counter(keys.values())
        best = max(counts.values())
        for p in self.paths:
            if p in keys and counts[keys[p]] == best:
                return p, self.constructions[p], best
        raise UserError(f"{self.cls.__name__}: no construction was recorded")


def instances_of(model: Any, cls: type) -> list[tuple[str, Any]]:
    return [(p, m) for p, m in model.named_modules() if type(m) is cls]


def match_constructions(
    cls: type, instances: list[tuple[str, Any]], built: dict[int, Construction]
) -> dict[str, Construction]:
    """Path -> construction; instances the builder copied instead of constructing (deepcopy) take
    the arguments every recorded construction shares, and are an error when they differ."""
    out: dict[str, Construction] = {}
    missing = []
    for path, m in instances:
        c = built.get(id(m))
        if c is None:
            missing.append(path)
        else:
            out[path] = c
    if missing:
        distinct = {repr(bind_init(cls, c)): c for c in built.values()}
        if len(distinct) != 1:
            raise UserError(
                f"{cls.__name__}: {len(missing)} instance(s) were not constructed while the workload "
                f"was built ({missing[0]}, ...), and the recorded constructions differ"
            )
        only = next(iter(distinct.values()))
        out.update({p: only for p in missing})
    return out


def record_calls(step: Step, cls: type, instances: list[tuple[str, Any]]) -> list[Call]:
    """Run one real step with a forward pre-hook on every instance; return the calls in order."""
    import torch

    calls: list[Call] = []
    open_calls: list[int] = []  # calls whose forward has not returned (instances may nest)
    handles = []

    def hook(path: str):
        def pre(module, args, kwargs):
            raw = bind_call(cls, args, kwargs)
            device = next((v.device.type for _, v in raw if isinstance(v, torch.Tensor)), "cpu")
            ac = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
            open_calls.append(len(calls))
            calls.append(
                Call(
                    path,
                    [(n, _summarise(v)) for n, v in raw],
                    str(ac).replace("torch.", "") if ac is not None else None,
                    torch.is_grad_enabled(),
                )
            )

        return pre

    def post(module, args, output):
        call = calls[open_calls.pop()]
        if isinstance(output, (tuple, list)):
            call.output = tuple(_summarise(o) for o in output)
        else:
            call.output = _summarise(output)

    for path, m in instances:
        handles.append(m.register_forward_pre_hook(hook(path), with_kwargs=True))
        handles.append(m.register_forward_hook(post))
    try:
        step()
    finally:
        for h in handles:
            h.remove()
    return calls


def parameter_dtypes(module: Any) -> dict[str, str]:
    return {n: str(p.dtype).replace("torch.", "") for n, p in module.named_parameters()}


def capture(step: Step, cls: type, built: dict[int, Construction]) -> Capture:
    """Instances of `cls` in the built workload, how each was built, and one real step's calls."""
    instances = instances_of(step.modules, cls)
    if not instances:
        raise UserError(
            f"{cls.__name__} is not in the model the workload built "
            f"(it was on the meta model: a builder replaces or compiles it)"
        )
    cons = match_constructions(cls, instances, built)
    calls = record_calls(step, cls, instances)
    if not calls:
        raise UserError(f"{cls.__name__}: {len(instances)} instance(s), but none was called during a step")
    first = instances[0][1]
    cl = any(channels_last_layout(p) for p in first.parameters())
    return Capture(cls, instances, cons, calls, parameter_dtypes(first), cl)
