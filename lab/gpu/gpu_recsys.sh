#!/usr/bin/env bash
# DLRM-Bench on one GPU (the H200), one command, under 9 minutes with the setup (lab/gpu/gpu_recsys.py):
#
#   OUT=/path/for/results bash lab/gpu/gpu_recsys.sh            (from the repository root)
#
# The setup of lab/gpu/gpu_setup.sh without .whl-rec/'s fbgemm-gpu-cpu (it would shadow the CUDA build):
# the carried wheels of .whl/ and torchrec + tensordict of .whl-rec/ (or .recw/, the same without fbgemm-gpu-cpu, small enough to carry beside .whl) into /tmp/site, the unpacked CUDA
# fbgemm_gpu at $FBGEMM_SITE (default /var/tmp/fbsite) first on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/../.."
FBGEMM_SITE=${FBGEMM_SITE:-/var/tmp/fbsite}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "${HEADROOM_SITE:-/tmp/site}" .whl/*.whl \
    $(ls .whl-rec/*.whl .recw/*.whl 2>/dev/null | grep -v fbgemm) || exit 1
tar -C "${HEADROOM_SITE:-/tmp/site}" -xJf .whl/prt.tar.xz || exit 1
export PYTHONPATH="$FBGEMM_SITE:${HEADROOM_SITE:-/tmp/site}:$PWD" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-out/gpu_recsys}
mkdir -p "$OUT"
exec timeout --signal=TERM --kill-after=10 "${HARD_LIMIT:-525}" python3 lab/gpu/gpu_recsys.py --out "$OUT" \
    --budget "${BUDGET:-500}" "$@"
