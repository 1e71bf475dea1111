"""Noise sweep: the measured quantities on fixed views, and a tiny end-to-end run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
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


def hand_loss(z1: torch.Tensor, z2: torch.Tensor, noise: torch.Tensor | None, tau: float):
    """-mean_i log(e^{s(z1_i, z2_i)/tau} / (sum_j e^{s(z1_i, z2_j)/tau} + sum_k e^{s(z1_i, n_k)/tau}))."""
    c = lambda a, b: F.normalize(a, dim=1) @ F.normalize(b, dim=1).T  # noqa: E731
    num = (c(z1, z2).diagonal() / tau).exp()
    den = (c(z1, z2) / tau).exp().sum(1)
    if noise is not None:
        den = den + (c(z1, noise) / tau).exp().sum(1)
    return -(num / den).log().mean()


def hand_grad(z1, z2, noise, tau) -> torch.Tensor:
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    ga, gb = torch.autograd.grad(hand_loss(a, b, noise, tau), (a, b))
    return torch.cat([ga.flatten(), gb.flatten()])


def test_each_quantity_is_its_hand_formula() -> None:
    """Loss share, delta L, grad share and optimized-vs-random recomputed by hand from the same
    draws (`noise_negatives` with the sweep's seed), the cosines written out."""
    from dclr.losses.dclr import noise_negatives

    z1, z2 = views()
    sigma, beta, t, tau, seed = 0.1, 1.0, 4, 0.05, 3
    m = measure(z1, z2, sigma, beta, t, ratio=0.5, tau=tau, seed=seed)
    k = 3  # ratio 0.5 of a batch of 6

    def draw(steps: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return noise_negatives(z1, z2, k, sigma, steps, beta, tau, generator=gen)

    random, optimized = draw(0), draw(t)
    assert random.shape == optimized.shape == (k, z1.shape[1])
    c = lambda a, b: F.normalize(a, dim=1) @ F.normalize(b, dim=1).T  # noqa: E731
    noise_terms = (c(z1, optimized) / tau).exp().sum(1)
    batch_terms = (c(z1, z2) / tau).exp().sum(1)
    assert m["loss_share"] == pytest.approx(
        float((noise_terms / (noise_terms + batch_terms)).mean()), rel=1e-5
    )
    want_delta = float(hand_loss(z1, z2, optimized, tau) - hand_loss(z1, z2, None, tau))
    assert m["delta_loss"] == pytest.approx(want_delta, rel=1e-4)
    g_plain, g_opt, g_rand = (hand_grad(z1, z2, n, tau) for n in (None, optimized, random))
    assert m["grad_share"] == pytest.approx(
        float((g_opt - g_plain).norm() / g_opt.norm()), rel=1e-4
    )
    assert m["opt_vs_random"] == pytest.approx(
        float((g_opt - g_rand).norm() / g_opt.norm()), rel=1e-4
    )
    turn = torch.rad2deg(torch.arccos(F.cosine_similarity(random, optimized).clamp(-1, 1))).mean()
    assert m["angle_deg"] == pytest.approx(float(turn), rel=1e-5) and m["angle_deg"] > 1
    assert m["cos_anchor_random"] == pytest.approx(float(c(z1, random).mean()), abs=1e-6)
    assert m["cos_anchor_optimized"] == pytest.approx(float(c(z1, optimized).mean()), abs=1e-6)


def test_no_ascent_step_turns_nothing_and_changes_no_gradient() -> None:
    """t = 0: the optimized noise is the random draw itself."""
    z1, z2 = views()
    m = measure(z1, z2, 1.0, 1.0, 0, ratio=1.0, tau=0.05, seed=3)
    assert m["opt_vs_random"] == 0 and m["lu_optimized"] == m["lu_random"]
    assert m["cos_anchor_optimized"] == m["cos_anchor_random"] and m["angle_deg"] < 0.01
    assert m["grad_share"] > 0


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
