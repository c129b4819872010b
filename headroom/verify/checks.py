"""Correctness measures: scale-invariant errors, their gates, digests and fingerprints.

The truth is the reference evaluated in float64 on the same inputs. For every
trial and floating-point output the harness measures

- ``rel_l2``  ||c - t|| / ||t||: the global error, scale-invariant, so an
  all-zeros output scores 1.0 whatever the output's magnitude;
- ``elem``    max_i |c_i - t_i| / (rms(t) + |t_i|): a per-element ``allclose``
  with ``atol = gate * rms(t)`` and ``rtol = gate``, for errors confined to a
  few elements (a partial write, one wrong row);
- ``centred`` ||(c - mean c) - (t - mean t)|| / ||t - mean t||: catches a
  constant or mean-valued output even when the true output has a large mean
  (where rel_l2 of a constant can be tiny);
- ``finite``  non-finite values exactly where the truth has them.

Gates "match the precision actually used": each is
``max(FLOOR[dtype], ERROR_FACTOR * e_ref)`` where ``e_ref`` is the same measure
for the reference itself (run in the headline precision, TF32 on a GPU) against
the float64 truth. A candidate may be as inexact as the baseline it is compared
with, times ``ERROR_FACTOR``; it may not drop to a lower precision than that
(bf16 where the reference ran TF32 has ~8x the error and fails).

Integer and bool outputs compare exactly (with the reference's own output or
with the truth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ERROR_FACTOR = 4.0

# dtype name -> (rel_l2 / centred floor, per-element floor)
FLOORS = {
    "float64": (1e-12, 1e-10),
    "float32": (2e-5, 2e-4),
    "float16": (2e-3, 1e-2),
    "bfloat16": (1.5e-2, 6e-2),
}
DEFAULT_FLOOR = FLOORS["float32"]

# KernelBench's own check, recorded for comparison (never part of the verdict).
KERNELBENCH_ATOL = KERNELBENCH_RTOL = 1e-2


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def is_exact_dtype(dtype: Any) -> bool:
    import torch

    return not (dtype.is_floating_point or dtype.is_complex) or dtype == torch.bool


@dataclass
class Errors:
    """Error measures of one output against the truth (floating point)."""

    rel_l2: float
    elem: float
    centred: float | None  # None: the truth is constant, not applicable
    finite_ok: bool
    nonfinite: int  # count of unexpected NaN/Inf


def measure(c: Any, t: Any) -> Errors:
    """Errors of ``c`` against float64 truth ``t`` (same shape)."""
    import torch

    c = c.detach().to(torch.float64).reshape(-1)
    t = t.detach().to(torch.float64).reshape(-1)
    tf = torch.isfinite(t)
    cf = torch.isfinite(c)
    bad = (cf != tf) | (~tf & ~cf & ~((c == t) | (torch.isnan(c) & torch.isnan(t))))
    nonfinite = int(bad.sum())
    if not bool(tf.all()):
        c, t = c[tf], t[tf]
    # unexpected non-finite values make the errors infinite
    if nonfinite:
        return Errors(math.inf, math.inf, math.inf if c.numel() > 1 else None, False, nonfinite)
    n = t.numel()
    if n == 0:
        return Errors(0.0, 0.0, None, True, 0)
    d = c - t
    tn = float(torch.linalg.vector_norm(t))
    dn = float(torch.linalg.vector_norm(d))
    rel = dn / tn if tn > 0 else (0.0 if dn == 0 else math.inf)
    rms = tn / math.sqrt(n)
    elem = float((d.abs() / (t.abs() + rms)).max()) if rms > 0 else (0.0 if dn == 0 else math.inf)
    centred = None
    if n > 1:
        tc = t - t.mean()
        tcn = float(torch.linalg.vector_norm(tc))
        scale = float(t.abs().max())
        if tcn > 1e-12 * max(scale, 1e-300) * math.sqrt(n):
            cc = c - c.mean()
            centred = float(torch.linalg.vector_norm(cc - tc)) / tcn
    return Errors(rel, elem, centred, True, 0)


@dataclass
class Gates:
    """Tolerances for one output of one trial."""

    rel_l2: float
    elem: float
    centred: float
    ref: Errors | None = None

    def to_dict(self) -> dict:
        d = {"rel_l2": self.rel_l2, "elem": self.elem, "centred": self.centred}
        if self.ref is not None:
            d["reference_error"] = {"rel_l2": self.ref.rel_l2, "elem": self.ref.elem, "centred": self.ref.centred}
        return d


def gates_for(dtype: Any, ref: Errors | None) -> Gates:
    """Gates from the dtype floor and the reference's own error."""
    f_l2, f_elem = FLOORS.get(dtype_name(dtype), DEFAULT_FLOOR)
    if ref is None or not ref.finite_ok:
        return Gates(f_l2, f_elem, f_l2, ref)
    r_c = ref.centred if ref.centred is not None else 0.0
    return Gates(max(f_l2, ERROR_FACTOR * ref.rel_l2), max(f_elem, ERROR_FACTOR * ref.elem),
                 max(f_l2, ERROR_FACTOR * r_c), ref)


