"""benchmarks/report_files.py: a report's provenance names the checkout's commit and the machine,
and is None field by field where something is missing (no git, no repository) instead of
failing the run; save_report writes both files whole and leaves no temporary file."""

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import report_files  # noqa: E402

from dclr import atomic  # noqa: E402
from dclr._meta import __version__  # noqa: E402


def test_provenance_names_this_checkout_and_machine():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    found = report_files.provenance()
    assert found["git_commit"] == head
    assert isinstance(found["uncommitted_changes"], bool)
    assert found["dclr"] == __version__ and found["torch"]
    from dclr.models.cpu_kind import recording_name

    assert found["cpu"] == recording_name()
    assert len(found["loadavg_start"]) == 3
    ended = report_files.finished(found)
    assert len(ended["loadavg_end"]) == 3 and ended["git_commit"] == head
    json.dumps(ended)  # what a report saves


def test_outside_a_repository_the_commit_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above
    found = report_files.provenance(tmp_path)
    assert found["git_commit"] is None and found["uncommitted_changes"] is None
    assert found["dclr"] == __version__  # the rest is still there


def test_without_git_or_when_it_hangs_nothing_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the PATH
    found = report_files.provenance()
    assert found["git_commit"] is None and found["uncommitted_changes"] is None

    def hangs(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], 10)

    monkeypatch.setattr(report_files.subprocess, "run", hangs)
    assert report_files.provenance()["git_commit"] is None

    def fails():
        raise OSError("no load average here")

    monkeypatch.setattr(report_files.os, "getloadavg", fails)
    monkeypatch.setattr("dclr.models.cpu_kind.recording_name", lambda: 1 / 0)
    found = report_files.provenance()
    assert found["loadavg_start"] is None and found["cpu"] is None
    assert report_files.finished(found)["loadavg_end"] is None


def test_a_copied_tree_without_git_still_gets_its_provenance(tmp_path):
    """gpu_check.py on a lent GPU machine: the tree copied without .git, dclr from src/."""
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(REPO_ROOT / "benchmarks" / "report_files.py", tmp_path / "benchmarks")
    code = "import json, report_files; print(json.dumps(report_files.provenance()))"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'benchmarks'}{os.pathsep}{REPO_ROOT / 'src'}",
           "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}  # fmt: skip
    env.pop("GIT_DIR", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["git_commit"] is None and found["dclr"] == __version__
    # scripts/device_gpu_check.sh passes the bundle's commit (scripts/device_bundle.py)
    env[report_files.SOURCE_COMMIT_ENV] = "abc123"
    env[report_files.SOURCE_DIRTY_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["git_commit"] == "abc123" and found["uncommitted_changes"] is True


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_a_rewritten_report_is_not_a_code_change(tmp_path, monkeypatch):
    """Every report after the first said "uncommitted_changes": true: the reports under
    benchmarks/results/ are tracked, and the check counted them as code."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    for name in ("src/dclr/x.py", "benchmarks/bench.py", "benchmarks/results/bench.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert report_files.provenance(tmp_path)["uncommitted_changes"] is False
    (tmp_path / "benchmarks/results/bench.json").write_text("2\n")  # a benchmark ran
    assert report_files.provenance(tmp_path)["uncommitted_changes"] is False
    (tmp_path / "benchmarks/bench.py").write_text("2\n")  # the benchmark changed
    assert report_files.provenance(tmp_path)["uncommitted_changes"] is True


def test_save_report_writes_both_files_whole_and_leaves_no_temp_file(tmp_path, capsys):
    out = tmp_path / "results" / "bench@kind.json"
    report_files.save_report(out, {"rows": [1]}, "| a |\n")
    report_files.save_report(out, {"rows": [2], "provenance": {"git_commit": None}}, "| b |\n")
    assert sorted(p.name for p in out.parent.iterdir()) == ["bench@kind.json", "bench@kind.md"]
    assert json.loads(out.read_text())["rows"] == [2]
    assert out.with_suffix(".md").read_text() == "| b |\n"
    assert "| b |" in capsys.readouterr().out

    # a write that fails (a full disk) keeps the report there whole and leaves no temp file;
    # a write in place would have truncated it
    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(atomic.os, "fsync", full_disk)
        with pytest.raises(OSError):
            report_files.save_report(out, {"rows": [3]}, "| c |\n")
    assert json.loads(out.read_text())["rows"] == [2]
    assert sorted(p.name for p in out.parent.iterdir()) == ["bench@kind.json", "bench@kind.md"]
