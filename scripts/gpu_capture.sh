#!/usr/bin/env bash
# Capture the shipped traces and the GPU proofs on one GPU (the H200), in one command.
#
#   OUT=/path/for/results bash scripts/gpu_capture.sh          (run from anywhere; repo root is found)
#
# Needs: python3 with torch (CUDA), transformers, msgspec, polars, pandas, numpy importable
# (the carried wheels installed, e.g. into /tmp/site on PYTHONPATH); torchrec +
# fbgemm-gpu for the recommenders (CUDA fbgemm-gpu -> the production DMP/TBE path,
# otherwise torchrec's unsharded collection; the manifest says which ran).
# typer/rich are not needed: runs call headroom.profile.run.profile_workload directly (scripts/gpu_capture.py).
#
# It runs, each in its own process with a time limit (one failure never stops the rest):
#   the seven workloads at their defaults, llama-7b --phase decode (static cache),
#   llama-7b --compile, llama-7b --layers 4 (prefill and decode: the extrapolation
#   check against the full 32-layer runs), and llama-7b decode --kv-cache dynamic
#   if time is left. A budget (HEADROOM_CAPTURE_BUDGET, default 530 s) keeps the
#   whole under ~9 minutes: a run that no longer fits is skipped and reported.
#
# Writes under $OUT (at most 8 files, each at most 16 MB):
#   traces-N.tar   shipped traces (*.json.gz) + manifest.json, for traces/ (split to stay under 15 MB)
#   checks.tar     the --layers 4 traces (not shipped; evidence for docs/)
#   results.json   per run: status, step time, profiler overhead, idle, addressable,
#                  categories, embedding path; the --layers accuracy check; environment
#   capture.log    every run's output
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0                 # no NVLink multicast (one-rank NCCL group for torchrec DMP)
export TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out/gpu-capture}
BUDGET=${HEADROOM_CAPTURE_BUDGET:-530}
mkdir -p "$OUT"
cd "$ROOT"
exec "$PY" "$ROOT/scripts/gpu_capture.py" "$OUT" "$BUDGET"
