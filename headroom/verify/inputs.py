"""Correctness inputs a candidate cannot tune to.

Each run draws a fresh secret seed. From it come seven correctness trials:

1-4. one trial per distribution family, in a random order and with random
     parameters: ``normal`` (zero mean, random sigma), ``uniform`` (zero mean,
     random half-width), ``heavy_tailed`` (symmetric Pareto tails, alpha 2.1-3)
     and ``mixed_scales`` (random sign times 10**U(lo, hi): magnitudes from
     ~1e-4 to ~1e3 in one tensor);
5.   the last of those, *scaled* by a random factor (10-100x or 1/100-1/10),
6.   the same base, *shifted* by 3-8 times its scale,
7.   ``get_inputs()`` itself under a fresh seed (the published distribution:
     the candidate must be right there too, and KernelBench's own
     ``allclose(atol=rtol=1e-2)`` is evaluated on this trial, for the record).

Trials 5 and 6 are written in place into trial 4's input buffers, so the
candidate sees new values at the *same* ``data_ptr``: a result cache keyed on
pointers or shapes returns a stale answer and fails.

How a template from ``get_inputs()`` is turned into a trial input:

- floating-point tensors get fresh values from the trial's distribution, same
  shape/dtype/device; if the template is non-negative everywhere (weights,
  scales, probabilities) the draw is taken in absolute value;
- floating-point tensors with at most 16 distinct values (labels such as +-1)
  and all integer/bool tensors (indices, offsets, lengths) keep the values
  ``get_inputs()`` produced under the trial's secret seed: their structure is
  the problem's to define;
- anything else (Python numbers, lists) is passed through.

Everything here is deterministic in (seed, device), so the harness and the
child processes create bit-identical inputs independently.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

FAMILIES = ("normal", "uniform", "heavy_tailed", "mixed_scales")
DISCRETE_MAX_VALUES = 16
_MASK62 = (1 << 62) - 1


def mix(seed: int, *parts: Any) -> int:
    """A derived 62-bit seed (stable across processes and Python versions)."""
    import hashlib

    h = hashlib.blake2b(repr((seed,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & _MASK62


@dataclass
class TrialSpec:
    """One correctness trial: how its inputs are made."""

    index: int
    kind: str  # "dist" | "scaled" | "shifted" | "published"
    family: str
    params: dict = field(default_factory=dict)
    seed: int = 0  # values of the floating-point inputs
    base_seed: int = 0  # get_inputs() seed (integer inputs, shapes)
    factor: float = 1.0  # scaled: multiply; shifted: add factor * scale
    reuse_buffers: bool = False  # write into the previous trial's tensors

    @property
    def label(self) -> str:
        if self.kind == "published":
            return "published get_inputs()"
        if self.kind == "dist":
            return self.family
        if self.kind == "scaled":
            return f"{self.family} x{self.factor:.3g}"
        return f"{self.family} +{self.factor:.3g}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSpec":
        return cls(**d)


def _family_params(family: str, rng: random.Random) -> dict:
    if family == "normal":
        return {"sigma": 10 ** rng.uniform(-0.5, 0.5)}
    if family == "uniform":
        return {"half_width": 10 ** rng.uniform(-0.5, 0.6)}
    if family == "heavy_tailed":
        return {"alpha": rng.uniform(2.1, 3.0), "scale": 10 ** rng.uniform(-0.3, 0.3)}
    if family == "mixed_scales":
        return {"lo": rng.uniform(-4.0, -2.5), "hi": rng.uniform(2.0, 3.0)}
    raise ValueError(f"unknown distribution family {family!r}")


def family_scale(family: str, params: dict) -> float:
    """The typical magnitude of a family's draws (what a shift is measured in)."""
    return {"normal": params.get("sigma", 1.0), "uniform": params.get("half_width", 1.0),
            "heavy_tailed": params.get("scale", 1.0), "mixed_scales": 1.0}[family]


