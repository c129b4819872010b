"""`headroom targets --roofline` on screen: each row's rates against the device's peaks, its limit and floor."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from headroom.projection.roofline import Device
from headroom.report.render import short_name


def _f(x: float, fmt: str) -> str:
    return "" if x is None or not isinstance(x, (int, float)) or not math.isfinite(x) else format(x, fmt)


def render_roofline(table: pd.DataFrame, device: Device, num_steps: int, speedup: float, console: Console) -> None:
    """One table per grouping: ms/step, GFLOP and GB per step, achieved TFLOP/s and TB/s, the limit, the
    floor, max_speedup (and a module's fused floor and bound), the achievable gain at `speedup`."""
    if not device.peaks:
        return
    console.print(
        f"roofline against {device.name}: {device.memory_tb_s:g} TB/s, "
        f"{dict(device.matrix).get('bf16', math.nan):g} TFLOP/s bf16 matrix, "
        f"{device.vector_tflops:g} TFLOP/s f32 vector, {device.min_kernel_us:g} µs shortest kernel",
        highlight=False,
    )
    n = max(num_steps, 1)
    for kind in dict.fromkeys(table["kind"]):
        rows = table[table["kind"] == kind]
        module = rows["fused_floor_us"].notna().any()
        t = Table(show_edge=False, header_style="bold", title=f"roofline by {kind}", title_justify="left")
        cols = (
            [
                "name",
                "ms/step",
                "costed",
                "GFLOP/step",
                "GB/step",
                "TFLOP/s",
                "TB/s",
                "limit",
                "floor ms",
                "max speedup",
            ]
            + (["fused floor ms", "fused max"] if module else [])
            + [f"achievable @{speedup:g}x"]
        )
        for c in cols:
            t.add_column(c, justify="left" if c in ("name", "limit") else "right")
        for r in rows.itertuples(index=False):
            row = [
                short_name(r.name, 60),
                f"{r.us / n / 1e3:,.3f}",
                _f(100 * r.costed, ".0f") + "%",
                _f(r.flops / n / 1e9, ",.1f"),
                _f(r.bytes / n / 1e9, ",.3f"),
                _f(r.achieved_tflops, ",.1f"),
                _f(r.achieved_tb_s, ",.2f"),
                str(r.limit),
                _f(r.floor_us / n / 1e3, ",.3f"),
                _f(r.max_speedup, ",.2f"),
            ]
            if module:
                row += [_f(r.fused_floor_us / n / 1e3, ",.3f"), _f(r.fused_max_speedup, ",.2f")]
            row += [_f(100 * r.achievable_gain, ".2f") + ("%" if math.isfinite(r.achievable_gain) else "")]
            t.add_row(*row)
        console.print(t)
    console.print(
        "floor: each costed call at max(FLOPs/peak, bytes/bandwidth, shortest kernel), uncosted kernels "
        "as measured; achievable: the gain at min(max speedup, the fused one for a module, "
        f"{speedup:g}x)"
    )
