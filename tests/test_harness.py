"""The test suite itself: its fixtures work however pytest is run (issue 38 item 5)."""

import os
import subprocess
import sys

from helpers import REPO_ROOT


def test_artifacts_gives_a_writable_folder(artifacts):
    (artifacts / "probe.txt").write_text("ok")
    assert (artifacts / "probe.txt").read_text() == "ok"


def test_the_artifacts_fixture_works_without_the_cache_plugin(tmp_path):
    """`-p no:cacheprovider` (scripts/test_older_sentence_transformers.sh runs so) removes
    `config.cache`; the web page test's artifacts fixture errored there."""
    env = {k: v for k, v in os.environ.items() if k != "DCLR_TEST_ARTIFACTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'inner'}",
         "tests/test_harness.py::test_artifacts_gives_a_writable_folder"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (tmp_path / "inner" / "dclr-artifacts" / "probe.txt").is_file()
