"""`dclr --help` and the help of every command group stay light (issue 36): they import neither
torch nor transformers nor matplotlib, so the help answers in a fraction of a second. The command
line is dclr's with the lab's commands (`report`, `experiment`, `runs`), as the README installs it:
`app_with_lab` returns the app its entry point extended, or extends it in a checkout on PYTHONPATH."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "matplotlib", "sentence_transformers")
PROBE = f"""
import json, sys
from typer.testing import CliRunner
from dclr_lab.cli import app_with_lab
app = app_with_lab()
result = CliRunner().invoke(app, sys.argv[1:])
loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(json.dumps({{"exit": result.exit_code, "loaded": loaded}}))
"""


@pytest.mark.parametrize("args", [["--help"], ["report", "--help"], ["serve", "--help"],
                                  ["train", "--help"], ["experiment", "--help"],
                                  ["runs", "--help"]])  # fmt: skip
def test_help_imports_no_heavy_library(args):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit"] == 0
    assert result["loaded"] == [], f"dclr {' '.join(args)} imported {result['loaded']}"


def test_run_environment_does_not_import_sentence_transformers():
    """env.json records sentence-transformers' version from its metadata: importing it costs a
    training run ~280 MB (issue 47 point 3), and a run needs it only when it exports."""
    probe = (
        "import json, sys\n"
        "from importlib.metadata import version\n"
        "from dclr.driver import environment\n"
        "env = environment()\n"
        "print(json.dumps([env['sentence_transformers'], version('sentence-transformers'),\n"
        "                  'sentence_transformers' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    recorded, installed, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert recorded == installed
    assert not imported
