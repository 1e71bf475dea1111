"""`dclr audit`: run the false-negative audit (`dclr.evaluation.audit`) and write its report.

The audited batches come from `dclr.data.sampler.training_batches` with the given batch size,
seed and paraphrase densities, i.e. the first `steps` batches of a training run with the same
settings. Each scorer is loaded frozen (eval mode, no dropout); its calibrated phis
(`dclr.losses.calibration`) are computed on the plain corpus and audited with the grid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dclr.lab_api import (
    DEFAULT_PHIS,
    GoldIndex,
    Scorer,
    SentenceEncoder,
    audit,
    calibrate_phi,
    gold_paraphrase_pairs,
    load_corpus,
    parse_sources,
    resolve_data_dir,
    training_batches,
    write_text,
)

# Calibration rules reported for every scorer: rule label -> (mode, target).
CALIBRATIONS: dict[str, tuple[str, float]] = {
    "random_pairs q=0.001": ("random_pairs", 0.001),
    "random_pairs q=0.01": ("random_pairs", 0.01),
    "paraphrase_recall r=0.5": ("paraphrase_recall", 0.5),
}


CALIBRATION_MARKED = "random_pairs q=0.001"  # the calibration drawn as a cross on the PR curves


def run_audit(
    scorers: Sequence[Scorer],
    densities: Sequence[float] = (0.0, 0.25),
    data_dir: str | None = None,
    corpus: str = "sts",
    batch_size: int = 64,
    steps: int = 200,
    seed: int = 42,
    sources: str = "mrpc,stsb,sick",
    max_length: int = 32,
    phis: Sequence[float] = DEFAULT_PHIS,
    show_progress: bool = True,
) -> dict[str, Any]:
    """The audit's data: settings, per-sampler counts, per-scorer tables, curves, calibration."""
    root = resolve_data_dir(data_dir)
    base = load_corpus(corpus, root)
    batches = {}
    for rho in densities:
        lines, sampler = training_batches(base, batch_size, seed, rho, sources, str(root))
        steps_here = min(steps, sampler.steps_per_epoch)  # one epoch at most: no repeated batch
        batches[f"rho={rho:g}"] = [
            [lines[int(i)] for i in sampler.global_batch(s)] for s in range(steps_here)
        ]
    gold_pairs = gold_paraphrase_pairs(root, parse_sources(sources))
    embed: dict[str, Callable[[list[str]], np.ndarray]] = {}
    calibrated: dict[str, dict[str, float]] = {}
    for scorer in scorers:
        encoder = SentenceEncoder.from_pretrained(scorer.model, pooler=scorer.pooler, packing=True)
        encoder.requires_grad_(False)

        def fn(sentences: list[str], encoder: SentenceEncoder = encoder) -> np.ndarray:
            return encoder.encode(
                sentences, max_length=max_length, normalize=True, show_progress=show_progress
            )

        embed[scorer.label] = fn
        calibrated[scorer.label] = {
            rule: calibrate_phi(
                mode,
                target,
                encoder,
                base,
                [(p.first, p.second) for p in gold_pairs],
                max_length=max_length,
                seed=seed,
            )["phi"]
            for rule, (mode, target) in CALIBRATIONS.items()
        }
    result = audit(batches, GoldIndex(gold_pairs), embed, phis, calibrated)
    result["settings"] = {
        "corpus": corpus,
        "batch_size": batch_size,
        "steps": steps,
        "seed": seed,
        "sources": sources,
        "gold_pairs": len(gold_pairs),
        "max_length": max_length,
        "scorers": [vars(s) for s in scorers],
        "calibrated_phi": calibrated,
    }
    return result


