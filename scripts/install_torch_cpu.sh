#!/usr/bin/env bash
# Install torch 2.13.0+cpu into the environment of the python given as $1 (scripts/quickstart.sh).
set -euo pipefail
PY="$1"
# The CPU build of torch (the version CI tests): a plain `pip install torch` from PyPI is the
# multi-GB CUDA build. `+cpu` wheels come from PyTorch's CPU index, or from a wheel folder or index
# pip is configured with. The index is probed first (3 s), so an offline machine does not wait
# through pip's retries (and print a warning for each) before falling back.
TORCH="torch==2.13.0+cpu"
TORCH_INDEX="https://download.pytorch.org/whl/cpu"
if "$PY" -c 'import torch, sys; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
    echo "torch 2.13.0+cpu: already installed"
elif "$PY" -c "import urllib.request as u; u.urlopen('$TORCH_INDEX/torch/', timeout=3)" 2>/dev/null; then
    echo "installing $TORCH from PyTorch's CPU index (~200 MB: 1-2 min the first time; pip is quiet until it is done)"
    "$PY" -m pip install -q "$TORCH" --extra-index-url "$TORCH_INDEX"
else
    # Offline or behind a mirror: normal, not an error. pip's own indexes or wheel folder serve it.
    echo "installing $TORCH from pip's configured indexes (PyTorch's CPU index is not used from this machine; 1-2 min the first time; pip is quiet until it is done)"
    "$PY" -m pip install -q "$TORCH" || {
        echo "no $TORCH there either: install the CPU build of torch 2.13.0 into the environment of $PY by hand" >&2
        exit 1
    }
fi
