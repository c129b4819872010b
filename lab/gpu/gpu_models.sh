#!/usr/bin/env bash
# The MoE workload and hf: configs at full dimensions on one H100/H200, under 4 minutes:
#
#   source lab/gpu/gpu_setup.sh && OUT=$OUT bash lab/gpu/gpu_models.sh      (from the repository root)
#
# mixtral-8x7b with 8 of its 32 blocks (8 x 1.41B parameters + embeddings and head: 11.5B, 23 GB in bf16),
# extrapolated to 32: prefill (4 x 2048 tokens) and decode at batch 1 against a 2048-token static cache.
# hf:tests/data/hf/llama-3-8b (8 of 32 blocks) prefill, and hf:tests/data/hf/qwen1.5-moe-a2.7b (8 of 24)
# decode at batch 1. Traces and manifest.json in $OUT/models/ (4 traces, the manifest and its lock file).
# CHECK=cpu runs the same commands on a CPU with the tiny configurations (2 blocks), to check the flags.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu_models}
DIR="$OUT/models"
mkdir -p "$DIR"
if [ "${CHECK:-}" = cpu ]; then
    MOE=(mixtral-8x7b --flavour tiny --layers 2 --device cpu); HF=tests/data/hf/tiny-; LAYERS=2; DEV=(--device cpu)
else
    MOE=(mixtral-8x7b --layers 8); HF=tests/data/hf/; LAYERS=8; DEV=()
fi
run() { timeout --signal=TERM --kill-after=10 120 python3 -m headroom.cli profile "$@" --out "$DIR" || echo "gpu_models: failed: $*" >&2; }
run "${MOE[@]}" --phase prefill
run "${MOE[@]}" --phase decode --batch 1
run "hf:${HF}llama-3-8b" --layers "$LAYERS" --phase prefill "${DEV[@]}"
run "hf:${HF}qwen1.5-moe-a2.7b" --layers "$LAYERS" --phase decode --batch 1 "${DEV[@]}"
python3 -m headroom.cli report "$DIR" || true
ls -la "$DIR"
