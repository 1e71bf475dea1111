"""benchmarks/linear_kernels.py: a run on kernels limited to a smaller instruction set is named
as emulated and is never recorded as that CPU kind's policy."""

import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import linear_kernels  # noqa: E402


def test_record_is_refused_on_emulated_kernels(monkeypatch, capsys):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr(sys, "argv", ["linear_kernels.py", "--record"])
    monkeypatch.setattr(linear_kernels, "layers", lambda: pytest.fail("measured before refusing"))
    with pytest.raises(SystemExit) as stop:
        linear_kernels.main()
    assert stop.value.code == 2
    assert "ONEDNN_MAX_CPU_ISA" in capsys.readouterr().err


def test_an_emulated_table_says_so():
    report = {
        "cpu": "AMD EPYC", "hardware_key": "AuthenticAMD-AVX2", "cpu_model": "family 26 model 2",
        "torch": "2.13.0", "load_start": [1.0], "load_end": [1.0], "layers": [],
        "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2"},
    }  # fmt: skip
    text = linear_kernels.markdown(report)
    assert "Emulated: kernels limited by ATEN_CPU_CAPABILITY=avx2 on a family 26 model 2" in text
    assert "Emulated" not in linear_kernels.markdown({**report, "isa_limits": {}})
