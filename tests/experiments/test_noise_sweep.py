"""Noise sweep: the measured quantities on fixed views, and a tiny end-to-end run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import make_tiny_model_dir, write_pseudo_corpus

from dclr_lab.noise_sweep import measure, run_noise_sweep, write_report


def views(n: int = 6, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    z1 = torch.randn(n, d, generator=gen)
    return z1, z1 + 0.1 * torch.randn(n, d, generator=gen)


def test_tiny_step_turns_noise_by_at_most_the_bound() -> None:
    z1, z2 = views()
    sigma, beta, t = 1.0, 1e-3, 4
    m = measure(z1, z2, sigma, beta, t, ratio=1.0, tau=0.05, seed=3)
    # t steps of length beta on a vector of norm ~ sigma * sqrt(d): angle <= ~ t*beta/|x| rad
    bound = math.degrees(t * beta / (sigma * math.sqrt(16) * 0.5))  # |x| >= half its mean norm
    assert 0 < m["angle_deg"] < bound
    assert m["lu_optimized"] >= m["lu_random"] - 1e-9  # ascent never lowers L_U here


def test_large_steps_move_noise_and_change_the_gradient() -> None:
    z1, z2 = views()
    small = measure(z1, z2, 1.0, 1e-3, 4, 1.0, 0.05, seed=3)
    large = measure(z1, z2, 0.1, 1.0, 4, 1.0, 0.05, seed=3)
    assert large["angle_deg"] > 100 * small["angle_deg"]
    assert large["opt_vs_random"] > small["opt_vs_random"]
    assert large["cos_anchor_optimized"] > large["cos_anchor_random"]  # harder negatives
    for m in (small, large):
        assert 0 < m["loss_share"] < 1 and m["delta_loss"] > 0  # extra negatives raise the loss


@pytest.mark.slow
def test_sweep_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    model = make_tiny_model_dir(tmp_path / "tiny")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    result = run_noise_sweep(
        str(model), "mean", False, corpus=str(corpus), batch_size=8, batches=2,
        sigmas=(1.0,), betas=(1e-3, 1.0),
    )  # fmt: skip
    assert [(r["sigma"], r["beta"]) for r in result["rows"]] == [(1.0, 1e-3), (1.0, 1.0)]
    md = write_report(result, tmp_path / "out")
    assert (
        tmp_path / "out" / "noise_sweep.png"
    ).stat().st_size > 0 and "| 1 | 0.001 |" in md.read_text()