# ---- report ------------------------------------------------------------------------------------
def _pct(value: float, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{100 * value:.{digits}f}"


def _table(rows: list[dict[str, Any]], lead: list[str] | None = None) -> list[str]:
    head = [*(lead or []), "φ", "dropped % of negatives", "precision %", "recall %"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            *(str(row[k]) for k in ("rule",) if lead),
            f"{row['phi']:.3f}",
            _pct(row["dropped_share"], 3),
            _pct(row["precision"]),
            _pct(row["recall"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(result: dict[str, Any], out: Path) -> Path:
    """out/audit.json, out/report.md and out/pr_curve.png; returns the Markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "audit.json", json.dumps(result, indent=1) + "\n")
    st = result["settings"]
    lines = [
        "# False-negative audit",
        "",
        f"Corpus `{st['corpus']}`, batch {st['batch_size']}, seed {st['seed']}, the first "
        f"{st['steps']} batches of each sampler (those a training run with the same settings "
        f"sees). Gold false negatives: {st['gold_pairs']} train-split paraphrase pairs "
        f"({st['sources']}) and exact duplicates after normalisation. Negatives are ordered "
        "pairs (i, j), i ≠ j, as in DCLR's logged `dropped_fraction`.",
        "",
        "| sampler | batches | negatives | gold false negatives | rate % |",
        "|---|---|---|---|---|",
    ]
    for name, s in result["samplers"].items():
        lines.append(
            f"| {name} | {s['batches']} | {s['negatives']} | {s['gold']} | {_pct(s['gold_rate'], 3)} |"
        )
    lines.append("")
    lines += ["## Calibrated φ per scorer", "", "| scorer | " + " | ".join(
        next(iter(st["calibrated_phi"].values())).keys()) + " |"]  # fmt: skip
    lines.append("|---|" + "---|" * len(next(iter(st["calibrated_phi"].values()))))
    for scorer, values in st["calibrated_phi"].items():
        lines.append(f"| {scorer} | " + " | ".join(f"{v:.3f}" for v in values.values()) + " |")
    lines.append("")
    for name, s in result["samplers"].items():
        for scorer, entry in s["scorers"].items():
            lines += [f"## {name}, scorer {scorer}", ""]
            g, o = entry["cos_gold"], entry["cos_other"]
            if g:
                lines.append(
                    f"Scorer cosine, gold false negatives: median {g['p50']:.3f} (5–95 %: "
                    f"{g['p05']:.3f}–{g['p95']:.3f}); other negatives: median {o['p50']:.3f} "
                    f"(5–95 %: {o['p05']:.3f}–{o['p95']:.3f})."
                )
                lines.append("")
            lines += _table(entry["table"]) + [""]
            if entry["calibrated"]:
                lines += ["Calibrated φ:", ""] + _table(entry["calibrated"], ["rule"]) + [""]
    path = _plot(result, out / "pr_curve.png")
    lines += [f"![precision-recall of the dropped negatives]({path.name})", ""]
    md = out / "report.md"
    write_text(md, "\n".join(lines))
    return md


def _plot(result: dict[str, Any], path: Path) -> Path:
    from dclr_lab.plots import _pyplot, _save

    plt = _pyplot()
    samplers = list(result["samplers"])
    fig, axes = plt.subplots(1, len(samplers), figsize=(5.5 * len(samplers), 4.5), squeeze=False)
    for ax, name in zip(axes[0], samplers, strict=True):
        s = result["samplers"][name]
        for scorer, entry in s["scorers"].items():
            pts = [r for r in entry["curve"] if not math.isnan(r["recall"])]
            (line,) = ax.plot(
                [r["recall"] for r in pts], [r["precision"] for r in pts], label=scorer
            )
            for r in entry["table"]:
                if r["dropped"] and not math.isnan(r["recall"]) and r["phi"] in (0.7, 0.9):
                    ax.plot(r["recall"], r["precision"], "o", color=line.get_color())
                    ax.annotate(f"φ={r['phi']:g}", (r["recall"], r["precision"]), fontsize=7,
                                xytext=(3, -10), textcoords="offset points")  # fmt: skip
            for r in entry["calibrated"]:
                if r["rule"] == CALIBRATION_MARKED and r["dropped"] and not math.isnan(r["recall"]):
                    ax.plot(r["recall"], r["precision"], "x", markersize=9, mew=2,
                            color=line.get_color(), label=f"{scorer}: calibrated φ = {r['phi']:.2f}")  # fmt: skip
        ax.axhline(s["gold_rate"], color="grey", linestyle=":", label="random guess (gold rate)")
        ax.set_xlabel("recall of gold false negatives")
        ax.set_ylabel("precision of dropped negatives")
        ax.set_yscale("log")
        ax.set_xlim(0, 1)
        ax.set_title(f"{name}: {s['gold']} gold of {s['negatives']} negatives", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, path)
