"""Forward + backward as one call: how a module extracted from a *training* workload is verified.

In training the kernels a module costs are its forward and its backward. A problem extracted
from a training workload therefore defines ``Model.forward(*inputs, *grad_outputs)`` as
"forward, then backward with the given upstream gradients" and returns the outputs, the
gradients of the floating inputs and the gradients of the parameters (DLRM-Bench 05's
shape, made generic). ``with_backward(ModelNew)`` gives a candidate the same form, so
`headroom verify` checks and times exactly what training runs::

    # my_candidate_train.py -- verify a candidate on a training problem
    from headroom.extract.autograd import with_backward
    from my_candidate import ModelNew as _ModelNew
    ModelNew = with_backward(_ModelNew)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any


def forward_backward(
    module: Any, forward: Callable[..., Any], inputs: Sequence[Any], grad_outputs: Sequence[Any], autocast: Any = None
) -> tuple:
    """(outputs..., d inputs..., d parameters...) of `forward(*inputs)` for upstream `grad_outputs`.

    Floating tensor inputs become leaves that require grad; parameters that require grad
    get theirs from `torch.autograd.grad` (nothing is accumulated into `.grad`). A gradient
    autograd does not produce (an unused input) is returned as zeros. `autocast`: the dtype
    the training step autocasts to, or None.
    """
    import torch

    with torch.enable_grad():
        xs = [
            x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in inputs
        ]
        device = next((x.device.type for x in xs if isinstance(x, torch.Tensor)), "cpu")
        ctx = torch.autocast(device_type=device, dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with ctx:
            out = forward(*xs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        params = [p for p in module.parameters() if p.requires_grad]
        wrt = leaves + params
        grads = torch.autograd.grad(outs, wrt, list(grad_outputs), allow_unused=True) if wrt else ()
    filled = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]
    return (*[o.detach() for o in outs], *filled)


def with_backward(cls: type, n_outputs: int = 1, autocast: Any = None) -> type:
    """A subclass of `cls` whose forward takes the inputs then `n_outputs` upstream gradients and
    returns `forward_backward(...)`: a training problem's form for a candidate."""

    class ForwardBackward(cls):
        def forward(self, *args):
            inputs, grads = args[:-n_outputs], args[-n_outputs:]
            return forward_backward(self, super().forward, inputs, grads, autocast)

    ForwardBackward.__name__ = cls.__name__
    ForwardBackward.__qualname__ = cls.__qualname__
    return ForwardBackward
