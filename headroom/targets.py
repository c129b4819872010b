"""Which op (or module) to make faster: ranked by the end-to-end gain it would give.

Also the tables the figures draw (``headroom plot``): category fractions per
workload (the addressable-fraction figure) and addressable fraction against
parameter count (the scaling figure). Every number a plot shows comes from a
function here or in :mod:`headroom.project`, so tests can check it.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.project import Baseline, as_baseline, replay_projection

DEFAULT_SPEEDUP = 1.5
NO_OP = "(no op)"
_TARGET_COLUMNS = ["kind", "name", "category", "addressable", "addressable_fraction", "kernels", "us", "share",
                   "wall_us", "gain", "gain_inf", "projected_us", "projected_inf_us"]


def module_class_path(path: str) -> str:
    """``Model_0.Layer_5.MLP_5.Linear_20`` -> ``Model.Layer.MLP.Linear``; digits-only parts -> ``*``.

    Groups the same module across layers, which is what one kernel replaces.
    """
    if not path:
        return ""
    parts = []
    for p in path.split("."):
        if p.isdigit():
            parts.append("*")
        else:
            parts.append(re.sub(r"_\d+$", "", p))
    return ".".join(parts)


def _amdahl_groups(b: Baseline, keys: np.ndarray, s: float) -> pd.DataFrame:
    """Amdahl per group at speedup s and at infinity (vectorised; per device, slowest device wins)."""
    ev = b.events
    wall = ev["wall_us"].to_numpy(dtype=float)
    dev = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    g = pd.DataFrame({"key": keys, "dev": dev, "wall": wall}).groupby(["key", "dev"], sort=False)["wall"].sum()
    g = g.unstack("dev", fill_value=0.0)
    # One device: T - t(1 - 1/s). Several: the window shrinks by the smallest per-device saving.
    if g.shape[1] == 1:
        t = g.iloc[:, 0]
    else:
        t = g.min(axis=1)
    out = pd.DataFrame({"wall_us": g.sum(axis=1)})
    out["projected_us"] = b.wall_us - t * (1.0 - 1.0 / s)
    out["projected_inf_us"] = b.wall_us - t
    return out


def targets(analysis: Any, speedup: float = DEFAULT_SPEEDUP, by: Sequence[str] = ("op", "module"),
            top: int | None = 20, replay_top: int = 0) -> pd.DataFrame:
    """Ops (and nn.Module class paths, where the trace has them) ranked by end-to-end gain.

    Columns: kind (op|module), name, category (the one with most of its time),
    addressable (yes|no|partly), addressable_fraction, kernels, us (kernel time),
    share (of all kernel time), wall_us (busy-time share), gain and gain_inf (fraction
    of the measured window saved at `speedup` and at infinite speedup, Amdahl),
    projected_us, projected_inf_us; with ``replay_top=N`` also replay_gain and
    replay_gain_inf for the first N rows of each kind.
    """
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise UserError(f"--speedup must be a finite number > 0, got {speedup!r}")
    b = as_baseline(analysis)
    ev = b.events
    total = float(ev["dur"].sum())
    frames = []
    for kind in by:
        if kind == "op":
            keys = ev["op"].astype(str).where(ev["op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        elif kind == "top_op":
            keys = ev["top_op"].astype(str).where(ev["top_op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        elif kind == "module":
            if "module" not in ev.columns or not (ev["module"].astype(str) != "").any():
                continue
            keys = ev["module"].astype(str).map(module_class_path).to_numpy(dtype=object)
        elif kind == "kernel":
            keys = ev["name"].astype(str).to_numpy(dtype=object)
        else:
            raise UserError(f"unknown grouping {kind!r} (op, top_op, module, kernel)")
        valid = keys != ""
        sub = ev.loc[valid]
        k = keys[valid]
        if len(sub) == 0:
            continue
        dur = sub["dur"].to_numpy(dtype=float)
        addr = sub["addressable"].fillna(False).to_numpy(dtype=bool)
        agg = pd.DataFrame({"key": k, "dur": dur, "addr": np.where(addr, dur, 0.0)}).groupby("key", sort=False).agg(
            us=("dur", "sum"), kernels=("dur", "size"), addressable_us=("addr", "sum"))
        cat = (pd.DataFrame({"key": k, "category": sub["category"].astype(str).to_numpy(), "dur": dur})
               .groupby(["key", "category"], sort=False)["dur"].sum().reset_index()
               .sort_values("dur", ascending=False, kind="stable").drop_duplicates("key").set_index("key")["category"])
        am = _amdahl_groups(Baseline(sub.reset_index(drop=True), b.wall_us, b.window, b.num_steps, b.n_devices),
                            k, speedup)
        t = agg.join(am).join(cat.rename("category"))
        t["kind"] = kind
        t["name"] = t.index.astype(str)
        t["share"] = t["us"] / total if total > 0 else 0.0
        frac = np.where(t["us"] > 0, t["addressable_us"] / t["us"].where(t["us"] > 0, 1.0), 0.0)
        t["addressable_fraction"] = frac
        t["addressable"] = np.where(frac >= 0.999, "yes", np.where(frac <= 0.001, "no", "partly"))
        t["gain"] = 1.0 - t["projected_us"] / b.wall_us if b.wall_us > 0 else 0.0
        t["gain_inf"] = 1.0 - t["projected_inf_us"] / b.wall_us if b.wall_us > 0 else 0.0
        t = t.sort_values(["gain", "us"], ascending=False, kind="stable").reset_index(drop=True)
        if top:
            t = t.head(top)
        t = t[_TARGET_COLUMNS].copy()
        if replay_top > 0 and b.mode == "gpu":
            rg = np.full(len(t), np.nan)
            rgi = np.full(len(t), np.nan)
            for row in range(min(replay_top, len(t))):
                mask = valid.copy()
                mask[valid] = k == t["name"].iat[row]
                rg[row] = replay_projection(b, speedup, mask).gain
                rgi[row] = replay_projection(b, math.inf, mask).gain
            t["replay_gain"] = rg
            t["replay_gain_inf"] = rgi
        frames.append(t)
    if not frames:
        return pd.DataFrame(columns=_TARGET_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def targets_dict(analysis: Any, table: pd.DataFrame, speedup: float) -> dict[str, Any]:
    """The ``headroom targets --json`` contract (docs/projection.md)."""
    b = as_baseline(analysis)

    def clean(v):
        if isinstance(v, (np.floating, float)):
            return None if not math.isfinite(float(v)) else float(v)
        if isinstance(v, np.integer):
            return int(v)
        return v

    return {
        "trace": b.source, "mode": b.mode, "baseline_us": b.wall_us, "per_step_us": b.per_step_us,
        "num_steps": b.num_steps, "speedup": speedup,
        "targets": [{c: clean(v) for c, v in row.items()} for row in table.to_dict(orient="records")],
    }


# --- tables behind the figures ------------------------------------------------------------


def _label(a: Any, label: str | None) -> str:
    if label:
        return label
    if hasattr(a, "manifest") and hasattr(a, "source"):
        from headroom.report import workload_label
        return workload_label(a)
    src = str(getattr(a, "source", "trace"))
    base = src.rsplit("/", 1)[-1]
    for suffix in (".json.gz", ".json", ".pt.trace"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def category_fractions(analyses: Sequence[Any], labels: Sequence[str] | None = None,
                       basis: str = "kernel") -> pd.DataFrame:
    """One row per (workload, category): the category's fraction, for the addressable-fraction figure.

    ``basis="kernel"``: fractions of kernel time (``Analysis.total_us``; their
    addressable sum is ``Analysis.addressable_fraction``). ``basis="wall"``:
    fractions of the window (busy-time shares, plus an ``idle`` row).
    Columns: workload, category, addressable, us, fraction; sorted with
    non-addressable categories first, then addressable ones, largest first.
    """
    if basis not in ("kernel", "wall"):
        raise UserError(f"basis must be kernel or wall, got {basis!r}")
    rows = []
    for k, a in enumerate(analyses):
        label = _label(a, labels[k] if labels else None)
        cats = a.categories
        if basis == "kernel":
            denom = float(a.total_us)
            for r in cats.itertuples(index=False):
                rows.append((label, r.name, bool(r.addressable), float(r.us), float(r.us) / denom if denom > 0 else 0.0))
        else:
            denom = float(a.wall_us) * int(getattr(a, "n_devices", 1) or 1)
            for r in cats.itertuples(index=False):
                rows.append((label, r.name, bool(r.addressable), float(r.wall_us),
                             float(r.wall_us) / denom if denom > 0 else 0.0))
            rows.append((label, "idle", False, float(a.idle_us), float(a.idle_us) / denom if denom > 0 else 0.0))
    df = pd.DataFrame(rows, columns=["workload", "category", "addressable", "us", "fraction"])
    if len(df):
        df["_order"] = df["addressable"].astype(int)
        df = df.sort_values(["workload", "_order", "fraction"], ascending=[True, True, False], kind="stable")
        order = {lab: i for i, lab in enumerate(dict.fromkeys(
            [_label(a, labels[k] if labels else None) for k, a in enumerate(analyses)]))}
        df["_w"] = df["workload"].map(order)
        df = df.sort_values(["_w", "_order", "fraction"], ascending=[True, True, False], kind="stable")
        df = df.drop(columns=["_order", "_w"]).reset_index(drop=True)
    return df


def addressable_summary(analyses: Sequence[Any], labels: Sequence[str] | None = None,
                        basis: str = "kernel") -> pd.DataFrame:
    """Per workload: the addressable fraction (the label on each bar)."""
    df = category_fractions(analyses, labels, basis)
    if len(df) == 0:
        return pd.DataFrame(columns=["workload", "addressable_fraction"])
    s = df[df["addressable"]].groupby("workload", sort=False)["fraction"].sum()
    names = list(dict.fromkeys(df["workload"]))
    return pd.DataFrame({"workload": names, "addressable_fraction": [float(s.get(n, 0.0)) for n in names]})


_PARAM_KEYS = ("params", "parameters", "num_params", "n_params", "param_count")
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


def _manifest_value(m: dict, keys: Sequence[str]) -> Any:
    for k in keys:
        if k in m and m[k] not in (None, ""):
            return m[k]
    for sub in ("model", "workload", "config"):
        if isinstance(m.get(sub), dict):
            v = _manifest_value(m[sub], keys)
            if v is not None:
                return v
    return None


_FULL_PARAM_KEYS = ("params_full", "total_params", "full_params")


def _full_params(m: dict, source: str, cache: dict) -> tuple[float | None, str]:
    """The whole model's parameter count, and where it came from.

    A run that built only some of its blocks (``layers < total_layers``, see
    `headroom profile --layers`) records the built model's count in ``params``;
    the whole model's comes from ``params_full`` when the manifest has it, else
    from the workload registry (counted on the meta device).
    """
    v = _manifest_value(m, _FULL_PARAM_KEYS)
    if v is not None:
        return v, "manifest"
    layers, total = m.get("layers"), m.get("total_layers")
    partial = isinstance(layers, int) and isinstance(total, int) and 0 < layers < total
    if partial and m.get("workload"):
        key = (m["workload"], m.get("flavour") or "default")
        if key not in cache:
            try:
                from headroom.workload import get_workload
                cache[key] = float(get_workload(key[0]).param_count_meta(key[1]))
            except Exception:  # no registry entry, or the model cannot be built here
                cache[key] = None
        if cache[key] is not None:
            return cache[key], "registry"
        raise UserError(f"{source}: built {layers} of {total} blocks and records no whole-model parameter "
                        f"count (give --params)")
    return _manifest_value(m, _PARAM_KEYS), "manifest"


def _whole_model_fractions(a: Any, m: dict) -> tuple[float, float, bool]:
    """(addressable fraction, GEMM+attention fraction, extrapolated?) of the whole model.

    Runs that built only some blocks are scaled to all blocks with
    `headroom.profile.extrapolate_layers` (block work x total/built).
    """
    cats = a.categories
    total = float(a.total_us)
    layers, tl = m.get("layers"), m.get("total_layers")
    if isinstance(layers, int) and isinstance(tl, int) and 0 < layers < tl and getattr(a, "trace", None) is not None:
        try:
            from headroom.profile import extrapolate_layers
            ext = extrapolate_layers(a, layers, tl)
        except Exception:
            ext = None
        if ext is not None:
            c = ext.categories
            ga = float(c.loc[c["name"].isin(["gemm", "attention"]), "fraction"].sum())
            return float(ext.addressable_fraction), ga, True
    ga = float(cats.loc[cats["name"].isin(["gemm", "attention"]), "us"].sum()) if len(cats) else 0.0
    return float(a.addressable_fraction), (ga / total if total > 0 else 0.0), False


def scaling_table(analyses: Sequence[Any], params: Sequence[float] | None = None,
                  labels: Sequence[str] | None = None, family: str | None = None,
                  skip_missing: bool = False, min_sizes: int = 1) -> pd.DataFrame:
    """Addressable fraction against parameter count, for traces of one family at several sizes.

    Parameter counts come from ``params`` or from each trace's headroom manifest
    (the whole model's: ``params_full``, else the workload registry for runs that
    built only some blocks, else ``params``); a trace without one is an error, or
    skipped with ``skip_missing``. Runs that built only some blocks are
    extrapolated to the whole model (``headroom.profile.extrapolate_layers``).
    ``min_sizes``: keep only families with that many distinct sizes. Columns:
    workload, family, params, addressable_fraction, gemm_attention_fraction,
    extrapolated; sorted by params.
    """
    rows = []
    cache: dict = {}
    for k, a in enumerate(analyses):
        m = getattr(a, "manifest", None) or {}
        src = getattr(a, "source", "trace")
        if params is not None:
            p = params[k]
        else:
            p, _ = _full_params(m, src, cache) if not skip_missing else _try(lambda: _full_params(m, src, cache))
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
    df = pd.DataFrame(rows, columns=["workload", "family", "params", "addressable_fraction",
                                     "gemm_attention_fraction", "extrapolated"])
    if min_sizes > 1 and len(df):
        df = df.groupby("family", sort=False).filter(lambda g: g["params"].nunique() >= min_sizes)
    return df.sort_values("params", kind="stable").reset_index(drop=True)


def _try(fn):
    try:
        return fn()
    except UserError:
        return None, ""
