#!/usr/bin/env bash
# Re-capture the shipped traces with module ranges, measure the ranges' cost, rank every trace's
# modules: one GPU (the H200), one command, at most 9 minutes.
#
#   OUT=/path/for/results bash lab/gpu/gpu_capture.sh          (run from anywhere; repo root is found)
#
# Needs: python3 with torch (CUDA), transformers, pandas, numpy, and the carried wheels on PYTHONPATH:
# msgspec, polars, google-re2 (the loader), torchrec + fbgemm-gpu for the recommenders (CUDA
# fbgemm-gpu -> the production DMP/TBE path, otherwise torchrec's unsharded collection; the manifest
# says which ran). typer/rich are not needed: runs call the API (lab/gpu/gpu_capture.py).
#
# It runs, each in its own process with a time limit (one failure never stops the rest), while a
# budget (HEADROOM_CAPTURE_BUDGET, default 530 s) lasts: the ten shipped traces (the seven workloads,
# llama-7b decode static and dynamic, llama-7b --compile), lab/probes/module_ranges.py (step time with
# and without module ranges, interleaved), the --layers 4 checks, the 13b/70b --layers 4 scaling
# traces; `headroom targets TRACE --by module --json` for every trace it captured.
#
# Writes under $OUT (at most 8 files, each at most 16 MB): traces-N.tar (traces/ + manifest.json),
# checks.tar (traces/checks/ and traces/scaling/), targets.json, module_ranges.json, results.json,
# capture.log. See lab/gpu/gpu_capture.py.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0                 # no NVLink multicast (one-rank NCCL group for torchrec DMP)
export TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out/gpu-capture}
BUDGET=${HEADROOM_CAPTURE_BUDGET:-530}
mkdir -p "$OUT"
cd "$ROOT"
exec "$PY" "$ROOT/lab/gpu/gpu_capture.py" "$OUT" "$BUDGET"
