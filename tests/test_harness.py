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


def _flaky_rendezvous(rank: int, world: int, init_file: str, marker: str) -> None:
    """Fails like gloo's connection set-up on the first attempt only; records what it saw."""
    from pathlib import Path

    seen = Path(marker)
    attempts = seen.read_text().splitlines() if seen.exists() else []
    seen.write_text("\n".join([*attempts, f"{init_file} {os.environ.get('GLOO_SOCKET_IFNAME')}"]))
    if not attempts:
        raise RuntimeError("Gloo connectFullMesh failed with [...] Connection closed by peer")


def _always_wrong(rank: int, world: int, init_file: str) -> None:
    raise ValueError("a wrong number")


def test_gloo_spawn_retries_a_failed_rendezvous_once_and_nothing_else(tmp_path):
    import pytest
    from helpers import spawn_gloo_ranks

    marker = tmp_path / "attempts.txt"
    spawn_gloo_ranks(_flaky_rendezvous, 1, tmp_path, str(marker))
    first, second = marker.read_text().splitlines()
    assert first.endswith("init-0 lo") and second.endswith("init-1 lo")  # a fresh init file
    with pytest.raises(AssertionError, match="a wrong number") as err:
        spawn_gloo_ranks(_always_wrong, 1, tmp_path)
    assert "first attempt" not in str(err.value)  # never retried
