"""Workloads: one typed spec per real model, a registry, and the helpers builders share.

A workload is a `WorkloadSpec` (modelled on torchtitan's `TrainSpec`): its name,
domain, what model it is, the size presets ("flavours"), the defaults for
mode/batch/seq/dtype each with a one-line *why*, how many identical blocks it
has (for `--layers`), and a `build(config, device) -> Step` that returns a
runnable step whose inputs are already on the device. A `Step` runs one
inference forward or one training step (forward + backward + optimizer).

Workloads live in the top-level `workloads` package: every module there that
does not start with `_` is imported and calls `register_workload(...)`. A user
adds one by dropping a module into `workloads/` or by pointing
`--workload-file` at a Python file (`load_workload_file`): no core change.

Builders construct big models on the meta device (parameters take no memory
and no time), then `materialize` them on the device with random weights, so
Llama-2-7B starts in seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import pkgutil
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from headroom.errors import UserError
from headroom.pyfile import import_file

DOMAINS = ("transformer", "recommender", "vision")
MODES = ("train", "infer")

# Accepted spellings of --dtype, and the canonical name recorded in manifests.
_DTYPE_ALIASES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "float32": "float32", "float": "float32",
}


def canonical_dtype(name: str) -> str:
    try:
        return _DTYPE_ALIASES[name.lower()]
    except KeyError:
        raise UserError(f"unknown --dtype '{name}'; use one of bf16, fp16, fp32") from None


def torch_dtype(name: str):
    import torch

    return getattr(torch, canonical_dtype(name))


# --- the spec -----------------------------------------------------------------


@dataclass(frozen=True)
class Default:
    """A default value and the one-line reason it is the default."""

    value: Any
    why: str


@dataclass
class Options:
    """What the user asked for; `None` means "the workload's default"."""

    mode: str | None = None
    phase: str | None = None
    kv_cache: str | None = None
    batch: int | None = None
    seq: int | None = None
    dtype: str | None = None
    layers: int | None = None
    compile: bool = False
    flavour: str | None = None
    tf32: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    # On a machine without CUDA, scale the defaults down (see WorkloadSpec.cpu_scale).
    scale_for_cpu: bool = True


@dataclass
class RunConfig:
    """The resolved configuration that actually runs (recorded in the manifest)."""

    workload: str
    flavour: str
    mode: str
    batch: int
    seq: int | None
    dtype: str
    device: str
    phase: str | None = None
    kv_cache: str | None = None
    layers: int | None = None          # blocks built (None: the workload has no block scaling)
    total_layers: int | None = None    # blocks in the real configuration
    compile: bool = False
    tf32: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)   # what was scaled, and why

    @property
    def torch_dtype(self):
        return torch_dtype(self.dtype)

    @property
    def extrapolated(self) -> bool:
        return self.layers is not None and self.total_layers is not None and self.layers != self.total_layers

    @property
    def variant(self) -> str:
        """Short label of what distinguishes this run from the workload's name."""
        parts = [self.mode]
        if self.phase:
            parts.append(self.phase)
        if self.kv_cache and (self.phase == "decode" or self.kv_cache == "static"):
            parts.append(f"{self.kv_cache}-cache")
        if self.compile:
            parts.append("compile")
        if self.extrapolated:
            parts.append(f"{self.layers}of{self.total_layers}-layers")
        return " ".join(parts)

    @property
    def tag(self) -> str:
        """File-name friendly id: workload[.flavour].variant."""
        base = self.workload if self.flavour == "default" else f"{self.workload}.{self.flavour}"
        return f"{base}.{self.variant.replace(' ', '.')}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "flavour": self.flavour, "variant": self.variant,
            "mode": self.mode, "phase": self.phase, "kv_cache": self.kv_cache,
            "batch": self.batch, "seq": self.seq, "dtype": self.dtype, "device": self.device,
            "layers": self.layers, "total_layers": self.total_layers, "compile": self.compile,
            "tf32": self.tf32, "extra": dict(self.extra), "notes": list(self.notes),
        }


