"""The scaling chart's table: addressable fraction against parameter count."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from headroom.errors import UserError
from headroom.report.tables import _label
from headroom.trace.analysis import Analysis
from headroom.trace.classify import category_group
from headroom.trace.layers import extrapolate_layers
from headroom.trace.ranges import BLOCK_RANGE_PREFIX

_SIZE_SUFFIX = re.compile(r"[-_](\d+(\.\d+)?[kmbt]|tiny|mini|small|base|medium|large|xl|xxl|\d+)$", re.IGNORECASE)


def family_of(manifest: dict) -> str:
    """The model family of a profiled run, for the scaling chart: ``llama-7b`` + ``train`` -> ``llama train``.

    An explicit ``family`` key wins; otherwise the workload name without its size
    suffix, plus the run's variant (mode, phase, cache, compile) without any
    ``NofM-layers`` part, so runs at several sizes of the same setup group together.
    """
    if not isinstance(manifest, dict):
        return ""
    if isinstance(manifest.get("family"), str) and manifest["family"]:
        return manifest["family"]
    name = str(manifest.get("workload") or "")
    base = _SIZE_SUFFIX.sub("", name) if name else ""
    variant = " ".join(t for t in str(manifest.get("variant") or "").split() if not re.fullmatch(r"\d+of\d+-layers", t))
    return " ".join(x for x in (base, variant) if x)


def _full_params(m: dict, source: str, cache: dict) -> float | None:
    """The whole model's parameter count.

    A run that built only some of its blocks (``layers < total_layers``, see
    `headroom profile --layers`) records the built model's count in ``params``;
    the whole model's comes from ``params_full`` when the manifest has it (runs since
    it was added), else from the workload registry (counted on the meta device).
    """
    if m.get("params_full") is not None:
        return m["params_full"]
    layers, total = m.get("layers"), m.get("total_layers")
    partial = isinstance(layers, int) and isinstance(total, int) and 0 < layers < total
    if not partial:
        return m.get("params")
    if not m.get("workload"):
        raise UserError(
            f"{source}: built {layers} of {total} blocks and records no whole-model parameter count (give --params)"
        )
    key = (m["workload"], m.get("flavour") or "default")
    if key not in cache:
        from headroom.profile.registry import get_workload

        spec = get_workload(key[0])
        try:
            cache[key] = float(spec.param_count_meta(key[1]))
        except ModuleNotFoundError as e:
            raise UserError(
                f"{source}: built {layers} of {total} blocks; counting the whole model's parameters "
                f"needs {e.name} (pip install 'kernel-headroom[profile]'), or give --params"
            ) from None
    return cache[key]


def _whole_model_fractions(a: Analysis, m: dict) -> tuple[float, float, bool]:
    """(addressable fraction, GEMM+attention fraction, extrapolated?) of the whole model.

    Runs that built only some blocks are scaled to all blocks with
    `headroom.trace.layers.extrapolate_layers` (block work x total/built).
    """
    cats = a.categories
    total = float(a.total_us)
    layers, tl = m.get("layers"), m.get("total_layers")
    if isinstance(layers, int) and isinstance(tl, int) and 0 < layers < tl:
        ext = extrapolate_layers(a, layers, tl) if a.trace is not None else None
        if ext is None:
            raise UserError(
                f"{a.source}: built {layers} of {tl} blocks but has no '{BLOCK_RANGE_PREFIX}...' "
                f"ranges to extrapolate the whole model from"
            )
        c = ext.categories
        ga = float(c.loc[c["name"].isin(category_group("gemm_attention")), "fraction"].sum())
        return float(ext.addressable_fraction), ga, True
    ga = float(cats.loc[cats["name"].isin(category_group("gemm_attention")), "us"].sum()) if len(cats) else 0.0
    return float(a.addressable_fraction), (ga / total if total > 0 else 0.0), False


def scaling_table(
    analyses: Sequence[Analysis],
    params: Sequence[float] | None = None,
    labels: Sequence[str] | None = None,
    family: str | None = None,
    skip_missing: bool = False,
    min_sizes: int = 1,
) -> pd.DataFrame:
    """Addressable fraction against parameter count, for traces of one family at several sizes.

    Parameter counts come from ``params`` or from each trace's headroom manifest
    (the whole model's: ``params_full``, else the workload registry for runs that
    built only some blocks, else ``params``); a trace without one is an error, or
    skipped with ``skip_missing``. Runs that built only some blocks are
    extrapolated to the whole model (``headroom.trace.layers.extrapolate_layers``).
    ``min_sizes``: keep only families with that many distinct sizes. Columns:
    workload, family, params, addressable_fraction, gemm_attention_fraction,
    extrapolated; sorted by params.
    """
    rows = []
    cache: dict = {}
    for k, a in enumerate(analyses):
        m = a.manifest
        src = a.source
        p: float | None
        if params is not None:
            p = params[k]
        else:
            p = _full_params(m, src, cache) if not skip_missing else _try(lambda: _full_params(m, src, cache))
        if p is None and skip_missing:
            continue
        if p is None:
            raise UserError(f"{src}: no parameter count (the manifest has none; give --params)")
        try:
            p = float(p)
        except (TypeError, ValueError):
            raise UserError(f"{src}: parameter count {p!r} is not a number") from None
        fam = family or family_of(m)
        addr, ga, ext = _whole_model_fractions(a, m)
        rows.append((_label(a, labels[k] if labels else None), str(fam), p, addr, ga, ext))
    df = pd.DataFrame(
        rows,
        columns=["workload", "family", "params", "addressable_fraction", "gemm_attention_fraction", "extrapolated"],
    )
    if min_sizes > 1 and len(df):
        df = df.groupby("family", sort=False).filter(lambda g: g["params"].nunique() >= min_sizes)
    return df.sort_values("params", kind="stable").reset_index(drop=True)


def _try(fn):
    try:
        return fn()
    except UserError:
        return None
