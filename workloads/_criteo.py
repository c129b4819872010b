"""Criteo 1TB's shapes, which the recommender workloads (dlrm, dlrm-dcn, deepfm, dlrm-int8) build their tables and
batches from: rows per categorical feature, the MLPerf multi-hot sizes, the dense features.
"""

from __future__ import annotations

# Criteo 1TB: rows per categorical feature (torchrec examples/dlrm, MLPerf preprocessing, 40M cap).
CRITEO_1TB_ROWS = [
    40000000,
    39060,
    17295,
    7424,
    20265,
    3,
    7122,
    1543,
    63,
    40000000,
    3067956,
    405282,
    10,
    2209,
    11938,
    155,
    4,
    976,
    14,
    40000000,
    40000000,
    40000000,
    590152,
    12973,
    108,
    36,
]


# MLPerf DLRMv2 synthetic multi-hot dataset: values per sample for each feature.
MLPERF_MULTI_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]


DENSE_FEATURES = 13