@dataclass
class WorkloadSpec:
    """One workload: a real architecture at its real size, and how people run it."""

    name: str
    domain: str
    description: str
    model: str                                           # architecture and library, one line
    build: Callable[[RunConfig, Any], "Step"]            # (config, torch.device) -> Step
    meta_model: Callable[[str], Any]                     # flavour -> nn.Module on the meta device
    defaults: dict[str, Default]                         # mode, batch, seq, dtype (+ phase, kv_cache)
    modes: tuple[str, ...] = ("infer",)
    flavours: dict[str, str] = field(default_factory=lambda: {"default": "the real configuration"})
    num_layers: Callable[[str], int] | None = None       # identical blocks per flavour (None: no --layers)
    block: str = ""                                      # what one block is, e.g. "LlamaDecoderLayer"
    phases: tuple[str, ...] = ()                         # e.g. ("prefill", "decode")
    kv_caches: tuple[str, ...] = ()                      # e.g. ("static", "dynamic")
    seq_meaning: str = "tokens per sequence"
    extras: dict[str, Default] = field(default_factory=dict)   # workload-specific --opt KEY=VALUE
    # On CPU, these replace the defaults the user did not set: field -> (value, why).
    cpu_scale: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise ValueError(f"workload {self.name}: domain must be one of {DOMAINS}")
        for m in self.modes:
            if m not in MODES:
                raise ValueError(f"workload {self.name}: mode '{m}' is not one of {MODES}")
        for key in ("mode", "batch", "dtype"):
            if key not in self.defaults:
                raise ValueError(f"workload {self.name}: defaults need '{key}'")
        if "default" not in self.flavours:
            raise ValueError(f"workload {self.name}: flavours need a 'default' entry")

    # -- sizes -------------------------------------------------------------

    def param_count_meta(self, flavour: str = "default") -> int:
        """Parameters of the flavour's model, counted on the meta device (nothing allocated)."""
        self._check_flavour(flavour)
        model = self.meta_model(flavour)
        return sum(p.numel() for p in model.parameters())

    def _check_flavour(self, flavour: str) -> None:
        if flavour not in self.flavours:
            raise UserError(f"{self.name}: unknown flavour '{flavour}'; known: {', '.join(self.flavours)}")

    # -- options -> RunConfig ---------------------------------------------

    def default(self, key: str, phase: str | None = None, mode: str | None = None) -> Any:
        """The default for `key`; `key@train` and `key@<phase>` entries override it."""
        for qual in (mode if mode == "train" else None, phase):
            if qual and f"{key}@{qual}" in self.defaults:
                return self.defaults[f"{key}@{qual}"].value
        d = self.defaults.get(key)
        return d.value if d is not None else None

    def resolve(self, options: Options, device: str) -> RunConfig:
        """Fill the defaults, validate, and apply the CPU scaling policy."""
        o = options
        flavour = o.flavour or "default"
        self._check_flavour(flavour)
        mode = o.mode or self.default("mode")
        if mode not in self.modes:
            raise UserError(f"{self.name}: --mode {mode} is not supported; use {' or '.join(self.modes)}")
        phase = None
        if self.phases:
            phase = o.phase or self.default("phase") or self.phases[0]
            if phase not in self.phases:
                raise UserError(f"{self.name}: unknown --phase '{phase}'; use {' or '.join(self.phases)}")
            if mode == "train":
                if o.phase and phase != self.phases[0]:
                    raise UserError(f"{self.name}: --phase {phase} is an inference phase; drop --mode train")
                phase = None
        elif o.phase:
            raise UserError(f"{self.name}: has no phases (--phase is for autoregressive decoders)")
        kv = None
        if self.kv_caches and mode != "train":
            kv = o.kv_cache or self.default("kv_cache", phase) or self.kv_caches[0]
            if kv not in self.kv_caches:
                raise UserError(f"{self.name}: unknown --kv-cache '{kv}'; use {' or '.join(self.kv_caches)}")
        elif o.kv_cache:
            raise UserError(f"{self.name}: --kv-cache needs an inference run of a model with a KV cache")
        unknown = set(o.extra) - set(self.extras)
        if unknown:
            known = ", ".join(f"{k} (default {d.value}: {d.why})" for k, d in self.extras.items()) or "none"
            raise UserError(f"{self.name}: unknown --opt {', '.join(sorted(unknown))}; known: {known}")
        extra = {k: str(d.value) for k, d in self.extras.items()}
        extra.update(o.extra)

        total = self.num_layers(flavour) if self.num_layers else None
        if o.layers is not None:
            if total is None:
                raise UserError(f"{self.name}: --layers needs identical repeated blocks; this workload has none")
            if not 1 <= o.layers <= total:
                raise UserError(f"{self.name}: --layers must be between 1 and {total}")

        cfg = RunConfig(
            workload=self.name, flavour=flavour, mode=mode,
            batch=o.batch if o.batch is not None else self.default("batch", phase, mode),
            seq=o.seq if o.seq is not None else self.default("seq", phase, mode),
            dtype=canonical_dtype(o.dtype or self.default("dtype", phase, mode)),
            device=device, phase=phase, kv_cache=kv,
            layers=(o.layers if o.layers is not None else total), total_layers=total,
            compile=o.compile, tf32=o.tf32, extra=extra,
        )
        if cfg.batch is not None and cfg.batch < 1:
            raise UserError(f"{self.name}: --batch must be at least 1")
        if cfg.seq is not None and cfg.seq < 1:
            raise UserError(f"{self.name}: --seq must be at least 1")
        if o.seq is not None and self.default("seq") is None:
            raise UserError(f"{self.name}: has no sequence length (--seq does not apply)")
        if device == "cpu" and o.scale_for_cpu:
            self._scale_for_cpu(cfg, o)
        return cfg

    def _scale_for_cpu(self, cfg: RunConfig, o: Options) -> None:
        user_set = {"batch": o.batch, "seq": o.seq, "dtype": o.dtype, "layers": o.layers}
        for key, (value, why) in self.cpu_scale.items():
            if key in user_set and user_set[key] is not None:
                continue
            if key in ("batch", "seq", "dtype", "layers"):
                old = getattr(cfg, key)
                if key == "dtype":
                    value = canonical_dtype(value)
                if key in ("batch", "seq", "layers") and old is not None:
                    value = min(value, old)
                if old == value or old is None:
                    continue
                setattr(cfg, key, value)
                cfg.notes.append(f"{key} {old} -> {value} ({why})")
            else:  # a workload extra, e.g. a row cap for embedding tables
                if key in o.extra:
                    continue
                old = cfg.extra.get(key)
                if old == str(value):
                    continue
                cfg.extra[key] = str(value)
                cfg.notes.append(f"{key} {old} -> {value} ({why})")