def trial_specs(secret: int) -> list[TrialSpec]:
    """The correctness trials of one run: four families in random order, two variants, the published inputs."""
    rng = random.Random(mix(secret, "trials"))
    fams = list(FAMILIES)
    rng.shuffle(fams)
    specs = []
    for i, fam in enumerate(fams):
        specs.append(TrialSpec(i, "dist", fam, _family_params(fam, rng), mix(secret, "values", i),
                               mix(secret, "base", i)))
    base = specs[-1]
    exponent = rng.uniform(1.0, 2.0) * rng.choice((1, -1))
    scale = 10 ** exponent
    shift = rng.uniform(3.0, 8.0) * family_scale(base.family, base.params)
    specs.append(TrialSpec(4, "scaled", base.family, dict(base.params), base.seed, base.base_seed, scale, True))
    specs.append(TrialSpec(5, "shifted", base.family, dict(base.params), base.seed, base.base_seed, shift, True))
    specs.append(TrialSpec(6, "published", "published", {}, 0, mix(secret, "base", 6)))
    return specs


def draw(family: str, params: dict, shape: Any, dtype: Any, device: Any, seed: int) -> Any:
    """Fresh values of one family, computed in float32 (float64 for double tensors)."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    kw = {"generator": g, "device": device, "dtype": work}
    if family == "normal":
        x = torch.randn(shape, **kw).mul_(params["sigma"])
    elif family == "uniform":
        x = torch.rand(shape, **kw).mul_(2.0).sub_(1.0).mul_(params["half_width"])
    elif family == "heavy_tailed":
        u = torch.rand(shape, **kw).neg_().add_(1.0)  # (0, 1]
        x = u.pow_(-1.0 / params["alpha"]).sub_(1.0).mul_(params["scale"])
        sign = torch.randint(0, 2, tuple(x.shape), generator=g, device=device).to(work).mul_(2).sub_(1)
        x.mul_(sign)
    elif family == "mixed_scales":
        e = torch.rand(shape, **kw).mul_(params["hi"] - params["lo"]).add_(params["lo"])
        x = torch.pow(10.0, e)
        sign = torch.randint(0, 2, tuple(x.shape), generator=g, device=device).to(work).mul_(2).sub_(1)
        x.mul_(sign)
    else:
        raise ValueError(f"unknown distribution family {family!r}")
    return x.to(dtype)


def is_discrete(t: Any) -> bool:
    """A float tensor holding few distinct values (labels): keep get_inputs()' values."""
    import torch

    n = t.numel()
    if n < 2 * DISCRETE_MAX_VALUES:
        return False
    flat = t.reshape(-1)
    if n > 1_000_000:
        flat = flat[:: max(1, n // 1_000_000)]
    return int(torch.unique(flat).numel()) <= DISCRETE_MAX_VALUES


def _transform(spec: TrialSpec, templates: list) -> list:
    import torch

    if spec.kind == "published":
        return templates
    out = []
    for i, t in enumerate(templates):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and not is_discrete(t):
            x = draw(spec.family, spec.params, t.shape, t.dtype, t.device, mix(spec.seed, i))
            if bool((t >= 0).all()):
                x = x.abs()
            if spec.kind == "scaled":
                x = x * spec.factor
            elif spec.kind == "shifted":
                x = x + spec.factor
            out.append(x.to(t.dtype))
        else:
            out.append(t)
    return out


def make_trial_inputs(problem: Any, spec: TrialSpec, device: Any, previous: list | None = None) -> list:
    """The inputs of one correctness trial (see the module docstring).

    With ``spec.reuse_buffers`` and a compatible ``previous`` list, the new values
    are copied into the previous trial's tensors, which are returned.
    """
    import torch

    from headroom.verify.problem import published_inputs

    new = _transform(spec, published_inputs(problem, spec.base_seed, device))
    if spec.reuse_buffers and previous is not None and len(previous) == len(new):
        same = all(
            (not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor))
            or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device)
            for a, b in zip(previous, new)
        )
        if same:
            for a, b in zip(previous, new):
                if isinstance(a, torch.Tensor):
                    a.copy_(b)
            return previous
    return new


def timing_seed(secret: int, iteration: int) -> int:
    """Seed of the ``get_inputs()`` call of one timed iteration (same in every process)."""
    return mix(secret, "timing", iteration)
