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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headroom.errors import UserError
from headroom.jsonio import omit_if

DOMAINS = ("transformer", "recommender", "vision")
MODES = ("train", "infer")

# Accepted spellings of --dtype, and the canonical name recorded in manifests.
_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
}


def canonical_dtype(name: str) -> str:
    try:
        return _DTYPE_ALIASES[name.lower()]
    except KeyError:
        raise UserError(f"unknown --dtype '{name}'; use one of bf16, fp16, fp32") from None


def file_stem(workload: str) -> str:
    """A workload name as file names use it: `hf:<hub id or directory>` becomes hf-<its last part>."""
    if ":" not in workload:
        return workload
    scheme, ref = workload.split(":", 1)
    return f"{scheme}-{ref.rstrip('/').rsplit('/', 1)[-1]}"


def torch_dtype(name: str):
    import torch

    return getattr(torch, canonical_dtype(name))


# --- the spec -----------------------------------------------------------------


@dataclass(frozen=True)
class Default:
    """A default value and the one-line reason it is the default."""

    value: Any
    why: str


# torch.compile's modes that `--compile-mode` takes.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# The modes in which Inductor captures and replays CUDA graphs itself (its graph trees).
GRAPH_TREE_MODES = ("reduce-overhead", "max-autotune")


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
    # torch.compile's mode (default, reduce-overhead, max-autotune-no-cudagraphs); implies `compile`.
    compile_mode: str | None = None
    # Capture the step once as a CUDA graph after warm-up and replay it, as serving engines run decode.
    graphs: bool = False
    flavour: str | None = None
    tf32: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    # A profiler range per nn.Module call (headroom/profile/modules.py); off only to measure their cost.
    module_ranges: bool = True
    # On a machine without CUDA, scale the defaults down (see WorkloadSpec.cpu_scale).
    scale_for_cpu: bool = True
    # Several processes (`headroom profile --nproc N`): how they split the model (see WorkloadSpec.parallel).
    nproc: int = 1
    parallel: str | None = None


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
    layers: int | None = None  # blocks built (None: the workload has no block scaling)
    total_layers: int | None = None  # blocks in the real configuration
    compile: bool = False
    tf32: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what was scaled, and why
    module_ranges: bool = True
    # One-process runs keep the manifest they always had: no world_size or parallel key.
    world_size: int = field(default=1, metadata=omit_if(lambda c: c.world_size <= 1))  # processes (ranks)
    parallel: str | None = field(default=None, metadata=omit_if(lambda c: c.world_size <= 1))  # ddp | fsdp | torchrec
    # Execution mode beyond eager (absent from the manifest when not used, as before they existed).
    compile_mode: str | None = field(default=None, metadata=omit_if(lambda c: c.compile_mode is None))
    graphs: bool = field(default=False, metadata=omit_if(lambda c: not c.graphs))

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "workload",
        "flavour",
        "variant",
        "mode",
        "phase",
        "kv_cache",
        "batch",
        "seq",
        "dtype",
        "device",
        "layers",
        "total_layers",
        "compile",
        "compile_mode",
        "graphs",
        "tf32",
        "extra",
        "notes",
        "module_ranges",
        "world_size",
        "parallel",
    )

    @property
    def execution(self) -> str:
        """eager, graphs (captured once, replayed), compiled, or compiled-<mode>."""
        if self.compile:
            return f"compiled-{self.compile_mode}" if self.compile_mode else "compiled"
        return "graphs" if self.graphs else "eager"

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
            parts.append(f"compile-{self.compile_mode}" if self.compile_mode else "compile")
        if self.graphs:
            parts.append("graphs")
        if self.extrapolated:
            parts.append(f"{self.layers}of{self.total_layers}-layers")
        if self.world_size > 1:
            parts.append(f"{self.parallel}x{self.world_size}")
        return " ".join(parts)

    @property
    def tag(self) -> str:
        """File-name friendly id: workload[.flavour].variant."""
        name = file_stem(self.workload)
        base = name if self.flavour == "default" else f"{name}.{self.flavour}"
        return f"{base}.{self.variant.replace(' ', '.')}"