# --- the step -----------------------------------------------------------------


class Step:
    """One runnable step of a built workload, inputs already on the device.

    `fn()` runs one step. `blocks` lists the identical repeated blocks as
    (module path, module) for `--layers`. `info` goes into the manifest
    (e.g. which embedding implementation ran). `close()` frees what the
    builder set up (process groups, caches).
    """

    def __init__(self, fn: Callable[[], Any], model: Any, *, blocks: Sequence[tuple[str, Any]] = (),
                 info: dict[str, Any] | None = None, close: Callable[[], None] | None = None,
                 params: int | None = None):
        self.fn = fn
        self.model = model
        self.blocks = list(blocks)
        self.info = dict(info or {})
        self._close = close
        self._hooks: list[Any] = []
        if params is None and model is not None:
            params = sum(p.numel() for p in model.parameters())
        self.params = params

    def __call__(self) -> Any:
        return self.fn()

    def add_hooks(self, handles: Iterable[Any]) -> None:
        self._hooks.extend(handles)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._close is not None:
            self._close()
            self._close = None


# --- registry -----------------------------------------------------------------

_REGISTRY: dict[str, WorkloadSpec] = {}
_DISCOVERED = False
_DISCOVERY_ERRORS: dict[str, str] = {}


def register_workload(spec: WorkloadSpec) -> WorkloadSpec:
    """Add a workload to the registry (a module re-imported from the same file replaces its own)."""
    if not isinstance(spec, WorkloadSpec):
        raise TypeError("register_workload takes a WorkloadSpec")
    old = _REGISTRY.get(spec.name)
    if old is not None and old.source and spec.source and old.source != spec.source:
        raise UserError(f"workload '{spec.name}' is defined twice: {old.source} and {spec.source}")
    _REGISTRY[spec.name] = spec
    return spec


