"""din: a DIN-style sequence recommender over jagged behaviour histories, one training step.

Each sample is a user's behaviour history (item and category ids, 1-100 items, uniform) and a
candidate (item, category), all in one `KeyedJaggedTensor`, embedded by torchrec's
`EmbeddingCollection` (unpooled: one row per id; the item table is shared by history and candidate,
10M x 64, the category table 100k x 64). A history item is its item and category rows side by
side (128 wide). The history stays jagged: fbgemm's `jagged_to_padded_dense` pads it to 100 items
for the target attention (module `TargetAttentionPool`: DIN's activation unit, an MLP over
[h, q, h - q, h * q] for every item, masked softmax over each user's items, weighted sum), and a
second pooling works on the jagged values directly (module `SoftmaxPooling`: a linear score per
dimension, `fbgemm::jagged_softmax` within each history, a jagged sum with `aten::segment_reduce`).
The candidate and both pooled histories feed an MLP 1024-512-256-1. Sparse Adagrad on the tables.
"""

from __future__ import annotations

from typing import Any

from headroom.errors import UserError
from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._recsys import need_fbgemm_cuda, sparse_table_step, table_init
from headroom.workloads._torchrec import import_torchrec

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(items=10_000_000, cats=100_000, dim=64, max_len=100, att=[256, 64], mlp=[1024, 512, 256, 1]),
    "tiny": dict(items=1000, cats=50, dim=8, max_len=10, att=[16, 8], mlp=[32, 16, 1]),
}


