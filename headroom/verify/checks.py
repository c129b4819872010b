"""Correctness measures (pure functions): scale-invariant errors, their gates, digests, samples.

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
- ``finite``  non-finite values exactly where the truth has them — or where the
  fp32 reference has them too (``measure(c, t, r)``): a value that overflows in
  float32 but not in float64 (cumprod, products) is the reference's own error,
  so an honest reference passes every problem.

Gates "match the precision actually used": each is
``max(FLOOR[dtype], ERROR_FACTOR * e_ref)`` where ``e_ref`` is the same measure
for the reference itself (run in the headline precision, TF32 on a GPU) against
the float64 truth. A candidate may be as inexact as the baseline it is compared
with, times ``ERROR_FACTOR``; it may not drop to a lower precision than that
(bf16 where the reference ran TF32 has ~8x the error and fails).

Integer and bool outputs compare exactly (with the reference's own output or
with the truth). Timed outputs are compared by samples (``samples_match``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from headroom.jsonio import SKIP, encoded, json_key

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
    reference_nonfinite: int = 0  # positions where the fp32 reference is non-finite and the truth is not
    truth_nonfinite: int = 0  # of ``nonfinite``: where the truth is +-inf or NaN and the candidate holds another value


CHUNK = 1 << 24


class SumSq:
    """A sum of squares kept as ``scale**2 * ssq`` (LAPACK's dnrm2 idea): float64 truths of products and
    cumulative products reach 1e300, whose squares overflow a plain float64 sum to inf (and inf/inf to
    NaN). ``ssq`` never exceeds the count, so ``rms`` and ``ratio`` stay finite where ``norm`` itself
    would overflow."""

    def __init__(self) -> None:
        self.scale = 0.0
        self.ssq = 0.0

    def add(self, v: Any) -> None:
        if v.numel() == 0:
            return
        m = float(v.abs().max())
        if m == 0.0 or not math.isfinite(m):
            if not math.isfinite(m):
                self.scale, self.ssq = math.inf, 1.0
            return
        if m > self.scale:
            self.ssq = self.ssq * (self.scale / m) ** 2 if self.scale > 0 else 0.0
            self.scale = m
        self.ssq += float(((v / self.scale) ** 2).sum())

    def norm(self) -> float:
        return self.scale * math.sqrt(self.ssq) if self.scale > 0 else 0.0

    def rms(self, n: int) -> float:
        """sqrt(sum / n): at most the largest magnitude added, so finite whenever the values are."""
        return self.scale * math.sqrt(self.ssq / n) if self.scale > 0 and n > 0 else 0.0

    def ratio(self, other: SumSq) -> float:
        """norm(self) / norm(other) without forming either norm (both may overflow; their ratio does not)."""
        if other.scale == 0.0:
            return 0.0 if self.scale == 0.0 else math.inf
        if self.scale == 0.0:
            return 0.0
        return (self.scale / other.scale) * math.sqrt(self.ssq / other.ssq)


def _classes(x: Any) -> Any:
    """0 finite, 1 +inf, 2 -inf, 3 nan (float64 input)."""
    import torch

    c = torch.zeros(x.shape, dtype=torch.int8, device=x.device)
    c[x == math.inf] = 1
    c[x == -math.inf] = 2
    c[torch.isnan(x)] = 3
    return c


def _chunks(n: int, chunk: int):
    for s in range(0, n, chunk):
        yield s, min(n, s + chunk)


def _as_stored(t: Any, dtype: Any) -> Any:
    """The float64 truth as the output's format holds it: where rounding to ``dtype`` overflows, +-inf.

    A float32 output cannot hold 1e200: an exact answer there is inf, and a cumulative product that
    underflowed to 0 and stays 0 is the format's limit, not an error the norms can weigh."""
    import torch

    if dtype == torch.float64 or not dtype.is_floating_point:
        return t
    over = torch.isinf(t.to(dtype)) & torch.isfinite(t)
    if not bool(over.any()):
        return t
    return torch.where(over, torch.sign(t) * math.inf, t)


def _pow2_at_least(n: int) -> float:
    return 2.0 ** max(0, (n - 1).bit_length())


def measure(c: Any, t: Any, r: Any = None, chunk: int = CHUNK) -> Errors:
    """Errors of ``c`` against the float64 truth ``t``; ``r`` (the fp32 reference) excuses non-finite values.

    The truth is taken as the output's format holds it (``_as_stored``: beyond float32's range it is
    +-inf). A candidate value is *unexpectedly* non-finite (or finite) where its class (finite,
    +inf, -inf, NaN) differs from the truth's and, when ``r`` is given, from the reference's: where
    fp32 overflows but float64 does not (cumprod, products), matching the reference is the
    reference's error, not the candidate's. Where the truth is non-finite the candidate must hold
    the same non-finite value (same sign of inf, or NaN, as torch.testing's ``equal_nan``); those
    positions are left out of the error measures, which use the positions where both the candidate
    and the truth are finite. Every sum is scaled (powers of two, exact) or kept as
    ``SumSq``, so finite values near float64's limit give finite errors. Two passes over chunks, so
    a 2 G-element output needs no float64 copy of itself.
    """
    import torch

    c = c.detach().reshape(-1)
    t = t.detach().reshape(-1)
    r = r.detach().reshape(-1) if r is not None else None
    inv = 1.0 / _pow2_at_least(t.numel())  # mean sums of values near float64's limit do not overflow
    first = _sums(c, t, r, chunk, inv, torch)
    n, ref_bad = first.n, first.ref_bad
    if first.nonfinite:
        return Errors(math.inf, math.inf, math.inf if n > 1 else None, False, first.nonfinite, ref_bad, first.truth_bad)
    if n == 0:
        return Errors(0.0, 0.0, None, True, 0, ref_bad)
    rel = 2.0 * first.s_dd.ratio(first.s_tt)
    rms = first.s_tt.rms(n)
    mt, mc = first.s_t * (1.0 / inv / n), first.s_c * (1.0 / inv / n)  # 1/inv/n is in [1, 2): no overflow
    elem, centred = _spread(c, t, chunk, n, rms, mt, mc, torch)
    return Errors(rel, elem, centred, True, 0, ref_bad)


@dataclass
class _Sums:
    """The first pass over the chunks: counts of unexpected non-finite values and the scaled sums."""

    n: int = 0
    nonfinite: int = 0
    ref_bad: int = 0
    truth_bad: int = 0
    s_t: float = 0.0
    s_c: float = 0.0
    s_tt: SumSq = field(default_factory=SumSq)
    s_dd: SumSq = field(default_factory=SumSq)


def _sums(c: Any, t: Any, r: Any, chunk: int, inv: float, torch: Any) -> _Sums:
    out = _Sums()
    for a, b in _chunks(t.numel(), chunk):
        cc = c[a:b].to(torch.float64)
        raw = t[a:b].to(torch.float64)
        tt = _as_stored(raw, c.dtype)
        fc, ft = torch.isfinite(cc), torch.isfinite(tt)
        if bool(fc.all()) and bool(ft.all()):
            cm, tm = cc, tt
            if r is not None and not bool(torch.isfinite(r[a:b]).all()):
                out.ref_bad += int((~torch.isfinite(r[a:b])).sum())
        else:
            kc, kt = _classes(cc), _classes(tt)
            bad = kc != kt
            if r is not None:
                kr = _classes(r[a:b].to(torch.float64))
                bad &= kc != kr
                out.ref_bad += int(((kr != 0) & torch.isfinite(raw)).sum())
            out.nonfinite += int(bad.sum())
            out.truth_bad += int((bad & (kt != 0)).sum())
            m = fc & ft
            cm, tm = cc[m], tt[m]
        if cm.numel() == 0:
            continue
        out.n += cm.numel()
        out.s_t += float((tm * inv).sum())
        out.s_c += float((cm * inv).sum())
        out.s_tt.add(tm)
        out.s_dd.add(cm * 0.5 - tm * 0.5)  # halves: exact, and c - t cannot overflow
    return out


def _spread(
    c: Any, t: Any, chunk: int, n: int, rms: float, mt: float, mc: float, torch: Any
) -> tuple[float, float | None]:
    """The second pass: the largest element-wise error and the centred relative error (None for a constant)."""
    elem = 0.0
    s_cen, s_tcen = SumSq(), SumSq()
    t_max = 0.0
    for a, b in _chunks(t.numel(), chunk):
        cc = c[a:b].to(torch.float64)
        tt = _as_stored(t[a:b].to(torch.float64), c.dtype)
        m = torch.isfinite(cc) & torch.isfinite(tt)
        cm, tm = (cc, tt) if bool(m.all()) else (cc[m], tt[m])
        if cm.numel() == 0:
            continue
        d = (cm * 0.5 - tm * 0.5).abs()
        if rms > 0:
            elem = max(elem, float((d / (tm.abs() * 0.5 + rms * 0.5)).max()))
        elif float(d.max()) > 0:
            elem = math.inf
        tc = tm * 0.25 - mt * 0.25  # quarters: centred values and their differences stay finite
        s_tcen.add(tc)
        s_cen.add((cm * 0.25 - mc * 0.25) - tc)
        t_max = max(t_max, float(tm.abs().max()))
    centred = None
    if n > 1 and s_tcen.rms(n) > 1e-12 * max(t_max * 0.25, 1e-300):
        centred = s_cen.ratio(s_tcen)
    return elem, centred


@dataclass
class Gates:
    """Tolerances for one output of one trial."""

    rel_l2: float
    elem: float
    centred: float
    # The reference's own error, written (when known) by its three measures.
    ref: Errors | None = field(
        default=None,
        metadata={
            **json_key("reference_error", omit_none=True),
            **encoded(lambda e: {"rel_l2": e.rel_l2, "elem": e.elem, "centred": e.centred}),
        },
    )
    # Over the trials (``compare.out_gates``): the timed samples' relative L2 bound; no part of the JSON.
    timed_l2: float | None = field(default=None, metadata=SKIP)


def gates_for(dtype: Any, ref: Errors | None) -> Gates:
    """Gates from the dtype floor and the reference's own error."""
    f_l2, f_elem = FLOORS.get(dtype_name(dtype), DEFAULT_FLOOR)
    if ref is None or not ref.finite_ok:
        return Gates(f_l2, f_elem, f_l2, ref)
    r_c = ref.centred if ref.centred is not None else 0.0
    return Gates(
        max(f_l2, ERROR_FACTOR * ref.rel_l2), max(f_elem, ERROR_FACTOR * ref.elem), max(f_l2, ERROR_FACTOR * r_c), ref
    )


def kernelbench_allclose(c: Any, ref: Any, chunk: int = CHUNK) -> bool:
    """KernelBench's check: ``torch.allclose(atol=1e-2, rtol=1e-2)`` against the reference output (chunked)."""
    import torch

    if c.shape != ref.shape:
        return False
    if is_exact_dtype(ref.dtype):
        return bool(torch.equal(c, ref))
    cf, rf = c.reshape(-1), ref.reshape(-1)
    return all(
        bool(torch.allclose(cf[a:b].double(), rf[a:b].double(), atol=KERNELBENCH_ATOL, rtol=KERNELBENCH_RTOL))
        for a, b in _chunks(rf.numel(), chunk)
    )


# --- exact digests and timed-output samples ------------------------------------------------

_DIGEST_MOD = 1021


def digest(t: Any) -> str:
    """An exact digest of a tensor's bytes (any change of any element changes it).

    CPU: BLAKE2b of the bytes. GPU: two position-weighted integer sums modulo 2**64 over the
    elements' bit patterns, computed on the device (order-independent, so identical in every
    process on the same device), instead of copying the tensor to the host.
    """
    import hashlib

    import torch

    x = t.detach().contiguous()
    head = f"{dtype_name(t.dtype)}:{tuple(t.shape)}:"
    if x.numel() == 0:
        return head + "empty"
    if not x.is_cuda:
        raw = x.reshape(-1).view(torch.uint8).numpy()
        return head + hashlib.blake2b(raw.data, digest_size=16).hexdigest()
    size = x.element_size()
    if x.dtype == torch.bool:
        v = x.view(torch.uint8).reshape(-1)
    else:
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
        v = x.reshape(-1).view(view) if view is not None else x.reshape(-1).view(torch.uint8)
    total_a = total_b = 0
    for start, end in _chunks(v.numel(), CHUNK):
        part = v[start:end].to(torch.int64)
        w = (torch.arange(start, end, device=part.device, dtype=torch.int64) % _DIGEST_MOD) + 1
        total_a += int(part.sum())
        total_b += int((part * w).sum())
    mask = (1 << 64) - 1
    return head + f"{total_a & mask:016x}{total_b & mask:016x}"


TIMED_SLACK = 4.0
# The sampled relative L2 error of a timed output against the reference's may reach this multiple of the
# candidate's own error in its trials plus the reference's (never less than the trial gate): as precise
# while timed as when checked, with 2x for estimating from a few thousand samples and for other inputs.
# One step down in floating-point format (3 mantissa bits: 8x) exceeds it.
TIMED_L2_FACTOR = 2.0


def timed_l2_bound(gate_rel_l2: float, candidate_err: float, reference_err: float) -> float:
    """What a timed output's sampled relative L2 error against the reference's may reach (``TIMED_L2_FACTOR``)."""
    return max(gate_rel_l2, TIMED_L2_FACTOR * (candidate_err + reference_err))


def rms(t: Any, chunk: int = CHUNK) -> float:
    """Root mean square of the finite elements, in float64, in chunks (no float64 copy of ``t``)."""
    import torch

    if t.numel() == 0 or is_exact_dtype(t.dtype):
        return 0.0
    flat = t.reshape(-1)
    total, n = 0.0, 0
    for a, b in _chunks(flat.numel(), chunk):
        x = flat[a:b].to(torch.float64)
        m = torch.isfinite(x)
        if not bool(m.all()):
            x = x[m]
        total += float((x * x).sum())
        n += x.numel()
    return math.sqrt(total / n) if n else 0.0


def samples_match(c: Any, r: Any, gate: Gates | None, rms: float) -> tuple[bool, str]:
    """Whether a timed output's sampled values agree with the reference's at the same positions.

    Both were read by the harness from the two processes' memory for the same inputs. Floating
    point: the same non-finite pattern, and ``|c - r| <= TIMED_SLACK * gate.elem * (|r| + rms)``
    (``rms``: of the reference's whole output) — a stale, cached, skipped or unfinished output
    misses by orders of magnitude; exact dtypes: equal.
    """
    import torch

    if c.shape != r.shape or c.dtype != r.dtype:
        return False, f"{c.dtype} {tuple(c.shape)} where the reference has {r.dtype} {tuple(r.shape)}"
    if gate is None or is_exact_dtype(r.dtype):
        n_bad = int((c != r).sum())
        return n_bad == 0, f"{n_bad} of {r.numel()} sampled elements differ" if n_bad else "exact"
    cd, rd = c.to(torch.float64), r.to(torch.float64)
    kc, kr = _classes(cd), _classes(rd)
    if bool((kc != kr).any()):
        return (
            False,
            f"{int((kc != kr).sum())} of {r.numel()} sampled elements non-finite where the reference's are not",
        )
    m = kr == 0
    if not bool(m.any()):
        return True, "all sampled elements non-finite, as the reference's"
    err = ((cd[m] - rd[m]).abs() / (rd[m].abs() + rms + 1e-300)).max()
    tol = TIMED_SLACK * gate.elem
    ok = float(err) <= tol
    return ok, f"sampled element error {float(err):.2e} x (|r| + rms) (allowed {tol:.2e})"


def samples_sq_error(c: Any, r: Any, rms: float) -> tuple[float, int]:
    """Sum of ((c - r) / rms)^2 over the sampled elements finite in both, and their count: pooled over a
    phase's sampled iterations, sqrt(sum / count) estimates the output's relative L2 error against the
    reference's (``rms``: of the reference's whole output)."""
    import torch

    if is_exact_dtype(r.dtype) or rms <= 0 or c.shape != r.shape:
        return 0.0, 0
    cd, rd = c.to(torch.float64), r.to(torch.float64)
    m = torch.isfinite(cd) & torch.isfinite(rd)
    d = (cd[m] - rd[m]) / rms
    return float((d * d).sum()), int(m.sum())


def samples_rel_l2_match(sum_sq: float, count: int, gate: Gates | None) -> tuple[bool, str]:
    """Whether a timed output's sampled relative L2 error (``samples_sq_error``, pooled) is within
    ``gate.timed_l2`` (``timed_l2_bound``; the trial gate where not set): what the per-element slack
    lets through (an answer a format coarser than the one the trials showed) this does not."""
    if gate is None or count == 0:
        return True, "no floating-point samples"
    err = math.sqrt(sum_sq / count)
    tol = gate.timed_l2 if gate.timed_l2 is not None else gate.rel_l2
    return err <= tol, f"sampled relative L2 error {err:.2e} over {count} elements (allowed {tol:.2e})"
