#!/usr/bin/env bash
# headroom verify on one GPU (the H200): the KernelBench level-1-style problems in
# benchmarks/kernelbench_l1 and the 12 DLRM-Bench problems, honest and cheating
# candidates, with the TF32-vs-strict-FP32 baseline of every problem.
#
#   OUT=/some/dir bash scripts/gpu_verify.sh            # from the repository root
#
# Writes three files to $OUT (default out/gpu_verify):
#   verify_results.json      every result + the TF32/FP32 baselines (headroom verify suite format)
#   dlrm_bench_speedups.json the honest DLRM-Bench results (input to `headroom project --speedups`)
#   gpu_verify.log           the run, a baseline table and a results table
# Needs python3 + torch only (no msgspec/typer/rich). No new problem starts after
# $BUDGET seconds (default 400) and the whole run is cut at $HARD_LIMIT (470 s):
# it fits in 8 minutes; results are saved after every problem.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu_verify}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
timeout --signal=TERM --kill-after=10 "${HARD_LIMIT:-470}" "${PYTHON:-python3}" -m headroom.verify.campaign \
    --out "$OUT" --budget "${BUDGET:-400}" "$@" 2>&1 | tee "$OUT/gpu_verify.log"
exit "${PIPESTATUS[0]}"
