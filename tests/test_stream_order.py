"""gpu_structure._order_bounds: its numpy path gives what polars' windows give (the rule it replaced)."""

import numpy as np
import polars as pl
import pytest

from headroom.trace import gpu_structure

KEYS = ["device", "stream"]


def by_polars(g: pl.DataFrame) -> pl.DataFrame:
    per = (
        g.group_by(*KEYS, "_launch")
        .agg(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi"))
        .sort(*KEYS, "_launch")
        .with_columns(
            later=pl.col("lo").reverse().cum_min().reverse().shift(-1).over(KEYS),
            earlier=pl.col("hi").cum_max().shift(1).over(KEYS),
        )
    )
    return g.join(per.select(*KEYS, "_launch", "later", "earlier"), on=[*KEYS, "_launch"], how="left")


@pytest.mark.parametrize("seed", range(4))
def test_numpy_bounds_equal_polars_windows(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(2, 300))
        g = pl.DataFrame(
            {
                "index": np.arange(n),
                "device": rng.integers(0, 3, n),
                "stream": rng.integers(0, 4, n),
                "_launch": rng.integers(0, 50, n) * 1.5,
                "ts": rng.integers(0, 100, n) + rng.random(n).round(1),
            }
        )
        if seed == 3:  # a NaN: polars' own path
            g = g.with_columns(ts=pl.when(pl.col("index") == 0).then(float("nan")).otherwise(pl.col("ts")))
        ours, theirs = gpu_structure._order_bounds(g, KEYS).sort("index"), by_polars(g).sort("index")
        for c in ("later", "earlier"):
            assert ours[c].fill_nan(-1.0).to_list() == theirs[c].fill_nan(-1.0).to_list()
