#!/usr/bin/env bash
# Makes the folders a GPU-machine command carries (the image has torch and transformers, not headroom's
# other dependencies; it cannot download): .whl/ (msgspec, google-re2, polars and its runtime as an xz
# tarball of the unpacked wheel, 33 MB instead of 54), .whl-rec/ (torchrec and the CPU fbgemm, for the
# recommender workloads) and .kb/ (a copy of ../shared/kernelbench). lab/gpu/gpu_setup.sh installs them
# there. Run here, from the repository root. A command carries at most 64 MiB with the repository's files
# (28 MB): .whl and .kb fit beside it (35 + 0.5 MB), .whl-rec (7 MB) on top of them does not — carry it
# instead of .kb for recommender work. The folders are ignored through .git/info/exclude.
set -euo pipefail
cd "$(dirname "$0")/../.."
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"; }
mkdir -p .git/info && touch .git/info/exclude
for d in .whl/ .whl-rec/ .kb/; do grep -qxF "$d" .git/info/exclude || echo "$d" >> .git/info/exclude; done
rm -rf .whl .whl-rec .kb
get -d .whl msgspec google-re2 polars==2.1.0 importlib_metadata orjson portalocker lazy_loader
tmp=$(mktemp -d)
get -d "$tmp" polars-runtime-32==2.1.0
(mkdir "$tmp/site" && cd "$tmp/site" && python3 -m zipfile -e "$tmp"/polars_runtime_32-*.whl . \
    && tar -cf - . | xz -6 -T2 > "$OLDPWD/.whl/prt.tar.xz")
rm -rf "$tmp"
get -d .whl-rec torchrec==1.6.1 fbgemm-gpu-cpu==1.6.0 tensordict==0.11.0 iopath pyvers==0.2.2
cp -r ../shared/kernelbench .kb
du -sh .whl .whl-rec .kb
