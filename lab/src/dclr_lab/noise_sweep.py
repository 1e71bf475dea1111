"""`dclr experiment noise-sweep`: what DCLR's noise-based negatives contribute, over sigma and beta.

For a few training batches of the starting model (two dropout views z1, z2, as in step 0 of a
run), and each (sigma, beta), k = ratio * n noise vectors are drawn and pushed t times
(`dclr.losses.dclr.noise_negatives`, the training code itself). Measured, averaged over batches:

* `angle_deg`: how far the ascent turns each noise vector (its angle to the initial draw);
* `cos_anchor` (random / optimized): mean cosine of noise vectors to the anchors z1;
* `loss_share`: share of each row's softmax denominator held by noise terms;
* `delta_loss`: L(with noise) - L(without), paper form, no weighting;
* `grad_share`: ||dL_noise/dz - dL_plain/dz|| / ||dL_noise/dz||, the part of the gradient on the
  embeddings that the noise terms add (the encoder's gradient flows through dz);
* `opt_vs_random`: the same norm between optimized and random (t = 0) noise of the same draw;
  0 means the optimisation changes nothing the encoder sees.

Geometry, for reading the table: a draw from N(0, sigma^2 I_d) has norm ~ sigma * sqrt(d); each
step moves it by beta, so t steps turn it by at most ~ t * beta / (sigma * sqrt(d)) radians. At the
paper's sigma = 1, beta = 1e-3, t = 4 and d = 768 that is ~0.008 degrees.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dclr.lab_api import (
    SentenceEncoder,
    build_sampler,
    cosine_matrix,
    dclr_paper_loss,
    load_corpus,
    noise_negatives,
    non_uniformity_loss,
    write_text,
)

SIGMAS = (0.1, 1.0, 10.0)
BETAS = (1e-3, 1e-2, 1e-1, 1.0)
NOISE_SEED_STRIDE = 1_000_003  # as DCLRLoss: the noise generator of batch b is seed * S + b


def _grad(z1: torch.Tensor, z2: torch.Tensor, noise: torch.Tensor | None, tau: float) -> tuple:
    a, b = z1.detach().requires_grad_(True), z2.detach().requires_grad_(True)
    loss = dclr_paper_loss(a, b, noise, None, tau)
    ga, gb = torch.autograd.grad(loss, (a, b))
    return float(loss.detach()), torch.cat([ga.flatten(), gb.flatten()])


def measure(
    z1: torch.Tensor,
    z2: torch.Tensor,
    sigma: float,
    beta: float,
    steps: int,
    ratio: float,
    tau: float,
    seed: int,
) -> dict[str, float]:
    """The sweep's quantities for one batch of views (n, d) and one (sigma, beta)."""
    k = round(ratio * z1.shape[0])

    def draw(t: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return noise_negatives(z1, z2, k, sigma, t, beta, tau, generator=gen)

    random, optimized = draw(0), draw(steps)  # same initial draw
    cos_turn = F.cosine_similarity(random, optimized, dim=1).clamp(-1, 1)
    logits = cosine_matrix(z1, z2) / tau
    noise_logits = cosine_matrix(z1, optimized) / tau
    both = torch.cat([logits, noise_logits], dim=1)
    share = (torch.logsumexp(noise_logits, 1) - torch.logsumexp(both, 1)).exp().mean()
    plain_loss, g_plain = _grad(z1, z2, None, tau)
    opt_loss, g_opt = _grad(z1, z2, optimized, tau)
    _, g_rand = _grad(z1, z2, random, tau)
    norm = float(g_opt.norm()) or 1.0
    return {
        "angle_deg": float(torch.rad2deg(torch.arccos(cos_turn)).mean()),
        "cos_anchor_random": float(cosine_matrix(z1, random).mean()),
        "cos_anchor_optimized": float(cosine_matrix(z1, optimized).mean()),
        "lu_random": float(non_uniformity_loss(z1, z2, random, tau)),
        "lu_optimized": float(non_uniformity_loss(z1, z2, optimized, tau)),
        "loss_share": float(share),
        "delta_loss": opt_loss - plain_loss,
        "grad_share": float((g_opt - g_plain).norm()) / norm,
        "opt_vs_random": float((g_opt - g_rand).norm()) / norm,
    }


def run_noise_sweep(
    model: str,
    pooler: str = "cls",
    mlp_head: bool = True,
    data_dir: str | None = None,
    corpus: str = "sts",
    batch_size: int = 64,
    batches: int = 4,
    seed: int = 42,
    sigmas: Sequence[float] = SIGMAS,
    betas: Sequence[float] = BETAS,
    steps: int = 4,
    ratio: float = 1.0,
    temperature: float = 0.05,
    max_length: int = 32,
) -> dict[str, Any]:
    """Rows (sigma, beta) of the measured quantities, mean over `batches` batches of the run."""
    lines = load_corpus(corpus, data_dir)
    sampler = build_sampler(lines, batch_size, seed)
    torch.manual_seed(seed)  # the MLP head's initialisation, as a training run
    encoder = SentenceEncoder.build(model, pooler=pooler, mlp_head=mlp_head).train()
    torch.manual_seed(seed + 1)  # the dropout stream of a run
    views = []
    with torch.no_grad():
        for b in range(batches):
            sents = [lines[int(i)] for i in sampler.global_batch(b)]
            feats = encoder.tokenize(sents, max_length=max_length)
            views.append((encoder(**feats), encoder(**feats)))
    rows = []
    for sigma in sigmas:
        for beta in betas:
            per = [
                measure(
                    z1, z2, sigma, beta, steps, ratio, temperature, seed * NOISE_SEED_STRIDE + b
                )
                for b, (z1, z2) in enumerate(views)
            ]
            rows.append(
                {
                    "sigma": sigma,
                    "beta": beta,
                    **{k: float(np.mean([p[k] for p in per])) for k in per[0]},
                }
            )
    d = views[0][0].shape[1]
    return {
        "settings": {
            "model": model,
            "pooler": pooler,
            "mlp_head": mlp_head,
            "batch_size": batch_size,
            "batches": batches,
            "seed": seed,
            "steps": steps,
            "ratio": ratio,
            "temperature": temperature,
            "dim": d,
        },
        "rows": rows,
    }


def write_report(result: dict[str, Any], out: Path) -> Path:
    """out/noise_sweep.json, report.md and noise_sweep.png; returns the Markdown path."""
    from dclr_lab.plots import _pyplot, _save

    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "noise_sweep.json", json.dumps(result, indent=1) + "\n")
    st = result["settings"]
    head = ["σ", "β", "angle turned (°)", "cos to anchors: random → optimized", "L_U: random → optimized",
            "noise share of denominator", "ΔL (noise − none)", "grad share", "optimized vs random"]  # fmt: skip
    lines = [
        "# Noise-based negatives: what they contribute",
        "",
        f"Model `{st['model']}` (pooler {st['pooler']}, MLP head {st['mlp_head']}, d = {st['dim']}) "
        f"at step 0 of a run: {st['batches']} batches of {st['batch_size']}, two dropout views; "
        f"k = {st['ratio']:g} × batch noise vectors, t = {st['steps']} ascent steps, "
        f"τ = τ_u = {st['temperature']:g}. Means over batches. The paper's setting is σ = 1, "
        "β = 1e-3. Upper bound on the turn: t·β/(σ·√d) rad = "
        f"{math.degrees(st['steps'] * 1e-3 / math.sqrt(st['dim'])):.4f}° at the paper's setting.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['sigma']:g} | {r['beta']:g} | {r['angle_deg']:.4g} | "
            f"{r['cos_anchor_random']:+.4f} → {r['cos_anchor_optimized']:+.4f} | "
            f"{r['lu_random']:.4f} → {r['lu_optimized']:.4f} | {r['loss_share']:.2e} | "
            f"{r['delta_loss']:+.2e} | {r['grad_share']:.2e} | {r['opt_vs_random']:.2e} |"
        )
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for sigma in sorted({r["sigma"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["sigma"] == sigma]
        betas = [r["beta"] for r in rows]
        axes[0].plot(
            betas, [max(r["angle_deg"], 1e-6) for r in rows], marker="o", label=f"σ = {sigma:g}"
        )
        axes[1].plot(
            betas,
            [max(r["opt_vs_random"], 1e-12) for r in rows],
            marker="o",
            label=f"σ = {sigma:g}",
        )
    for ax, ylabel in zip(axes, ("angle the ascent turns a noise vector (°)",
                                 "‖∇ optimized − ∇ random‖ / ‖∇‖ (embeddings)"), strict=True):  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axvline(1e-3, color="grey", linestyle="--", label="paper β")
        ax.set_xlabel("β (step size of each ascent step)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0].set_title("how far t = 4 steps move the noise", fontsize=10)
    axes[1].set_title("what the optimisation changes in the gradient", fontsize=10)
    path = _save(fig, out / "noise_sweep.png")
    lines += ["", f"![noise sweep]({path.name})", ""]
    md = out / "report.md"
    write_text(md, "\n".join(lines))
    return md
