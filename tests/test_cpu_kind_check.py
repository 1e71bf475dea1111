"""scripts/cpu_kind_check.py: the issue-46 tables for a CPU kind in one command; it names each
command, skips a missing peer venv with the reason, and refuses an emulated kind."""

import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import cpu_kind_check  # noqa: E402


def test_dry_run_names_every_step_and_skips_a_missing_peer(tmp_path, capsys, monkeypatch):
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)
    openvino = tmp_path / "python"
    openvino.write_text("")
    argv = ["--data-dir", "DATA", "--infinity", str(tmp_path / "none"), "--dry-run",
            "--openvino-python", str(openvino)]  # fmt: skip
    assert cpu_kind_check.main(argv) == 0
    out = capsys.readouterr().out
    assert "benchmarks/linear_kernels.py --data-dir DATA --record" in out
    assert f"skipped: serving against infinity-emb: no {tmp_path / 'none'}" in out
    assert f"PYTHONPATH={REPO_ROOT / 'src'} {openvino} benchmarks/int8_encode.py" in out
    assert "benchmarks/int8_rounding_speed.py" in out
    from dclr.models.cpu_kind import recording_name

    name = recording_name()  # the fault table too is this machine's, not the committed quiet one
    assert (
        f"benchmarks/serve_faults.py --quick --out benchmarks/results/serve_faults@{name}.json"
        in out
    )
    assert f"recorded as {name}," in out
    assert f"benchmarks/cpu_targets.py --name {name}" in out  # the verdicts, last
    assert out.count("flock /tmp/dclr-heavy.lock") == 5


def test_an_emulated_kind_is_refused(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    with pytest.raises(SystemExit) as stop:
        cpu_kind_check.main(["--dry-run"])
    assert stop.value.code == 2


def test_setup_peers_runs_first_and_a_failure_measures_nothing(tmp_path, capsys, monkeypatch):
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)
    assert cpu_kind_check.main(["--data-dir", "DATA", "--setup-peers", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.index("== peers' venvs: bash") < out.index("== kernels:")
    failing = tmp_path / "peer_venvs.sh"
    failing.write_text("echo building; exit 1\n")
    monkeypatch.setattr(cpu_kind_check, "SETUP", failing)
    ran = []
    monkeypatch.setattr(cpu_kind_check.subprocess, "call",
                        lambda cmd, **kw: ran.append(cmd) or (1 if cmd[0] == "bash" else 0))  # fmt: skip
    assert cpu_kind_check.main(["--data-dir", "DATA", "--setup-peers"]) == 1
    assert ran == [["bash", str(failing)]]  # no step was measured
    assert "nothing was measured" in capsys.readouterr().out


def test_peer_venvs_keeps_the_venvs_that_are_there(tmp_path):
    """The script builds only what is missing (a build is minutes of pip: not run here)."""
    import os
    import subprocess

    for venv, entry in (("infinity", "infinity_emb"), ("openvino", "python")):
        (tmp_path / venv / "bin").mkdir(parents=True)
        tool = tmp_path / venv / "bin" / entry
        tool.write_text("#!/bin/sh\nexit 0\n")  # `python -c "import optimum.intel"` passes
        tool.chmod(0o755)
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "peer_venvs.sh")],
                          env={**os.environ, "DCLR_PEER_VENVS": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("is there") == 2 and "building" not in done.stdout
