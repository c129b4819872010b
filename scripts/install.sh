#!/usr/bin/env bash
# Create the virtual environment and install what this machine needs.
#   CPU machine:  torch 2.13 (CPU build), fbgemm-gpu-cpu 1.8 (must match torch's minor version),
#                 torchrec 1.8 with --no-deps (its metadata pulls the CUDA fbgemm-gpu, which
#                 replaces fbgemm-gpu-cpu and breaks the import), plus torchrec's real needs.
#   CUDA machine: the same torch pin and the CUDA fbgemm-gpu of the same minor version.
# HolisticTraceAnalysis 0.5.0 is installed --no-deps (it declares jupyterlab) for the cross-check test.
set -euo pipefail
VENV=${1:-.venv}
PY=${PYTHON:-python3}
TORCH=${HEADROOM_TORCH:-torch==2.13.0}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  FBGEMM=${HEADROOM_FBGEMM:-fbgemm-gpu==1.8.0}
else
  FBGEMM=${HEADROOM_FBGEMM:-fbgemm-gpu-cpu==1.8.0}
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install "$TORCH" "$FBGEMM"
# The distribution was called `headroom` before it became kernel-headroom: drop an old editable install.
"$VENV/bin/python" -m pip --disable-pip-version-check -q uninstall -y headroom >/dev/null 2>&1 || true
# The core plus every extra but recsys (its torchrec and fbgemm pins are the two lines around this one);
# fleet is Ray, for the --engine ray tests (tests/test_fleet.py).
pip install -e ".[profile,verify,test,fleet]"
pip install --no-deps torchrec==1.8.0 holistictraceanalysis==0.5.0
pip install tensordict torchmetrics tqdm pyre-extensions iopath plotly networkx psutil pyyaml
"$VENV/bin/python" - <<'PY'
import torch, torchrec, transformers, msgspec, ray
print(f"installed: torch {torch.__version__}, torchrec {torchrec.__version__}, transformers {transformers.__version__}, "
      f"ray {ray.__version__}")
PY
