#!/usr/bin/env bash
# GPU benchmark and readiness check in <= 8 minutes on one GPU (benchmarks/gpu_check.py, issue 44):
# steady-state SimCSE/DCLR steps (MiniLM and a BERT-base shape, batch 64/512, fp32/bf16) against
# sentence-transformers' MNRL, encoding at fp32/fp16/bf16 against sentence-transformers, the STS
# evaluation's time, dclr serve under 32x1 and 8x64 clients, a 200-step DCLR MiniLM run with its
# STS table, and 20 losses against the CPU. `--device cpu --tiny` checks the harness on a CPU.
# Data: $DCLR_DATA_DIR,
# else ../shared/data. Python: $DCLR_PYTHON, else the venv's ($DCLR_VENV, else .venv, as
# scripts/quickstart.sh makes it) when there is one, else python3 — never whatever `python` is
# first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
export DCLR_DATA_DIR="${DCLR_DATA_DIR:-$(cd .. && pwd)/shared/data}"
export TQDM_DISABLE="${TQDM_DISABLE:-1}"
VENV="${DCLR_VENV:-.venv}"
if [ -n "${DCLR_PYTHON:-}" ]; then
    PY="$DCLR_PYTHON"
elif [ -x "$VENV/bin/python" ]; then
    PY="$VENV/bin/python"
else
    PY=python3
fi
# The serving part needs dclr serve's extra, which the quickstart's venv does not install: say so
# before the run rather than as that part's ModuleNotFoundError minutes later.
if ! "$PY" -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ('httpx', 'uvicorn', 'fastapi')))" 2>/dev/null; then
    echo "note: $PY lacks the serving part's packages (httpx, uvicorn, fastapi): that part will" \
        "fail; install them with: $PY -m pip install -e '.[serve]' httpx (or set DCLR_PYTHON)" >&2
fi
# SIGTERM at the limit (480 s; DCLR_GPU_CHECK_LIMIT): the report keeps every finished part and
# names the one cut short; SIGKILL 30 s later if it has not stopped
exec timeout -k 30 "${DCLR_GPU_CHECK_LIMIT:-480}" "$PY" benchmarks/gpu_check.py "$@"
