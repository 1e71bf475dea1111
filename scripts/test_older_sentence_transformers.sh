#!/usr/bin/env bash
# export.py imports sentence-transformers' modules from the path of 6.x with a fallback for older
# releases (pyproject's floor is 5.2, the first that installs beside transformers 5; the floors
# are tested by scripts/test_dependency_floors.sh). This runs the export and model-card tests (save
# -> SentenceTransformer(path) -> identical embeddings, a Normalize module kept) with older
# releases in place of the installed one: each in a virtual environment that sees this
# environment's packages (torch, transformers, dclr) and installs only that sentence-transformers
# release (--no-deps). Not covered: an old release together with an old transformers (4.x),
# which dclr no longer allows. The GIST equivalence test must skip (not error) where
# GISTEmbedLoss has no contrast_anchors / contrast_positives (3.4.1).
set -euo pipefail
cd "$(dirname "$0")/.."
for release in ${DCLR_OLD_ST_RELEASES:-3.4.1 5.1.2}; do
    venv="${TMPDIR:-/tmp}/dclr-st-$release"
    python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --no-deps "sentence-transformers==$release"
    echo "sentence-transformers $release:"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/models/test_export.py tests/models/test_card.py \
        tests/models/test_normalize_pipeline.py \
        tests/st/test_gist_equivalence.py -rs
done
