"""Same seed, same numbers: the first steps of the CPU recipes give, bit for bit, the per-step
losses recorded before the one-loop refactor (issue 14).

Each case trains a shipped recipe for a few steps through `dclr train` in a subprocess (see
scripts/check_trajectories.py, which also checks the whole 60-step runs) and compares every logged
loss and loss part by exact float equality with tests/training/trajectories/<case>-short.json.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch
from helpers import REPO_ROOT

pytestmark = pytest.mark.slow
CASES = ("simcse", "dclr", "consert", "dualcse_cross", "dclr_dropping")


def load_script():
    path = REPO_ROOT / "scripts" / "check_trajectories.py"
    spec = importlib.util.spec_from_file_location("check_trajectories", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", CASES)
def test_short_trajectory_is_bit_identical_to_the_recording(name, data_dir, minilm_path):
    script = load_script()
    case = next(c for c in script.CASES if c.name == name)
    path = script.recording_path(case, short=True)
    if case.per_kind and not path.is_file():
        pytest.skip(f"{name} is not recorded on this CPU kind ({path.name} is missing)")
    recorded = json.loads(path.read_text())
    if not script.comparable(recorded["torch"]):
        pytest.skip(
            f"recorded with torch {recorded['torch']}, not measured identical under "
            f"{torch.__version__} on this CPU kind; float results may differ"
        )
    got = script.run_case(case, short=True)
    assert script.compare(recorded["steps"], got) == []
    assert [r["step"] for r in got] == list(range(1, script.SHORT_STEPS + 1))


def test_compared_under_the_recordings_torch_or_one_measured_identical_on_this_cpu_kind(
    monkeypatch,
):
    script = load_script()
    monkeypatch.setattr(script, "hardware_key", lambda: "AuthenticAMD-AVX512")
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    assert script.comparable("2.13.0+cpu")  # measured identical on this kind
    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    assert not script.comparable("2.13.0+cpu")  # other dropout masks from the same seed
    assert script.comparable("2.6.0+cu124")  # a recording's own torch
    monkeypatch.setattr(torch, "__version__", "2.9.1+cu128")
    assert not script.comparable("2.13.0+cpu")  # differs in the last bits
    monkeypatch.setattr(torch, "__version__", "2.14.1")
    assert script.comparable("2.13.0+cpu")  # the release, whatever its build
    assert script.release("2.12.1+cu130") == "2.12.1"
    monkeypatch.setattr(script, "hardware_key", lambda: "GenuineIntel-AVX512")
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    assert not script.comparable("2.13.0+cpu")  # measured on another CPU kind only


def test_the_largest_difference_tells_last_bits_from_another_run():
    script = load_script()
    recorded = [{"step": 1, "loss": 0.25, "lr": 1e-5}, {"step": 2, "loss": 0.5, "lr": 2e-5}]
    assert script.largest_difference(recorded, recorded) == (0.0, 0.0)
    last_bits = [{"step": 1, "loss": 0.25, "lr": 1e-5}, {"step": 2, "loss": 0.5000005, "lr": 2e-5}]
    absolute, relative = script.largest_difference(recorded, last_bits)
    assert absolute == pytest.approx(5e-7) and relative == pytest.approx(1e-6)
    other_run = [{"step": 1, "loss": 0.3, "lr": 1e-5, "new_key": 1.0}]  # a step short, a new key
    absolute, relative = script.largest_difference(recorded, other_run)
    assert absolute == pytest.approx(0.05) and relative == pytest.approx(0.2)
    assert script.largest_difference([{"step": 1, "x": 0.0}], [{"step": 1, "x": 1e-9}])[1] == (
        float("inf")
    )


def test_the_dropping_case_drops_some_negatives_and_keeps_others():
    """`dclr_dropping` is there to pin DCLR's weighting (the `dclr` case drops none): its
    recording must hold steps whose dropped fraction lies strictly between 0 and 1."""
    script = load_script()
    case = next(c for c in script.CASES if c.name == "dclr_dropping")
    recordings = sorted(script.RECORDINGS.glob("dclr_dropping-short@*.json"))
    assert recordings, "no CPU kind has the dropping case recorded"
    assert case.per_kind and not (script.RECORDINGS / "dclr_dropping-short.json").exists()
    for path in recordings:
        fractions = [r["dropped_fraction"] for r in json.loads(path.read_text())["steps"]]
        assert len(fractions) == script.SHORT_STEPS
        assert all(0 < f < 1 for f in fractions), (path.name, fractions)
