"""Inputs a candidate cannot tune to, made by the harness when they are needed.

Seven correctness trials per candidate:

1-4. one trial per distribution family, in a random order with random
     parameters: ``normal`` (zero mean, sigma 0.3-3), ``uniform`` (zero mean,
     half-width 0.3-4), ``heavy_tailed`` (symmetric Pareto tails, alpha 2.1-3),
     ``mixed_scales`` (random sign x 10**U(lo, hi): ~1e-4 to ~1e3 in one tensor);
5.   the fourth trial's inputs *scaled* by 10-100x or 1/100-1/10,
6.   the same inputs *shifted* by 3-8 times their scale,
7.   ``get_inputs()`` itself under a fresh seed (the published distribution;
     KernelBench's own ``allclose`` is recorded on this trial).

Trials 5 and 6 are written into trial 4's buffers (same ``data_ptr`` in the
child): a result cache keyed on pointers or shapes answers stale.

**Signed by default.** Every family is symmetric about zero, so a kernel that
is only right for non-negative inputs (a ReLU returning ``x``, an L1 norm
without ``abs``) fails, even though KernelBench's own inputs are all
``torch.rand``. An input is drawn non-negative (``|x|``) only when the
reference itself is undefined for negative values there: its output on signed
values is non-finite (or it raises) where the same values in absolute value
give a finite output (``probe_signs``; recorded in the result's ``info``).
Integer and bool inputs and float inputs with at most 16 distinct values
(labels such as +-1) keep what ``get_inputs()`` produced: their ranges are the
problem's to define.

**No secret before it is needed.** Each trial's and each timed phase's seed
is drawn (``Seeds.draw``) only when that trial or phase starts, from the
operating system's randomness unless the user fixed a seed to reproduce a run;
the seeds are published in the result afterwards.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("normal", "uniform", "heavy_tailed", "mixed_scales")
DISCRETE_MAX_VALUES = 16
TIMING_FAMILY = ("normal", {"sigma": 1.0})
_MASK62 = (1 << 62) - 1


def mix(seed: int, *parts: Any) -> int:
    """A derived 62-bit seed (stable across processes and Python versions)."""
    h = hashlib.blake2b(repr((seed,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & _MASK62


class Seeds:
    """Seeds drawn at the moment they are needed (fresh unless ``fixed`` reproduces a run)."""

    def __init__(self, fixed: int | None = None):
        self.fixed = fixed
        self.drawn: dict[str, int] = {}

    def draw(self, key: str) -> int:
        s = mix(self.fixed, key) if self.fixed is not None else secrets.randbits(62)
        self.drawn[key] = s
        return s


@dataclass
class TrialSpec:
    """One correctness trial: how its inputs are made (seeds filled in when it starts)."""

    index: int
    kind: str  # "dist" | "scaled" | "shifted" | "published"
    family: str
    params: dict = field(default_factory=dict)
    factor: float = 1.0  # scaled: multiply; shifted: add
    reuse_buffers: bool = False  # written into the previous trial's buffers
    seed: int = 0
    base_seed: int = 0

    @property
    def label(self) -> str:
        if self.kind == "published":
            return "published get_inputs()"
        if self.kind == "dist":
            return self.family
        if self.kind == "scaled":
            return f"{self.family} x{self.factor:.3g}"
        return f"{self.family} +{self.factor:.3g}"


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
    return {
        "normal": params.get("sigma", 1.0),
        "uniform": params.get("half_width", 1.0),
        "heavy_tailed": params.get("scale", 1.0),
        "mixed_scales": 1.0,
    }[family]


def plan_trials(seeds: Seeds) -> list[TrialSpec]:
    """The seven trials (families, order, factors); values are seeded later, trial by trial."""
    rng = random.Random(seeds.draw("plan"))
    fams = list(FAMILIES)
    rng.shuffle(fams)
    specs = [TrialSpec(i, "dist", fam, _family_params(fam, rng)) for i, fam in enumerate(fams)]
    base = specs[-1]
    scale = 10 ** (rng.uniform(1.0, 2.0) * rng.choice((1, -1)))
    shift = rng.uniform(3.0, 8.0) * family_scale(base.family, base.params)
    specs.append(TrialSpec(4, "scaled", base.family, dict(base.params), scale, True))
    specs.append(TrialSpec(5, "shifted", base.family, dict(base.params), shift, True))
    specs.append(TrialSpec(6, "published", "published"))
    return specs


def seed_trial(spec: TrialSpec, seeds: Seeds, previous: TrialSpec | None) -> None:
    """Draw the trial's seeds now (the scaled and shifted variants reuse the previous trial's)."""
    if spec.reuse_buffers and previous is not None:
        spec.seed, spec.base_seed = previous.seed, previous.base_seed
        return
    spec.seed = seeds.draw(f"trial{spec.index}.values")
    spec.base_seed = seeds.draw(f"trial{spec.index}.base")


def draw(family: str, params: dict, shape: Any, dtype: Any, device: Any, seed: int) -> Any:
    """Fresh signed values of one family, computed in float32 (float64 for double tensors)."""
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
        _random_signs(x, g)
    elif family == "mixed_scales":
        e = torch.rand(shape, **kw).mul_(params["hi"] - params["lo"]).add_(params["lo"])
        x = e.mul_(math.log(10.0)).exp_()  # 10**e in place: no second full-size tensor
        _random_signs(x, g)
    else:
        raise ValueError(f"unknown distribution family {family!r}")
    return x.to(dtype)


SIGN_CHUNK = 1 << 24


def _random_signs(x: Any, g: Any) -> None:
    """Flip each element's sign with probability 1/2, in place, in chunks: a 16 GiB input needs no
    int64 tensor of its size (32 GiB) beside it."""
    import torch

    flat = x.view(-1)
    for a in range(0, flat.numel(), SIGN_CHUNK):
        part = flat[a : a + SIGN_CHUNK]
        part.mul_(torch.randint(0, 2, (part.numel(),), generator=g, device=x.device, dtype=x.dtype).mul_(2).sub_(1))


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


def drawn_positions(templates: list) -> list[bool]:
    """Which inputs get fresh values (floating point, non-empty, not labels)."""
    import torch

    return [
        isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and not is_discrete(t)
        for t in templates
    ]


def transform(
    templates: list,
    family: str,
    params: dict,
    seed: int,
    signed: list[bool],
    kind: str = "dist",
    factor: float = 1.0,
    drawn: list[bool] | None = None,
    consume: bool = False,
) -> list:
    """Fresh values for the drawn inputs of ``templates`` (same shape, dtype, device).

    ``drawn`` (``drawn_positions`` of the problem's templates, computed once) saves a
    ``torch.unique`` per input set. ``consume``: the caller's list gives up each template as its
    values are drawn (a set of 16 GiB inputs is not held twice).
    """
    import torch

    if drawn is None:
        drawn = drawn_positions(templates)
    out = []
    for i, d in enumerate(drawn[: len(templates)]):
        t = templates[i]
        d = d and isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0
        if not d:
            out.append(t)
            continue
        shape, dtype, device = t.shape, t.dtype, t.device
        if consume:
            templates[i] = None
            del t
        x = draw(family, params, shape, dtype, device, mix(seed, i))
        if not signed[i]:
            x = x.abs()
        if kind == "scaled":
            x = x * factor
        elif kind == "shifted":
            x = x + factor
        out.append(x.to(dtype))
    return out


def trial_inputs(
    problem: Any, spec: TrialSpec, device: Any, signed: list[bool], drawn: list[bool] | None = None
) -> list:
    """The inputs of one correctness trial (seeded by ``seed_trial``)."""
    from headroom.verify.problem import published_inputs

    templates = published_inputs(problem, spec.base_seed, device)
    if spec.kind == "published":
        return templates
    return transform(templates, spec.family, spec.params, spec.seed, signed, spec.kind, spec.factor, drawn)


def phase_inputs(problem: Any, seed: int, device: Any, signed: list[bool], drawn: list[bool] | None = None) -> list:
    """One input set of a memory, launch or timed phase, published structure: its values from one of the
    trials' four families with random parameters, chosen by ``seed`` (drawn when the phase starts), so a
    timed phase's inputs cannot be told from a trial's by their distribution."""
    from headroom.verify.problem import published_inputs

    rng = random.Random(mix(seed, "family"))
    family = rng.choice(FAMILIES)
    return transform(
        published_inputs(problem, mix(seed, "base"), device),
        family,
        _family_params(family, rng),
        seed,
        signed,
        drawn=drawn,
        consume=True,
    )


def _nonfinite_outputs(model: Any, xs: list) -> bool | None:
    """True when the reference's output has NaN/Inf, None when it raises."""
    import torch

    from headroom.verify.problem import flatten_outputs

    try:
        with torch.no_grad():
            outs = flatten_outputs(model(*xs))
    except Exception:
        return None
    return any(
        isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all()) for o in outs
    )


def probe_signs(problem: Any, model: Any, device: Any, seed: int, drawn: list[bool]) -> tuple[list[bool], str]:
    """Which inputs may be signed, and why others are not (see the module docstring)."""
    from headroom.verify.problem import published_inputs

    templates = published_inputs(problem, seed, device)
    n = len(templates)
    signed = [True] * n
    if not any(drawn):
        return signed, "no floating-point inputs to draw"
    family, params = TIMING_FAMILY

    def bad(flags: list[bool]) -> bool:
        r = _nonfinite_outputs(model, transform(templates, family, params, seed, flags, drawn=drawn))
        return r is None or r

    if not bad(signed):
        return signed, "signed values for every floating-point input"
    if bad([False] * n):  # non-finite without negative values too: magnitude, not sign (reference error)
        return signed, "signed values (the reference's non-finite outputs do not come from negative inputs)"
    for i in range(n):
        if drawn[i]:
            trial = [j != i for j in range(n)]
            if not bad(trial):
                return trial, (
                    f"input {i} non-negative: the reference is non-finite or raises on negative values there"
                )
    return [not d for d in drawn], (
        "every floating-point input non-negative: the reference is non-finite or raises on negative values"
    )
