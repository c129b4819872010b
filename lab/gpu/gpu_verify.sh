#!/usr/bin/env bash
# headroom verify on one GPU (the H200) against KernelBench's own files (../shared/kernelbench):
# parallel builds of the load_inline candidates, examples/, adversarial/, all 100 level-1 problems
# (reference as candidate + zeros), our candidates, then partial-write and shape-cache as time allows.
#
#   OUT=/some/dir bash lab/gpu/gpu_verify.sh            # from the repository root; ~8 min
#
# Writes $OUT/kernelbench_l1.json (every result, the builds, what was skipped, the wall time) and
# $OUT/kernelbench_l1.log. No new work starts after $BUDGET s (default 450); the whole run is cut at
# $HARD_LIMIT s (default 505, under 8.5 min), results saved after every problem.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-out/gpu_verify}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
timeout --signal=TERM --kill-after=15 "${HARD_LIMIT:-505}" "${PYTHON:-python3}" lab/gpu/gpu_kernelbench.py \
    --out "$OUT" --budget "${BUDGET:-450}" "$@"