@dataclass
class WorkloadSpec:
    """One workload: a real architecture at its real size, and how people run it."""

    name: str
    domain: str
    description: str
    model: str  # architecture and library, one line
    build: Callable[[RunConfig, Any], Step]  # (config, torch.device) -> Step
    meta_model: Callable[[str], Any]  # flavour -> nn.Module on the meta device
    defaults: dict[str, Default]  # mode, batch, seq, dtype (+ phase, kv_cache)
    modes: tuple[str, ...] = ("infer",)
    flavours: dict[str, str] = field(default_factory=lambda: {"default": "the real configuration"})
    num_layers: Callable[[str], int] | None = None  # identical blocks per flavour (None: no --layers)
    block: str = ""  # what one block is, e.g. "LlamaDecoderLayer"
    phases: tuple[str, ...] = ()  # e.g. ("prefill", "decode")
    kv_caches: tuple[str, ...] = ()  # e.g. ("static", "dynamic")
    seq_meaning: str = "tokens per sequence"
    extras: dict[str, Default] = field(default_factory=dict)  # workload-specific --opt KEY=VALUE
    # On CPU, these replace the defaults the user did not set: field -> (value, why).
    cpu_scale: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # How `--nproc N` splits a training step (the first is the default): ddp, fsdp (FSDP2
    # fully_shard), or torchrec (sharded embedding tables, data-parallel dense part). Empty: one process.
    parallel: tuple[str, ...] = ()

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
            workload=self.name,
            flavour=flavour,
            mode=mode,
            batch=o.batch if o.batch is not None else self.default("batch", phase, mode),
            seq=o.seq if o.seq is not None else self.default("seq", phase, mode),
            dtype=canonical_dtype(o.dtype or self.default("dtype", phase, mode)),
            device=device,
            phase=phase,
            kv_cache=kv,
            layers=(o.layers if o.layers is not None else total),
            total_layers=total,
            compile=o.compile or o.compile_mode is not None,
            tf32=o.tf32,
            extra=extra,
            module_ranges=o.module_ranges,
            compile_mode=o.compile_mode,
            graphs=o.graphs,
        )
        self._check_execution(cfg, device)
        if cfg.batch is not None and cfg.batch < 1:
            raise UserError(f"{self.name}: --batch must be at least 1")
        if cfg.seq is not None and cfg.seq < 1:
            raise UserError(f"{self.name}: --seq must be at least 1")
        if o.seq is not None and self.default("seq") is None:
            raise UserError(f"{self.name}: has no sequence length (--seq does not apply)")
        cfg.world_size, cfg.parallel = self._parallel(o, mode)
        if device == "cpu" and o.scale_for_cpu:
            self._scale_for_cpu(cfg, o)
        return cfg

    def _check_execution(self, cfg: RunConfig, device: str) -> None:
        """--graphs and --compile-mode: what they can run."""
        if cfg.compile_mode is not None and cfg.compile_mode not in COMPILE_MODES:
            raise UserError(f"--compile-mode {cfg.compile_mode}: use one of {', '.join(COMPILE_MODES)}")
        if not cfg.graphs:
            return
        if device != "cuda":
            raise UserError(f"{self.name}: --graphs captures the step as a CUDA graph and needs a CUDA device")
        if cfg.mode == "train":
            raise UserError(
                f"{self.name}: --graphs captures inference steps (decode, prefill, a forward); drop --mode train"
            )
        if cfg.compile_mode in GRAPH_TREE_MODES:
            raise UserError(
                f"--compile-mode {cfg.compile_mode} already replays CUDA graphs (Inductor's graph trees): drop --graphs"
            )
        if cfg.kv_cache == "dynamic" and cfg.phase == "decode":
            raise UserError(
                f"{self.name}: --graphs needs fixed shapes: a dynamic KV cache grows every decode "
                f"step (use --kv-cache static)"
            )

    def _parallel(self, o: Options, mode: str) -> tuple[int, str | None]:
        if o.nproc < 1:
            raise UserError("--nproc must be at least 1")
        if o.nproc == 1:
            if o.parallel:
                raise UserError(f"--parallel {o.parallel} needs --nproc 2 or more")
            return 1, None
        if mode != "train":
            raise UserError(
                f"{self.name}: --nproc {o.nproc} profiles data-parallel training; an inference "
                f"replica runs in one process (drop --nproc or use --mode train)"
            )
        if not self.parallel:
            raise UserError(f"{self.name}: runs in one process only (no --nproc)")
        parallel = o.parallel or self.parallel[0]
        if parallel not in self.parallel:
            raise UserError(f"{self.name}: --parallel {parallel} is not supported; use {' or '.join(self.parallel)}")
        return o.nproc, parallel

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

    `fn()` runs one step. `forward()` runs the model once on the step's own
    inputs and returns what it computes -- inference: the model's output;
    training: the loss, autograd graph attached, under the step's autocast --
    with no optimizer step, and leaving the state a step reads (a decode KV
    cache's position) as it found it, so two calls see the same inputs
    (`headroom validate` compares an original and a substituted model with it).
    `train` says whether `fn` is a training step. `blocks` lists the identical
    repeated blocks as (module path, module) for `--layers`. `info` goes into
    the manifest (e.g. which embedding implementation ran). `close()` frees
    what the builder set up (process groups, caches). `modules` is the module whose
    calls get profiler ranges (default: `model`; a workload that wraps its
    model, e.g. in torchrec's DistributedModelParallel, names the model inside).
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        model: Any,
        *,
        blocks: Sequence[tuple[str, Any]] = (),
        info: dict[str, Any] | None = None,
        close: Callable[[], None] | None = None,
        params: int | None = None,
        modules: Any = None,
        forward: Callable[[], Any] | None = None,
        train: bool = False,
    ):
        self.fn = fn
        self.model = model
        self.modules = model if modules is None else modules
        self.forward = forward
        self.train = train
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
