#!/usr/bin/env bash
# One line on the GPU machine, after every .ray-partNN/ was copied into /var/tmp/ray:
#   bash scripts/gpu_fleet.sh
# headroom's wheels (scripts/gpu_setup.sh), KernelBench from .kb, then scripts/gpu_fleet.py within 300 s.
source scripts/gpu_setup.sh || exit 1
export HEADROOM_KERNELBENCH=$PWD/.kb
exec timeout -k 10 300 python3 scripts/gpu_fleet.py --out "$OUT" --budget 270 "$@"
