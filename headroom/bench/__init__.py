"""DLRM-Bench: 12 recommender kernel problems in KernelBench format.

Each problem is a plain KernelBench file in ``problems/`` (``Model``,
``get_inputs()``, ``get_init_inputs()``), with real-size shapes for an H200
by default and a small CPU instance when the environment variable
``HEADROOM_BENCH_SCALE=cpu`` is set before the file is imported (the harness
sets it in every process it starts). ``candidates/`` holds one honest
re-implementation per problem.

    headroom bench list
    headroom bench run [NAME ...] [--candidates DIR] [--scale cpu|full] [--out results.json]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from headroom.errors import UserError

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
CANDIDATES_DIR = Path(__file__).resolve().parent / "candidates"
SCALE_ENV = "HEADROOM_BENCH_SCALE"
SCALES = ("full", "cpu")


@dataclass(frozen=True)
class BenchProblem:
    name: str
    summary: str
    shapes: str  # full-size inputs
    stands_for: str  # what it stands for in the dlrm workload's trace (ops / kernels)

    @property
    def path(self) -> Path:
        return PROBLEMS_DIR / f"{self.name}.py"

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "shapes": self.shapes, "stands_for": self.stands_for,
                "path": str(self.path)}


PROBLEMS: tuple[BenchProblem, ...] = (
    BenchProblem("01_EmbeddingBagSum", "26-table pooled embedding bag, sum, variable bag lengths",
                 "26 tables (MLPerf DLRMv2 sizes capped at 1M rows: 7.1M x 128), batch 65536, "
                 "MLPerf multi-hot means (~14M ids)",
                 "aten::embedding_bag / _embedding_bag forward (fbgemm TBE forward in production)"),
    BenchProblem("02_WeightedMeanEmbeddingBag", "weighted mean pooling of one table",
                 "2M x 128 table, batch 16384, 0-100 ids per bag with positive weights",
                 "aten::embedding_bag forward with per_sample_weights (TBE weighted forward)"),
    BenchProblem("03_Int8RowwiseEmbeddingBag", "int8 row-wise quantized lookup, sum pooling",
                 "4M x 128 int8 + fp32 scale/bias per row, batch 65536, 0-40 ids per bag",
                 "quantized embedding bag (fbgemm int_nbit_split_embedding*, quantized::embedding_bag_byte*)"),
    BenchProblem("04_DotInteraction", "DLRM dot interaction: bmm + lower-triangle gather",
                 "Z (65536, 27, 128) -> (65536, 128 + 351)",
                 "aten::bmm + aten::index of the interaction forward"),
    BenchProblem("05_DotInteractionBackward", "backward of the DLRM dot interaction",
                 "Z (65536, 27, 128), grad (65536, 351) -> dZ (65536, 27, 128)",
                 "IndexBackward0 -> aten::index_put_ (accumulate: sort + indexing_backward_kernel), "
                 "the top kernel of our DLRM training profile (25-28%), plus its bmm's"),
    BenchProblem("06_DCNv2LowRankCross", "DCN-v2 low-rank cross network, 3 layers",
                 "x (65536, 3456), rank 512",
                 "the cross layers' GEMMs and element-wise kernels (module LowRankCrossNet)"),
    BenchProblem("07_FMInteraction", "factorization-machine second-order interaction",
                 "v (65536, 27, 128) -> (65536, 128)",
                 "the FM module's reduction and element-wise kernels"),
    BenchProblem("08_JaggedToPaddedDense", "jagged -> zero-padded dense",
                 "values (~819k, 128), 16384 sequences of 0-100 -> (16384, 100, 128)",
                 "fbgemm::jagged_to_padded_dense / jagged_2d_to_dense"),
    BenchProblem("09_JaggedSum", "jagged (segment) sum",
                 "values (~1.6M, 128), 16384 sequences of 0-200 -> (16384, 128)",
                 "fbgemm::jagged_sum / aten::segment_reduce"),
    BenchProblem("10_JaggedSoftmax", "softmax within each sequence of a jagged tensor",
                 "values (~418k, 128), 16384 sequences of 1-50",
                 "fbgemm::jagged_softmax"),
    BenchProblem("11_PermutePooledEmbeddings", "feature-wise permutation of pooled embeddings",
                 "(65536, 3168), 26 features of 32-256 columns",
                 "fbgemm::permute_pooled_embs"),
    BenchProblem("12_AttentionPooling", "DIN-style target-attention pooling over a behaviour sequence",
                 "query (16384, 128), history (16384, 100, 128), lengths 1-100",
                 "the attention-pooling module's bmm, mask and softmax kernels"),
)

NAMES = tuple(p.name for p in PROBLEMS)


def get(name: str) -> BenchProblem:
    """A problem by exact name, or by its number prefix (``5`` / ``05``)."""
    for p in PROBLEMS:
        if name == p.name or name.lower() == p.name.lower():
            return p
    digits = name.lstrip("0")
    for p in PROBLEMS:
        if digits and p.name.split("_", 1)[0].lstrip("0") == digits:
            return p
    raise UserError(f"DLRM-Bench has no problem {name!r} (see `headroom bench list`)")


def default_scale(device: str) -> str:
    return "cpu" if device == "cpu" else "full"


def run(names: list[str] | None = None, candidates_dir: str | Path | None = None, options: Any = None,
        scale: str | None = None, out: str | Path | None = None,
        progress: Callable[[str], None] | None = None) -> dict:
    """Verify candidates (default: the shipped honest ones) against DLRM-Bench; returns the suite document."""
    from headroom.verify import VerifyOptions, verify_suite

    options = options or VerifyOptions()
    device = options.resolved_device()
    scale = scale or default_scale(device)
    if scale not in SCALES:
        raise UserError(f"--scale {scale}: expected one of {', '.join(SCALES)}")
    options.env = {**options.env, SCALE_ENV: scale}
    selected = [get(n).name for n in names] if names else list(NAMES)
    cdir = Path(candidates_dir) if candidates_dir is not None else CANDIDATES_DIR
    doc = verify_suite(PROBLEMS_DIR, cdir, options, out=None, problems=selected, progress=progress)
    doc["suite"] = "DLRM-Bench"
    doc["scale"] = scale
    if out is not None:
        from headroom.verify import write_json

        write_json(doc, out)
    return doc
