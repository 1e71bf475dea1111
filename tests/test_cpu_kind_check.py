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
    assert "benchmarks/serve_faults.py --quick" in out
    assert out.count("flock /tmp/dclr-heavy.lock") == 3


def test_an_emulated_kind_is_refused(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    with pytest.raises(SystemExit) as stop:
        cpu_kind_check.main(["--dry-run"])
    assert stop.value.code == 2
