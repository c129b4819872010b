#!/usr/bin/env bash
# The H200 command behind docs/gpu/measure/ (one call of the device tool, from the repository root, with
# .whl, .whl-rec and .kb carried: the wheels of lab/gpu/gpu_setup.sh and a copy of ../shared/kernelbench; with the
# repository at 28 MB the three exceed the 64 MiB a command carries: .whl + .kb for steps 1-2 and the transformer
# substitutions, .whl + .whl-rec for the DLRM one, VALIDATE_ONLY naming which):
#   1. lab/probes/gated_clock_probe.py: how many launches a gated stream queues, tiny kernels pinned or not;
#   2. KernelBench level 1, the reference as its own candidate, for KB_BUDGET s (lab/gpu/gpu_kernelbench.py);
#   3. the substitutions of lab/gpu/gpu_validate.py for VALIDATE_BUDGET s: extract -> verify -> project
#      (the a-priori estimate) -> validate (the measurement).
# PROBE=0 skips step 1; VALIDATE_ONLY names the substitutions of step 3 (default: all, in order).
# Writes under $OUT: gated_clock_probe.json, kernelbench_l1.json(.log), validation.json, loop.json,
# gpu_validate.log, runs-*.tar.gz.
set -u
source lab/gpu/gpu_setup.sh || exit 1
export HEADROOM_KERNELBENCH=$PWD/.kb
if [ "${PROBE:-1}" != 0 ]; then
    timeout 60 python3 lab/probes/gated_clock_probe.py --out "$OUT" --kinds add_small,rmsnorm --pin 0,1 --rounds 8 \
        2>&1 | tail -6
fi
timeout $(( ${KB_BUDGET:-150} + 40 )) python3 lab/gpu/gpu_kernelbench.py --out "$OUT" --groups level1 \
    --only ${KB_ONLY:-1 4 9 19 23 26 33 40 47 50 54 88 95 97} --budget "${KB_BUDGET:-150}" 2>&1 \
    | grep -E "<- reference|done:" | tail -16
timeout $(( ${VALIDATE_BUDGET:-330} + 15 )) python3 lab/gpu/gpu_validate.py --out "$OUT" \
    --budget "${VALIDATE_BUDGET:-330}" ${VALIDATE_ONLY:+--only $VALIDATE_ONLY} 2>&1 | grep -E "^== |: pass|: fail|: inconclusive" | tail -30