def _mlp(sizes: list[int], device: Any, last_act: bool = False):
    import torch

    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b, device=device))
        if last_act or i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _model(f: dict[str, Any], device: Any):
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    import torch
    from torchrec import EmbeddingCollection, EmbeddingConfig

    width = 2 * f["dim"]

    class TargetAttentionPool(torch.nn.Module):
        """DIN's target attention over a padded history (batch, L, width) for a query (batch, width)."""

        def __init__(self) -> None:
            super().__init__()
            self.unit = _mlp([4 * width] + f["att"], device, last_act=True)
            self.score = torch.nn.Linear(f["att"][-1], 1, device=device)

        def forward(self, history: torch.Tensor, query: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            q = query.unsqueeze(1).expand_as(history)
            s = self.score(self.unit(torch.cat([history, q, history - q, history * q], dim=-1))).squeeze(-1)
            mask = torch.arange(history.shape[1], device=history.device).unsqueeze(0) < lengths.unsqueeze(1)
            w = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=1)
            return torch.bmm(w.unsqueeze(1), history).squeeze(1)

    class SoftmaxPooling(torch.nn.Module):
        """Per-dimension softmax weights within each jagged history, then the jagged weighted sum."""

        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(width, width, device=device)

        def forward(self, values: torch.Tensor, offsets: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            w = torch.ops.fbgemm.jagged_softmax(self.proj(values), offsets, f["max_len"])[0]
            return torch.segment_reduce(w * values, "sum", lengths=lengths, axis=0)

    class DeepInterestNetwork(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = EmbeddingCollection(
                tables=[
                    EmbeddingConfig(
                        name="item",
                        embedding_dim=f["dim"],
                        num_embeddings=f["items"],
                        feature_names=["hist_item", "cand_item"],
                    ),
                    EmbeddingConfig(
                        name="cat",
                        embedding_dim=f["dim"],
                        num_embeddings=f["cats"],
                        feature_names=["hist_cat", "cand_cat"],
                    ),
                ],
                device=device,
            )
            self.attention = TargetAttentionPool()
            self.pooling = SoftmaxPooling()
            self.mlp = _mlp([3 * width] + f["mlp"], device)

        def forward(self, features: Any) -> torch.Tensor:
            jt = self.embeddings(features)
            hist = torch.cat([jt["hist_item"].values(), jt["hist_cat"].values()], dim=1)  # (total, width)
            query = torch.cat([jt["cand_item"].values(), jt["cand_cat"].values()], dim=1)  # (batch, width)
            lengths = jt["hist_item"].lengths()
            offsets = torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
            padded = torch.ops.fbgemm.jagged_to_padded_dense(hist, [offsets], [f["max_len"]], 0.0)
            att = self.attention(padded, query, lengths)
            pooled = self.pooling(hist, offsets, lengths)
            return self.mlp(torch.cat([query, att, pooled], dim=1)).squeeze(1)

    return DeepInterestNetwork()


def _batch(cfg: RunConfig, f: dict[str, Any], device: Any):
    import torch
    from torchrec import KeyedJaggedTensor

    g = torch.Generator(device="cpu").manual_seed(0)
    B, L = cfg.batch, f["max_len"]
    hist = torch.randint(1, L + 1, (B,), dtype=torch.int32, generator=g)
    one = torch.ones(B, dtype=torch.int32)
    n = int(hist.sum())
    values = torch.cat(
        [torch.randint(0, f[table], (k,), generator=g) for table in ("items", "cats") for k in (n, B)]
    )  # hist_*, cand_*
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["hist_item", "cand_item", "hist_cat", "cand_cat"],
        values=values,
        lengths=torch.cat([hist, one, hist, one]),
    )
    return kjt.to(device), torch.randint(0, 2, (B,), generator=g).float().to(device)


def _build(cfg: RunConfig, device: Any) -> Step:
    import_torchrec()
    import torch

    from headroom.profile import materialize

    need_fbgemm_cuda(cfg, device)
    f = dict(FLAVOURS[cfg.flavour])
    if cfg.seq is not None:
        if cfg.seq < 1:
            raise UserError(f"{cfg.workload}: --seq (the longest history) must be at least 1")
        f["max_len"] = cfg.seq
    model = _model(f, torch.device("meta"))
    materialize(model, device, init=table_init)
    kjt, labels = _batch(cfg, f, device)
    info = {
        "embedding_path": "torchrec EmbeddingCollection, unsharded (PyTorch embedding, sparse gradients)",
        "history": f"1-{f['max_len']} items per user, uniform",
        "jagged_ops": "fbgemm jagged_to_padded_dense, jagged_softmax; aten segment_reduce",
    }
    return sparse_table_step(
        cfg,
        device,
        model,
        model.embeddings.embeddings.values(),
        lambda: torch.nn.functional.binary_cross_entropy_with_logits(model(kjt).float(), labels),
        info,
    )


def _meta(flavour: str):
    import torch

    import_torchrec()
    return _model(FLAVOURS[flavour], torch.device("meta"))


SPEC = register_workload(
    WorkloadSpec(
        name="din",
        domain="recommender",
        description="DIN-style target attention and jagged softmax pooling over behaviour histories: training step",
        model=(
            "torchrec EmbeddingCollection (item 10M x 64, category 100k x 64) over KeyedJaggedTensor histories of "
            "1-100 items; TargetAttentionPool (activation unit 256-64) on fbgemm jagged_to_padded_dense; "
            "SoftmaxPooling (fbgemm jagged_softmax + segment_reduce); MLP 1024-512-256-1"
        ),
        build=_build,
        meta_model=_meta,
        modes=("train",),
        defaults={
            "mode": Default("train", "sequence recommenders spend their GPU time training on fresh data"),
            "batch": Default(16384, "a large CTR training batch: 16384 histories of up to 100 items (~830k rows)"),
            "seq": Default(100, "the longest behaviour history (DIN-style models keep the last 50-100 items)"),
            "dtype": Default("fp32", "CTR models train in fp32 (TF32 tensor cores for the MLPs)"),
        },
        flavours={
            "default": "item 10M x 64, category 100k x 64, histories of 1-100",
            "tiny": "item 1000 x 8, category 50 x 8, histories of 1-10, for CI",
        },
        seq_meaning="the longest behaviour history (items)",
        cpu_scale={"batch": (256, "a CPU-sized batch"), "seq": (20, "histories of up to 20 items on a CPU")},
        source=__file__,
    )
)