def discover() -> None:
    """Import every module of the `workloads` package once (each registers its specs)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    try:
        import workloads
    except ImportError:  # the package is not importable (e.g. installed without it)
        return
    for info in pkgutil.iter_modules(workloads.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"workloads.{info.name}")
            _register_declared(module, getattr(module, "__file__", "") or "")
        except Exception as e:  # one broken module must not hide the others
            _DISCOVERY_ERRORS[info.name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"headroom: workloads/{info.name}.py failed to import: {e}", stacklevel=2)


def _register_declared(module: Any, source: str) -> list[WorkloadSpec]:
    """Register a module's `WORKLOAD` / `WORKLOADS` (for modules that do not call register_workload)."""
    declared = []
    if isinstance(getattr(module, "WORKLOAD", None), WorkloadSpec):
        declared.append(module.WORKLOAD)
    declared.extend(s for s in getattr(module, "WORKLOADS", None) or [] if isinstance(s, WorkloadSpec))
    for s in declared:
        if not s.source:
            s.source = source
        if _REGISTRY.get(s.name) is not s:
            register_workload(s)
    return declared


def list_workloads() -> list[WorkloadSpec]:
    discover()
    return sorted(_REGISTRY.values(), key=lambda s: (DOMAINS.index(s.domain), s.name))


def workload_names() -> list[str]:
    return [s.name for s in list_workloads()]


def get_workload(name: str) -> WorkloadSpec:
    discover()
    spec = _REGISTRY.get(name)
    if spec is None:
        raise UserError(f"unknown workload '{name}'; known: {', '.join(workload_names())}")
    return spec


