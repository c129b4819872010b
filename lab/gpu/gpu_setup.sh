# Sourced at the start of a GPU-machine command: the carried wheels (.whl/, and .whl-rec/ when carried:
# torchrec and the CPU fbgemm for the recommender workloads) installed into $HEADROOM_SITE (default
# /tmp/site). Without .whl/ the site an earlier command of the same machine installed is used as it is, so
# a command that carries something else (a part of a large wheel) can still run headroom:
# HEADROOM_SITE=/var/tmp/site survives between the commands of one machine.
# polars' runtime travels as an xz tarball of the unpacked wheel (33 MB instead of 54 MB).
HEADROOM_SITE=${HEADROOM_SITE:-/tmp/site}
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HEADROOM_SITE" .whl/*.whl \
        $(ls .whl-rec/*.whl 2>/dev/null) || return 1
    tar -C "$HEADROOM_SITE" -xJf .whl/prt.tar.xz || return 1
elif [ ! -d "$HEADROOM_SITE/polars" ]; then
    echo "gpu_setup: no .whl/ carried and no site at $HEADROOM_SITE" >&2; return 1
fi
export PYTHONPATH=$HEADROOM_SITE:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
