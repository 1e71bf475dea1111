"""benchmarks/int8_encode.py's OpenVINO peer (issue 38 item 6): sentence-transformers takes the
calibration dataset's four arguments together, and an environment without the backend gets the
command that builds one, in the report, instead of a traceback."""

import json
import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import int8_encode  # noqa: E402


def test_a_missing_backend_names_the_packages_and_the_venv_command():
    present = {"openvino", "nncf"}
    problem = int8_encode.openvino_backend_problem(installed=present.__contains__)
    assert problem is not None
    assert "needs optimum-intel, datasets" in problem
    assert int8_encode.OPENVINO_VENV in problem
    assert "scripts/peer_venvs.sh" in int8_encode.OPENVINO_VENV
    script = (REPO_ROOT / "scripts" / "peer_venvs.sh").read_text()
    # an unpinned torch is the CUDA build: each venv's pip command names the CPU one
    assert 'TORCH="torch==2.13.0"' in script and script.count('install -q "$TORCH"') == 2


def test_a_torchvision_that_does_not_load_is_named_with_its_fix():
    def everything(name: str) -> bool:
        return True

    problem = int8_encode.openvino_backend_problem(everything, torchvision_loads=lambda: False)
    assert problem is not None and "pip uninstall -y torchvision" in problem
    assert int8_encode.openvino_backend_problem(everything, torchvision_loads=lambda: True) is None
    absent = set(int8_encode.OPENVINO_PACKAGES).__contains__  # no torchvision: nothing to load
    assert int8_encode.openvino_backend_problem(absent, torchvision_loads=lambda: False) is None


def test_the_calibration_folder_is_what_optimum_intel_loads(tmp_path):
    """All four dataset arguments or none (sentence-transformers >= 5 raises otherwise), read back
    with the call optimum-intel makes: load_dataset(name, name=config, split=split)[column]."""
    datasets = pytest.importorskip("datasets")
    texts = ["A man is playing a guitar.", 'She said "no".', "ünïcödé, and a comma"]
    kwargs = int8_encode.calibration_folder(texts, tmp_path / "calibration")
    assert set(kwargs) == {"dataset_name", "dataset_config_name", "dataset_split", "column_name"}
    assert all(value is not None for value in kwargs.values())
    loaded = datasets.load_dataset(
        kwargs["dataset_name"],
        name=kwargs["dataset_config_name"],
        split=kwargs["dataset_split"],
        cache_dir=str(tmp_path / "cache"),
    )
    assert loaded[kwargs["column_name"]] == texts


