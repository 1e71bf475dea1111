"""benchmarks/gpu_check.sh: the GPU readiness check runs end to end on a CPU (`--device cpu
--tiny`), and its trajectory comparison fails outside the stated tolerance (issue 27)."""

import json
import os
import subprocess
import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def test_the_trajectory_check_fails_outside_its_tolerance():
    cpu = [0.5, 0.25, 0.125]
    assert gpu_check.compare(cpu, cpu)["passed"]
    near = [x * (1 + 0.5 * gpu_check.TOLERANCE) for x in cpu]
    assert gpu_check.compare(near, cpu)["passed"]
    off = [0.5, 0.25, 0.125 * (1 + 2 * gpu_check.TOLERANCE)]
    result = gpu_check.compare(off, cpu)
    assert not result["passed"] and result["max_relative_difference"] > gpu_check.TOLERANCE


def test_the_script_runs_the_python_it_is_given_not_the_one_on_path(tmp_path):
    """Issue 38 item 5: the script ran `python` from PATH, so its test failed unless the venv
    was activated. A `python` and `python3` that fail come first on PATH here; $DCLR_PYTHON
    (this interpreter) is the one run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "python3"):
        shim = bin_dir / name
        shim.write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 3\n")
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "DCLR_PYTHON": sys.executable, "DCLR_VENV": str(tmp_path / "no-venv")}  # fmt: skip
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--help"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--tiny" in done.stdout and "the wrong python" not in done.stderr


def test_the_harness_runs_on_a_cpu_with_a_tiny_model(tmp_path, data_dir):
    out = tmp_path / "check"
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny",
         "--out", str(out), "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "DCLR_PYTHON": sys.executable},  # the tests' own interpreter
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "check-tiny-cpu.json").read_text())
    cells = {(r["method"], r["batch"], r["precision"]): r for r in report["steps"]}
    assert len(cells) == 12
    assert all(cells[(m, b, "fp32")]["status"] == "ok" for m in ("simcse", "dclr")
               for b in (64, 256, 512))  # fmt: skip
    assert cells[("dclr", 512, "bf16")]["status"] == "not run (CPU runs fp32)"
    assert set(report["long_run"]["after"]) >= {"STS12", "SICKRelatedness", "avg"}
    assert report["trajectory"]["passed"] and report["trajectory"]["steps"] == 20
    assert "## Trajectory against the CPU" in (tmp_path / "check-tiny-cpu.md").read_text()
