"""Up-front time estimates (`dclr.estimate`) and what a training step is counted as."""

import json
from dataclasses import dataclass

import pytest
import torch

from dclr import estimate as est
from dclr.training.loop import _texts_of


def test_a_first_cpu_run_gets_the_rough_prior_then_the_measured_speed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cpu = torch.device("cpu")
    flops = 1e12
    first = est.estimate("encode", flops, cpu)
    threads = torch.get_num_threads()
    assert first is not None and not first.measured
    assert first.seconds == pytest.approx(flops / (est.CPU_PRIOR_FLOPS_PER_THREAD * threads))
    assert "rough" in first.text()
    est.record("encode", flops, 10.0, cpu)  # measured: 1e-11 s per FLOP
    assert est.estimate("encode", 2e12, cpu) == est.Estimate(20.0, measured=True)
    est.record("encode", flops, 30.0, cpu)  # the mean with the last: 2e-11
    assert est.estimate("encode", 1e12, cpu).seconds == pytest.approx(20.0)
    assert est.estimate("train:dclr", flops, cpu).measured is False  # another kind of work
    assert est.estimate("encode", flops, torch.device("cuda")) is None  # never measured there
    assert est.Estimate(150.0, True).text() == "~2.5 min"


def test_flops_count_the_linear_weights_per_token():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    assert est.linear_weights(model) == 4 * 8 + 8 * 2
    assert est.work_flops("train", 48, 10) == 6 * 48 * 10


@dataclass
class Triple:
    premise: str
    entailment: str
    contradiction: str
    label: int = 0


def test_a_step_forwards_two_views_of_a_sentence_and_every_text_of_a_row():
    assert _texts_of("a dog") == ["a dog", "a dog"]
    assert _texts_of(("a", "b")) == ["a", "b"]
    assert _texts_of(Triple("p", "e", "c")) == ["p", "e", "c"]
    assert _texts_of(3) == []


def test_a_small_work_measurement_does_not_move_a_big_works_estimate(tmp_path, monkeypatch):
    """Issue 47 point 8: small work pays fixed costs per FLOP that big work does not (a 3-step
    run's evaluation, a tiny model's test run); each size keeps its own measurements."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cpu = torch.device("cpu")
    est.record("encode", 1e13, 100.0, cpu)  # big: 1e-11 s per FLOP
    est.record("encode", 1e9, 10.0, cpu)  # small, mostly overhead: 1e-8 s per FLOP
    assert est.estimate("encode", 1e13, cpu).seconds == pytest.approx(100.0)
    assert est.estimate("encode", 1e9, cpu).seconds == pytest.approx(10.0)
    assert est.estimate("encode", 2e13, cpu).seconds == pytest.approx(200.0)  # the nearest size


def test_one_slow_run_does_not_move_the_estimate(tmp_path, monkeypatch):
    """The median of the recent measurements: one run on a busy machine is an outlier."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cpu = torch.device("cpu")
    for seconds in (10.0, 11.0, 9.0, 100.0, 10.0):
        est.record("train:dclr", 1e12, seconds, cpu)
    assert est.estimate("train:dclr", 1e12, cpu).seconds == pytest.approx(10.0)
    for _ in range(est.RECENT):  # the machine really got slower: the estimate follows
        est.record("train:dclr", 1e12, 40.0, cpu)
    assert est.estimate("train:dclr", 1e12, cpu).seconds == pytest.approx(40.0)


def test_a_cache_file_of_the_old_format_is_read_as_no_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cpu = torch.device("cpu")
    est._store().parent.mkdir(parents=True, exist_ok=True)
    est._store().write_text(json.dumps({est.machine_key(cpu, "encode"): 1e-05}))
    assert est.estimate("encode", 1e12, cpu).measured is False
    est.record("encode", 1e12, 10.0, cpu)
    assert est.estimate("encode", 1e12, cpu).seconds == pytest.approx(10.0)
