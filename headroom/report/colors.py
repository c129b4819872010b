"""The category colours every figure uses (matplotlib's and the HTML page's): non-addressable categories
in greys, addressable ones in colour, so the split is visible in print. The greys are ColorBrewer's
5-class "Greys" (steps a reader can tell apart, also in print); idle is white."""

from __future__ import annotations

COLORS = {
    "gemm": "#252525",
    "attention": "#636363",
    "conv": "#969696",
    "communication": "#bdbdbd",
    "memory": "#e0e0e0",
    "idle": "#ffffff",
    "embedding": "#d62728",
    "elementwise": "#1f77b4",
    "normalization": "#2ca02c",
    "reduction": "#9467bd",
    "softmax": "#8c564b",
    "indexing": "#e377c2",
    "copy": "#17becf",
    "optimizer": "#bcbd22",
    "sort": "#ff7f0e",
    "fused": "#aec7e8",
    "other": "#98df8a",
    "routing": "#c49c94",
    "permute": "#f7b6d2",
}
EXTRA = ["#ffbb78", "#c5b0d5", "#dbdb8d", "#9edae5", "#393b79", "#e7ba52"]


def color(cat: str, k: int) -> str:
    """A category's colour; one outside COLORS gets the k-th extra colour."""
    return COLORS.get(cat, EXTRA[k % len(EXTRA)])
