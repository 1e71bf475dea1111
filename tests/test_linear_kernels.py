"""benchmarks/linear_kernels.py: a run on kernels limited to a smaller instruction set is named
as emulated and is never recorded as that CPU kind's policy."""

import json
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


def test_the_table_names_the_sizes_within_noise_of_the_criterion():
    report = {
        "cpu": "AMD EPYC", "hardware_key": "AuthenticAMD-AVX512", "cpu_model": "family 25 model 17",
        "torch": "2.13.0", "load_start": [1.0], "load_end": [1.0], "layers": [],
        "thread_scaling": [
            {"texts": 1, "tokens": 12, "ms_1t": 7.0, "ms_2t": 5.4, "speedup_2t": 1.31,
             "speedup_2t_ci95": [1.27, 1.35]},
            {"texts": 2, "tokens": 25, "ms_1t": 11.0, "ms_2t": 7.7, "speedup_2t": 1.43,
             "speedup_2t_ci95": [1.34, 1.52]},
        ],
    }  # fmt: skip
    text = linear_kernels.markdown(report)
    assert "from 25 tokens" in text and "| 1.31× | 1.27–1.35× |" in text
    assert "Within the noise of 1.33× (its 95 % interval holds it): 12 tokens." in text
    report["thread_scaling"][0]["speedup_2t_ci95"] = [1.29, 1.32]
    assert "Within the noise" not in linear_kernels.markdown(report)
    del report["thread_scaling"][0]["speedup_2t_ci95"]  # a table recorded before the interval
    assert "| 1.31× | – |" in linear_kernels.markdown(report)


def test_pooled_runs_show_each_runs_speedup():
    row = {"texts": 2, "tokens": 25, "ms_1t": 11.0, "ms_2t": 7.9, "speedup_2t": 1.39,
           "speedup_2t_ci95": [1.3, 1.48], "speedup_2t_runs": [1.353, 1.41, 1.42]}  # fmt: skip
    report = {"cpu": "AMD EPYC", "hardware_key": "AuthenticAMD-AVX512", "torch": "2.13.0",
              "load_start": [1.0], "load_end": [1.0], "layers": [], "thread_scaling": [row]}  # fmt: skip
    text = linear_kernels.markdown(report)
    assert "3 runs, each in a fresh process" in text and "per run |" in text
    assert "| 1.39× | 1.3–1.48× | 1.35×, 1.41×, 1.42× |" in text


def test_a_kept_run_is_rendered_again_without_measuring(monkeypatch, tmp_path):
    kept = tmp_path / "linear_kernels@X.json"
    first = {  # as the first emulated run was kept: its limits under "emulated"
        "cpu": "AMD EPYC", "hardware_key": "AuthenticAMD-AVX2", "cpu_model": "family 26 model 2",
        "torch": "2.13.0", "load_start": [1.0], "load_end": [1.0], "layers": [],
        "emulated": {"env": {"ONEDNN_MAX_CPU_ISA": "AVX2"}},
    }  # fmt: skip
    kept.write_text(json.dumps(first))
    monkeypatch.setattr(sys, "argv", ["linear_kernels.py", "--render", str(kept)])
    monkeypatch.setattr(linear_kernels, "layers", lambda: pytest.fail("measured"))
    linear_kernels.main()
    table = kept.with_suffix(".md").read_text()
    assert "Emulated: kernels limited by ONEDNN_MAX_CPU_ISA=AVX2 on a family 26 model 2" in table
