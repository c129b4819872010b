"""A KernelBench problem file (and its problem -> selector entry) for a module of a workload.

The file imports the module's own class and subclasses it, so ``Model`` has the same
constructor, parameter and buffer names (``Model(*get_init_inputs()).load_state_dict(
original.state_dict())`` works) and the same forward; it casts its parameters to the dtype
the workload holds them in (the workload builds, then materialises in ``--dtype``).
``get_inputs()`` makes fresh tensors of the shapes and dtypes the module really receives
(the most frequent call signature of one real step), with values in the range seen.
From a training workload, ``Model.forward`` runs forward and backward
(`headroom.extract.autograd`), because those are the kernels training pays for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

from headroom.errors import UserError
from headroom.extract.capture import Call, Capture, TensorSpec, Unsupported, bind_init, class_label
from headroom.extract.codegen import Source, literal, tensor_expr

SUITE = "headroom extract"


@dataclass
class Share:
    """How much of the profiled window the extracted part takes (docs/extract.md)."""

    source: str  # the trace it was measured in
    mode: str  # "gpu" (kernel time) or "cpu-ops" (CPU operator self time)
    us_per_step: float  # the part's time per step
    total_us_per_step: float  # all kernel (or CPU op) time per step
    forward_us_per_step: float
    backward_us_per_step: float
    kernels_per_step: float

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "source",
        "mode",
        "fraction",
        "us_per_step",
        "total_us_per_step",
        "forward_us_per_step",
        "backward_us_per_step",
        "kernels_per_step",
    )

    @property
    def fraction(self) -> float:
        return self.us_per_step / self.total_us_per_step if self.total_us_per_step > 0 else 0.0

    def describe(self) -> str:
        what = "GPU kernel time" if self.mode == "gpu" else "CPU operator time (no GPU in the trace)"
        text = (
            f"{100 * self.fraction:.2f}% of {what}: {self.us_per_step / 1e3:.3f} ms of "
            f"{self.total_us_per_step / 1e3:.3f} ms per step, {self.kernels_per_step:g} "
            f"{'kernels' if self.mode == 'gpu' else 'ops'} per step"
        )
        if self.backward_us_per_step > 0:
            text += (
                f" (forward {self.forward_us_per_step / 1e3:.3f} ms, backward {self.backward_us_per_step / 1e3:.3f} ms)"
            )
        return text


def comment_block(lines: list[str]) -> str:
    return "\n".join(f"# {ln}".rstrip() for ln in lines)


def _param_cast(cap: Capture) -> tuple[str, str]:
    """(module-level constant lines, __init__ lines) casting parameters to the workload's dtypes."""
    floating = {n: d for n, d in cap.param_dtypes.items() if d in ("float16", "bfloat16", "float32", "float64")}
    if not floating or all(d == "float32" for d in floating.values()):
        return "", ""
    kinds = set(floating.values())
    if len(kinds) == 1:
        dt = next(iter(kinds))
        const = f"PARAM_DTYPE = torch.{dt}  # the dtype the workload holds this module's parameters in"
        body = (
            "        for p in self.parameters():  # the workload materialises its parameters in --dtype\n"
            "            if p.is_floating_point():\n"
            "                p.data = p.data.to(PARAM_DTYPE)"
        )
        return const, body
    mapping = ", ".join(f"{n!r}: torch.{d}" for n, d in floating.items())
    const = f"PARAM_DTYPES = {{{mapping}}}  # the dtypes the workload holds the parameters in"
    body = (
        "        for name, p in self.named_parameters():\n"
        "            if name in PARAM_DTYPES:\n"
        "                p.data = p.data.to(PARAM_DTYPES[name])"
    )
    return const, body