def kernelbench_allclose(c: Any, ref: Any) -> bool:
    """KernelBench's check: ``torch.allclose(atol=1e-2, rtol=1e-2)`` against the reference output."""
    import torch

    if c.shape != ref.shape:
        return False
    if is_exact_dtype(ref.dtype):
        return bool(torch.equal(c, ref))
    return bool(torch.allclose(c.double(), ref.double(), atol=KERNELBENCH_ATOL, rtol=KERNELBENCH_RTOL))


# --- exact digests and fingerprints ------------------------------------------------------

_DIGEST_MOD = 1021


def digest(t: Any) -> str:
    """An exact digest of a tensor's bytes (any change of any element changes it, in practice).

    Integer sums wrap modulo 2**64 and are order-independent, so the digest is
    the same in every process on the same device.
    """
    import torch

    x = t.detach().contiguous()
    if x.numel() == 0:
        return f"{dtype_name(t.dtype)}:{tuple(t.shape)}:empty"
    size = x.element_size()
    if x.dtype == torch.bool:
        v = x.view(torch.uint8).reshape(-1)
    else:
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
        v = x.reshape(-1).view(view) if view is not None else x.reshape(-1).view(torch.uint8)
    total_a = 0
    total_b = 0
    chunk = 1 << 24
    n = v.numel()
    for start in range(0, n, chunk):
        part = v[start:start + chunk].to(torch.int64)
        w = (torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64)
             % _DIGEST_MOD) + 1
        total_a += int(part.sum())
        total_b += int((part * w).sum())
    mask = (1 << 64) - 1
    return f"{dtype_name(t.dtype)}:{tuple(t.shape)}:{total_a & mask:016x}{total_b & mask:016x}"


def projection_weights(numel: int, seed: int, device: Any, count: int = 2) -> list:
    """Random float64 vectors for fingerprints (secret: derived from the run's seed).

    float64, so that the projections' own rounding (a dot product over up to
    ~1e9 elements) stays far below the tolerance they test.
    """
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return [torch.randn(numel, generator=g, device=device, dtype=torch.float64) for _ in range(count)]


def fingerprint(t: Any, weights: list) -> dict:
    """A cheap summary of a timed output, compared with the reference's for the same inputs.

    Floating point: two random projections and the L2 norm, in float64;
    exact dtypes: the exact digest.
    """
    import torch

    if is_exact_dtype(t.dtype):
        return {"digest": digest(t)}
    x = t.detach().reshape(-1).to(torch.float64)
    if x.numel() != weights[0].numel():
        return {"numel": int(x.numel()), "proj": [math.nan] * len(weights), "norm": math.nan}
    return {"numel": int(x.numel()),
            "proj": [float(torch.dot(x, w)) for w in weights],
            "norm": float(torch.linalg.vector_norm(x))}


def fingerprint_matches(cand: dict, ref: dict, gate: float, sigmas: float = 8.0) -> tuple[bool, str]:
    """Whether a candidate's timed-output fingerprint is consistent with the reference's.

    A projection <e, w> of an error e onto a Gaussian w is ~N(0, ||e||^2); the
    allowed error is ``gate * ||r||`` (gate: the rel-L2 gate plus the
    reference's own error), so the bound is ``sigmas`` times that. A stale or
    unrelated output has ||e|| ~ ||r|| and misses by orders of magnitude.
    """
    if "digest" in ref:
        ok = cand.get("digest") == ref["digest"]
        return ok, "exact digest " + ("matches" if ok else "differs")
    if cand.get("numel") != ref.get("numel"):
        return False, f"output has {cand.get('numel')} elements, reference {ref.get('numel')}"
    norm = ref["norm"]
    bound = sigmas * gate * norm + 1e-30
    worst = 0.0
    for a, b in zip(cand["proj"], ref["proj"]):
        if not (math.isfinite(a) and math.isfinite(b)):
            if not (a == b):
                return False, "non-finite projection"
            continue
        worst = max(worst, abs(a - b))
    ok = worst <= bound
    return ok, f"projection error {worst / max(norm, 1e-300):.2e} x ||r|| (bound {bound / max(norm, 1e-300):.2e})"