def test_without_the_backend_the_report_says_how_to_build_it(tmp_path, monkeypatch, data_dir):
    """The only variant asked for cannot be built here: the run still writes its report (it
    divided by the number of built variants before), with the reason and the venv command."""
    if int8_encode.openvino_backend_problem() is None:
        pytest.skip("the OpenVINO backend is installed in this environment")
    out = tmp_path / "int8"
    argv = ["int8_encode.py", "--data-dir", str(data_dir), "--variants", "st_openvino_int8"]
    argv += ["--n-sentences", "4", "--sts", "none", "--no-memory", "--work", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    int8_encode.main()
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["sentences_per_s"] == {}
    assert {"git_commit", "torch", "loadavg_start", "loadavg_end"} <= set(result["provenance"])
    reason = result["skipped"]["st_openvino_int8"]
    assert reason.startswith("ImportError: needs ") and int8_encode.OPENVINO_VENV in reason
    assert "not run: st_openvino_int8: ImportError: needs" in out.with_suffix(".md").read_text()


def test_quick_mode_shortens_the_run_but_a_given_value_wins():
    args = int8_encode.parse_args(["--quick", "--repeats", "3"])
    assert (args.n_sentences, args.sts, args.calibration_n) == (500, "dev", 100)
    assert args.repeats == 3
    full = int8_encode.parse_args([])
    assert (full.n_sentences, full.repeats, full.sts, full.calibration_n) == (4000, 3, "test", 300)


def test_fidelity_is_the_cosine_of_each_row_to_the_same_fp32_row():
    import numpy as np

    reference = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    vectors = np.array([[2.0, 0.0], [1.0, 1.0], [4.0, 3.0]])  # cosines 1, 1/sqrt(2), 24/25
    found = int8_encode.cosine_to(vectors, reference)
    assert found["mean"] == pytest.approx((1 + 2**-0.5 + 0.96) / 3)
    assert found["min"] == pytest.approx(2**-0.5)
    result = {
        "sts": {}, "speedup_vs_dclr_fp32_packed": {"a": 1.0}, "sentences_per_s": {"a": 10.0},
        "peak_rss_mib": {}, "cosine_to_dclr_fp32": {"a": found}, "skipped": {},
        "sentences": 3, "repeats": 1, "sts_mode": "none", "command": "python x",
    }  # fmt: skip
    assert "| a | 10 | 1.00 | — | 0.8890 / 0.7071 |" in int8_encode.render(result, ["a"])


def test_the_table_names_the_machine_its_load_and_an_emulation():
    """Every timing is read beside the CPU kind and the load; a run under ISA limits says it is
    emulated, on which host, and that fbgemm's rows are the host's own kernels."""
    result = {
        "sts": {}, "speedup_vs_dclr_fp32_packed": {"a": 1.0}, "sentences_per_s": {"a": 10.0},
        "peak_rss_mib": {}, "cosine_to_dclr_fp32": {}, "skipped": {}, "sentences": 3,
        "repeats": 1, "sts_mode": "none", "command": "python x", "cpu": "AMD EPYC, 2 cores",
        "hardware_key": "AuthenticAMD-AVX2", "cpu_model": "family 25 model 17",
        "load_start": [0.5, 1.0, 1.2], "load_end": [1.9, 1.3, 1.2],
        "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    }  # fmt: skip
    table = int8_encode.render(result, ["a"])
    assert "CPU: AMD EPYC, 2 cores (AuthenticAMD-AVX2, family 25 model 17)" in table
    assert "load average [0.5, 1.0, 1.2] at start, [1.9, 1.3, 1.2] at end" in table
    assert "Emulated: kernels limited by ONEDNN_MAX_CPU_ISA=AVX2 on a family 25 model 17" in table
    assert "fbgemm" in table
    plain = int8_encode.render({**result, "isa_limits": {}}, ["a"])
    assert "Emulated" not in plain and "fbgemm" not in plain


def test_the_sts_columns_are_each_variant_less_fp32():
    """Δ avg and the worst task's Δ are the variant's score minus dclr fp32's, by hand: int8
    scores 81.0 against 82.0 on average (-1.00), its worst task 76.5 against 79.0 (-2.50), and
    one task above fp32's (+0.50), which is not the worst."""
    fp32 = {"STS12": 79.0, "STS13": 85.0, "avg": 82.0}
    int8 = {"STS12": 76.5, "STS13": 85.5, "avg": 81.0}
    result = {
        "sts": {"dclr_fp32_packed": fp32, "dclr_int8_packed": int8},
        "speedup_vs_dclr_fp32_packed": {"dclr_fp32_packed": 1.0, "dclr_int8_packed": 2.5},
        "sentences_per_s": {"dclr_fp32_packed": 400.0, "dclr_int8_packed": 1000.0},
        "peak_rss_mib": {}, "cosine_to_dclr_fp32": {}, "skipped": {},
        "sentences": 3, "repeats": 1, "sts_mode": "test", "command": "python x",
    }  # fmt: skip
    table = int8_encode.render(result, ["dclr_fp32_packed", "dclr_int8_packed"])
    assert "| STS avg | Δ avg | STS12 | STS13 | worst Δ task |" in table
    assert (
        "| dclr_fp32_packed | 400 | 1.00 | — | — | 82.00 | +0.00 | 79.00 | 85.00 | +0.00 |" in table
    )
    assert (
        "| dclr_int8_packed | 1000 | 2.50 | — | — | 81.00 | -1.00 | 76.50 | 85.50 | -2.50 |"
        in table
    )