def _forward_inputs(cap: Capture, call: Call) -> list[tuple[str, Any]]:
    """The call's arguments in forward's positional order (defaults filled into gaps)."""
    sig = inspect.signature(getattr(cap.cls, "forward"))
    params = list(sig.parameters.values())[1:]
    given = dict(call.arguments)
    for name in given:
        if name.startswith("*"):
            raise UserError(
                f"{cap.cls.__name__}.forward receives {name.lstrip('*')} through *args/**kwargs: "
                f"extract needs named positional arguments (extract a module below it)"
            )
    out: list[tuple[str, Any]] = []
    last = max((i for i, p in enumerate(params) if p.name in given), default=-1)
    for p in params[: last + 1]:
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            if p.name in given:
                raise UserError(
                    f"{cap.cls.__name__}.forward: keyword-only argument {p.name} cannot be a KernelBench input"
                )
            continue
        value = given.get(p.name, p.default)
        if value is inspect.Parameter.empty:
            raise UserError(f"{cap.cls.__name__}.forward: argument {p.name} was not given")
        if isinstance(value, Unsupported):
            raise UserError(
                f"{cap.cls.__name__}.forward receives a {value.what} as {p.name}: extract writes "
                f"tensors and constants only (extract a module below it)"
            )
        out.append((p.name, value))
    return out


def _outputs(cap: Capture, call: Call) -> list[TensorSpec]:
    out = call.output
    specs = list(out) if isinstance(out, tuple) else [out]
    if not specs or not all(isinstance(s, TensorSpec) for s in specs):
        raise UserError(
            f"{cap.cls.__name__}: its output is not a tensor or a tuple of tensors; a training "
            f"problem needs the output's gradient"
        )
    return specs


def module_problem(
    cap: Capture,
    *,
    name: str,
    workload: str,
    config: dict[str, Any],
    train: bool,
    share: Share | None,
    command: str,
    note: str = "",
) -> str:
    """The source of the problem file for `cap` (see the module docstring)."""
    src = Source()
    base = src.name(cap.cls.__module__, cap.cls.__qualname__, alias="_Module")
    call, n_common = cap.common_call()
    inputs = _forward_inputs(cap, call)
    path0, cons, n_same = cap.common_construction()
    init_args = bind_init(cap.cls, cons)
    if any(a.keyword for a in init_args):
        kw = [a.name for a in init_args if a.keyword]
        raise UserError(
            f"{cap.cls.__name__}: constructed with keyword-only argument(s) {', '.join(kw)}; "
            f"KernelBench passes get_init_inputs() positionally"
        )
    init_exprs = [literal(src, a.value, f"{cap.cls.__name__}({a.name}=...)") for a in init_args]
    const, cast = _param_cast(cap)
    header = _header(
        cap,
        call,
        n_common,
        path0,
        n_same,
        name=name,
        workload=workload,
        config=config,
        train=train,
        share=share,
        command=command,
        note=note,
    )
    input_lines, grad_lines = _input_lines(cap, call, src, inputs, train)
    params = [p for p, _ in inputs]
    body = _model_body(cap, call, params, cast, len(grad_lines), train)
    doc = f'    """{cap.cls.__name__} exactly as {workload} constructs it (subclassed: same parameters and buffers)."""'

    parts = [comment_block(header), "", "import torch", *src.import_lines(), ""]
    if const:
        parts += [const, ""]
    for h in src.helpers:
        parts += ["", h, ""]
    parts += [
        "",
        f"class Model({base}):",
        doc,
        *body,
        "",
        "",
        "def get_inputs():",
        "    return [",
        *input_lines,
        *grad_lines,
        "    ]",
        "",
        "",
        "def get_init_inputs():",
        "    return [" + ", ".join(init_exprs) + "]",
        "",
    ]
    text = "\n".join(parts)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text


