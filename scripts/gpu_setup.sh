# Sourced at the start of a GPU-machine command: the carried wheels (.whl/, and .whl-rec/ when carried:
# torchrec and the CPU fbgemm for the recommender workloads) installed into /tmp/site.
# polars' runtime travels as an xz tarball of the unpacked wheel (33 MB instead of 54 MB).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    $(ls .whl-rec/*.whl 2>/dev/null) || return 1
tar -C /tmp/site -xJf .whl/prt.tar.xz || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
