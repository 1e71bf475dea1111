#!/usr/bin/env bash
# Rehearse the device run here, on the CPU, under the device image's versions: a venv of the
# image's Python (3.12) with its torch 2.11.0, transformers 5.17.0, sentence-transformers 6.0.1,
# huggingface_hub 1.33.0 and the other packages dclr reads that the image holds
# (/work/.library/device/KINDS.md), and nothing of the serve extra (the image has none of it but
# uvloop and h11). Then scripts/device_bundle.py and scripts/device_gpu_check.sh --device cpu --tiny
# in a clean clone, as the device would run them. It caught the serving part failing there at
# `import uvicorn` (now carried as wheels in the bundle). What travels is the working tree, as the
# device tool sends it: tracked files and untracked ones git does not ignore.
#
#   bash scripts/device_image_check.sh [VENV]     # VENV default ~/venvs/gpuimage; ~5.5 GB, ~2 min
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$HOME/venvs/gpuimage}"
# the first Python 3.12 that runs (a pyenv shim can exist and refuse: "command exists in these
# Python versions")
python312="${PYTHON312:-}"
if [ -z "$python312" ]; then
    for candidate in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3"; do
        if "$candidate" -c "" 2>/dev/null; then python312="$candidate"; break; fi
    done
fi
[ -n "$python312" ] || { echo "no Python 3.12 that runs: set PYTHON312" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
    "$python312" -m venv "$venv"
    "$venv/bin/pip" install -q torch==2.11.0 transformers==5.17.0 sentence-transformers==6.0.1 \
        huggingface_hub==1.33.0 accelerate numpy scipy typer rich pyyaml safetensors tensorboard \
        scikit-learn uvloop h11 httpx anyio click annotated-doc pyarrow psutil
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/repo"
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work/repo"
cd "$work/repo"
python3 scripts/device_bundle.py --data-dir "${DCLR_DATA_DIR:-$root/../shared/data}"
mkdir "$work/out"
env PATH="$venv/bin:/usr/bin:/bin" OUT="$work/out" bash scripts/device_gpu_check.sh --device cpu --tiny
echo "device rehearsal passed; its files for \$OUT: $(ls "$work/out" | tr "\n" " ")"