def _header(
    cap: Capture,
    call: Call,
    n_common: int,
    path0: str,
    n_same: int,
    *,
    name: str,
    workload: str,
    config: dict[str, Any],
    train: bool,
    share: Share | None,
    command: str,
    note: str,
) -> list[str]:
    """The problem file's opening comment: where the module comes from, how often it runs, what it was given."""
    sigs: dict[str, int] = {}
    for c in cap.calls:
        sigs[c.signature()] = sigs.get(c.signature(), 0) + 1
    shown = sorted(sigs.items(), key=lambda kv: -kv[1])
    header = [
        f"{name}: {cap.cls.__name__} from the {workload} workload, in KernelBench's format.",
        f"Written by `{command}`.",
        "",
        "workload: " + ", ".join(f"{k} {v}" for k, v in config.items() if v not in (None, "", [], {})),
        f"module:   {class_label(cap.cls)}, {len(cap.instances)} instance(s): "
        + ", ".join(cap.paths[:4])
        + (", ..." if len(cap.paths) > 4 else ""),
        f"calls per step: {cap.calls_per_step}"
        + (f" ({cap.calls_per_step / len(cap.instances):g} per instance)" if cap.instances else ""),
        "share: "
        + (
            share.describe() + f" (measured in {share.source})"
            if share is not None
            else "not measured (run without --no-profile, or give --trace)"
        ),
        f"constructed as: {path0} ({n_same} of {len(cap.constructions)} instance(s) with these arguments)",
        "inputs seen (calls): " + "; ".join(f"{s} x{k}" for s, k in shown[:3]) + ("; ..." if len(shown) > 3 else ""),
        f"get_inputs() makes the most frequent ({n_common} of {cap.calls_per_step} calls).",
    ]
    if call.autocast:
        header.append(f"The workload calls it under autocast to {call.autocast}: forward does the same.")
    if train:
        header.append(
            "Training workload: forward runs forward + backward (headroom.extract.autograd) and returns "
            "the output, the input gradients and the parameter gradients; verify a candidate with "
            "`ModelNew = with_backward(YourModelNew)`."
        )
    if note:
        header.append(note)
    return header


def _input_lines(
    cap: Capture, call: Call, src: Source, inputs: list[tuple[str, Any]], train: bool
) -> tuple[list[str], list[str]]:
    """get_inputs()'s lines: the forward's inputs, and in training the upstream gradient of each output."""
    input_lines = []
    for pname, v in inputs:
        if isinstance(v, TensorSpec):
            expr, seen = tensor_expr(v)
            input_lines.append(f"        {expr},  # {pname}: {v.signature()}, {seen}")
        else:
            input_lines.append(f"        {literal(src, v, f'{cap.cls.__name__}.forward({pname}=...)')},  # {pname}")
    grad_lines = []
    if train:
        for k, o in enumerate(_outputs(cap, call)):
            grad_lines.append(
                f"        torch.randn({tuple(o.shape)!r}, dtype=torch.{o.dtype}),"
                f"  # upstream gradient of output {k}: {o.signature()}"
            )
        src.name("headroom.extract.autograd", "forward_backward")
    return input_lines, grad_lines


def _model_body(cap: Capture, call: Call, params: list[str], cast: str, n_grads: int, train: bool) -> list[str]:
    """Model's body: the parameters' dtype and memory format as the workload keeps them, and a forward that
    runs forward + backward in training and under the workload's autocast."""
    body: list[str] = []
    if cast or cap.channels_last:
        body.append("    def __init__(self, *init_inputs):")
        body.append("        super().__init__(*init_inputs)")
        if cast:
            body.append(cast)
        if cap.channels_last:
            body.append("        self.to(memory_format=torch.channels_last)  # as the workload stores its weights")
        body.append("")
    autocast = f"torch.{call.autocast}" if call.autocast else None
    if train:
        grads = [f"grad_output_{k}" for k in range(n_grads)]
        body.append(f"    def forward(self, {', '.join(params + grads)}):")
        body.append(
            f"        return forward_backward(self, super().forward, ({', '.join(params)}"
            f"{',' if len(params) == 1 else ''}), ({', '.join(grads)}{',' if len(grads) == 1 else ''}), "
            f"autocast={autocast})"
        )
    elif autocast:
        body.append(f"    def forward(self, {', '.join(params)}):")
        body.append(
            f"        with torch.autocast(device_type={params[0] if params else 'None'}.device.type, dtype={autocast}):"
        )
        body.append(f"            return super().forward({', '.join(params)})")
    if not body:
        body.append("    pass")
    return body


def selector_entry(name: str, selectors: list[str], note: str) -> str:
    """The problem -> selector entry (headroom/data/problems.toml's format) for `--problems FILE`."""
    sel = ", ".join('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in selectors)
    return (
        f"# The kernels {name} stands for: headroom project TRACE --problems THIS_FILE --speedups VERIFY.json\n"
        f'[problem."{name}"]\n'
        f'suite = "{SUITE}"\n'
        f"select = [{sel}]\n"
        f'note = "{note.replace(chr(34), chr(39))}"\n'
    )


def module_selectors(cls_name: str, train: bool) -> list[str]:
    sels = [f"module:{cls_name} & phase:forward"]
    if train:
        sels.append(f"module:{cls_name} & phase:backward")
    return sels
