#!/usr/bin/env bash
# One line on the GPU machine, after every .ray-partNN/ was copied into /var/tmp/ray:
#   bash lab/gpu/gpu_fleet.sh
# headroom's wheels (lab/gpu/gpu_setup.sh), KernelBench from .kb, then lab/gpu/gpu_fleet.py within 300 s.
source lab/gpu/gpu_setup.sh || exit 1
export HEADROOM_KERNELBENCH=$PWD/.kb
exec timeout -k 10 300 python3 lab/gpu/gpu_fleet.py --out "$OUT" --budget 270 "$@"
