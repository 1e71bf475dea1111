"""Up-front time estimates (`dclr.estimate`) and what a training step is counted as."""

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