def load_workload_file(path: str | Path) -> list[WorkloadSpec]:
    """Import a Python file that defines workloads; returns the specs it added.

    The file calls `register_workload(WorkloadSpec(...))`, or defines a module-level
    `WORKLOAD` (a spec) or `WORKLOADS` (a list of specs), which are registered here.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such workload file")
    discover()
    before = dict(_REGISTRY)
    try:
        module = import_file(path, "workload")
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"{path}: failed to import ({type(e).__name__}: {e})") from e
    _register_declared(module, str(path))
    added = [s for n, s in _REGISTRY.items() if before.get(n) is not s]
    if not added:
        raise UserError(f"{path}: defines no workload (call register_workload or set WORKLOAD)")
    return added


# --- helpers for builders -----------------------------------------------------


@contextlib.contextmanager
def meta_parameters() -> Iterator[None]:
    """Construct modules with parameters on the meta device and buffers on the CPU.

    Parameters (the gigabytes) cost nothing; buffers (rotary frequencies,
    position ids, batch-norm statistics: small) keep their real values, so
    `materialize` only has to initialise parameters.
    """
    import torch.nn as nn

    original = nn.Module.register_parameter

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def init_parameter(module_name: str, param_name: str, module: Any, p: Any, std: float = 0.02) -> None:
    """Random initialisation by module type (what the libraries do, without their slow paths)."""
    import torch
    import torch.nn as nn

    with torch.no_grad():
        cls = type(module).__name__
        if param_name == "bias" or param_name.endswith("_bias"):
            p.zero_()
        elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)) or "Norm" in cls:
            p.fill_(1.0)
        elif isinstance(module, nn.Conv2d) or p.dim() == 4:
            fan_out = p.shape[0] * math.prod(p.shape[2:])
            p.normal_(0.0, math.sqrt(2.0 / fan_out))
        else:
            p.normal_(0.0, std)


def materialize(model: Any, device: Any, dtype: Any = None, std: float = 0.02,
                init: Callable[[str, str, Any, Any], None] | None = None) -> Any:
    """Give every meta parameter real storage on `device` and random values; move buffers.

    Parameters shared between modules (tied embeddings) stay shared. Floating
    buffers keep their dtype (rotary frequencies stay fp32, as in the libraries).
    """
    import torch
    import torch.nn as nn

    init = init or (lambda mn, pn, m, p: init_parameter(mn, pn, m, p, std))
    done: dict[int, nn.Parameter] = {}
    for mname, module in model.named_modules():
        for pname, p in list(module._parameters.items()):
            if p is None:
                continue
            key = id(p)
            if key not in done:
                want = dtype if (dtype is not None and p.is_floating_point()) else p.dtype
                new = nn.Parameter(torch.empty(p.shape, dtype=want, device=device),
                                   requires_grad=p.requires_grad)
                init(mname, pname, module, new.data)
                done[key] = new
            module._parameters[pname] = done[key]
        for bname, b in list(module._buffers.items()):
            if b is None:
                continue
            if b.device.type == "meta":
                raise RuntimeError(f"buffer {mname}.{bname} is on the meta device; build under meta_parameters()")
            module._buffers[bname] = b.to(device)
    return model


class _Range:
    """A profiler range (record_function) plus an NVTX range, opened and closed by hooks."""

    def __init__(self, name: str):
        from torch.autograd.profiler import record_function

        self.name = name
        self._rf = record_function(name)

    def enter(self) -> None:
        self._rf.__enter__()
        nvtx_push(self.name)

    def exit(self) -> None:
        nvtx_pop()
        self._rf.__exit__(None, None, None)


BLOCK_RANGE_PREFIX = "headroom/block "


def instrument_blocks(blocks: Sequence[tuple[str, Any]], train: bool) -> list[Any]:
    """Mark each block's forward (and, when training, backward) with a named range.

    The ranges (`headroom/block <module path>` and `... backward`) let `--layers`
    split kernel time into per-block and once-per-step work. Returns hook handles.
    """
    handles = []
    for path, module in blocks:
        fwd = _Range(f"{BLOCK_RANGE_PREFIX}{path}")
        handles.append(module.register_forward_pre_hook(lambda m, a, r=fwd: r.enter()))
        handles.append(module.register_forward_hook(lambda m, a, o, r=fwd: r.exit()))
        if train:
            bwd = _Range(f"{BLOCK_RANGE_PREFIX}{path} backward")
            handles.append(module.register_full_backward_pre_hook(lambda m, g, r=bwd: r.enter()))
            handles.append(module.register_full_backward_hook(lambda m, gi, go, r=bwd: r.exit()))
    return handles


# NVTX: the `nvtx` package when installed, else torch.cuda.nvtx on CUDA builds, else nothing.
_NVTX: Any = None


def _nvtx_impl() -> Any:
    global _NVTX
    if _NVTX is None:
        impl: Any = False
        try:
            import nvtx as _nv  # noqa: F401

            impl = ("nvtx", _nv)
        except Exception:
            try:
                import torch

                if torch.cuda.is_available():
                    impl = ("torch", torch.cuda.nvtx)
            except Exception:
                impl = False
        _NVTX = impl
    return _NVTX


def nvtx_push(name: str) -> None:
    impl = _nvtx_impl()
    if not impl:
        return
    kind, mod = impl
    if kind == "nvtx":
        mod.push_range(name, domain="headroom")
    else:
        mod.range_push(name)


def nvtx_pop() -> None:
    impl = _nvtx_impl()
    if not impl:
        return
    kind, mod = impl
    if kind == "nvtx":
        mod.pop_range(domain="headroom")
    else:
        mod.range_pop()


@contextlib.contextmanager
def phase_range(name: str) -> Iterator[None]:
    """A named range seen by both torch.profiler (record_function) and Nsight (NVTX)."""
    from torch.autograd.profiler import record_function

    nvtx_push(name)
    try:
        with record_function(name):
            yield
    finally:
        nvtx_pop()


def nvtx_backend() -> str:
    impl = _nvtx_impl()
    return impl[0] if impl else "none"


def train_step(model: Any, loss_fn: Callable[[], Any], optimizer: Any, *, device_type: str,
               amp_dtype: Any = None) -> Callable[[], None]:
    """forward (under autocast when `amp_dtype`) -> backward -> optimizer.step, each a named range."""
    import torch

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with phase_range("headroom/forward"):
            if amp_dtype is not None:
                with torch.autocast(device_type=device_type, dtype=amp_dtype):
                    loss = loss_fn()
            else:
                loss = loss_fn()
        with phase_range("headroom/backward"):
            loss.backward()
        with phase_range("headroom/optimizer"):
            optimizer.step()

    return step


def infer_step(forward: Callable[[], Any]) -> Callable[[], None]:
    import torch

    def step() -> None:
        with torch.inference_mode(), phase_range("headroom/forward"):
            forward()

    return step


def compile_model(model: Any, blocks: Sequence[tuple[str, Any]], per_block: bool) -> Any:
    """`torch.compile`: the whole model, or each block's forward (keeps block ranges outside
    the compiled regions, which `--layers` needs). Returns what to call."""
    import torch

    if per_block:
        for _, block in blocks:
            block.forward = torch.compile(block.forward)
        return model
    return torch.compile(model)


def replace_config(cfg: RunConfig, **changes: Any) -> RunConfig:
    return replace(cfg, **changes)
