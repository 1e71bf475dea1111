"""Why the MLP head protects the [CLS] setting from false negatives: a measurement (issue 23).

Trains SimCSE on all-MiniLM-L6-v2 for the dense experiment's budget (60 steps, batch 64, lr 3e-5,
the STS corpus) at paraphrase densities 0 and 0.5, in both settings of docs/results/cpu-scale/dense
([CLS] + SimCSE's train-only MLP head; mean pooling, no head), and every 10 steps measures on the
STS-B dev set, for each representation the run has:

* `backbone`: what is exported and evaluated ([CLS] before the head; or the mean-pooled vector);
* `head`: the MLP head's output, the vector the contrastive loss acts on ([CLS] setting only);

the mean cosine of gold paraphrase pairs (gold > 4, SimCSE's alignment pairs), the mean cosine of
2,000 random pairs (seeded), their gap, and the STS-B dev Spearman x 100 of that representation.

    python scripts/head_geometry.py [--seed 42] [--steps 60] [-o docs/results/cpu-scale/head-geometry]

Writes geometry.json (every row) and geometry.png (matplotlib: installed with the lab, `pip install
-e ./lab`, not with dclr); prints the table. One thread is enough.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from dclr.data.paths import resolve_data_dir
from dclr.data.sts import read_stsb
from dclr.driver import trainer_for
from dclr.evaluation.sts import ALIGN_MIN_SCORE, cosine_rows, spearman100
from dclr.recipe import load_config

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "cls_head": {"model.pooler": "cls", "model.mlp_head": True},
    "mean": {"model.pooler": "mean", "model.mlp_head": False},
}
DENSITIES = (0.0, 0.5)
RANDOM_PAIRS = 2000


def geometry(model: torch.nn.Module, pairs: object, rng_seed: int = 0) -> dict[str, float]:
    """Gold / random pair cosines and Spearman for the backbone (and head) representation."""
    model.eval()
    s1, s2, gold = pairs.sentences1, pairs.sentences2, pairs.scores  # type: ignore[attr-defined]
    a = model.encode(s1, batch_size=128)  # type: ignore[operator]
    b = model.encode(s2, batch_size=128)  # type: ignore[operator]
    views = {"backbone": (a, b)}
    head = getattr(model, "mlp_head", None)
    if head is not None:
        with torch.inference_mode():
            views["head"] = tuple(head(torch.from_numpy(x)).numpy() for x in (a, b))
    rng = np.random.default_rng(rng_seed)
    n = len(gold)
    i, j = rng.integers(0, n, RANDOM_PAIRS), rng.integers(0, n, RANDOM_PAIRS)
    out: dict[str, float] = {}
    for name, (x, y) in views.items():
        sims = cosine_rows(x, y)
        both = np.concatenate([x, y])
        rand = cosine_rows(both[i], both[n + j])
        out[f"{name}_gold_cos"] = float(sims[gold > ALIGN_MIN_SCORE].mean())
        out[f"{name}_random_cos"] = float(rand.mean())
        out[f"{name}_gap"] = out[f"{name}_gold_cos"] - out[f"{name}_random_cos"]
        out[f"{name}_stsb_dev"] = spearman100(sims, gold)
    out["metric"] = out["backbone_stsb_dev"]
    model.train()
    return out


def run(setting: str, density: float, seed: int, steps: int, data_dir: str) -> list[dict]:
    pairs = read_stsb(resolve_data_dir(data_dir), "dev")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(
            ROOT / "recipes" / "simcse_minilm_cpu.yaml",
            {**SETTINGS[setting], "data.paraphrase_density": density, "run.seed": seed,
             "optimisation.max_steps": steps, "run.eval_steps": 10, "run.test_eval": False,
             "data.data_dir": data_dir,
             "run.output_dir": str(Path(tmp) / "run")},
        )  # fmt: skip

        def evaluate(model: torch.nn.Module) -> dict[str, float]:
            values = geometry(model, pairs)
            rows.append({"step": len(rows) * 10, **values})
            return values

        trainer = trainer_for(config, evaluator=evaluate)
        evaluate(trainer.model)  # step 0: the starting model
        trainer.train()
    return [{"setting": setting, "density": density, "seed": seed, **r} for r in rows]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {0.0: "-", 0.5: "--"}
    for ax, metric, label in ((axes[0], "gap", "gold-pair cos − random-pair cos"),
                              (axes[1], "stsb_dev", "STS-B dev Spearman × 100")):  # fmt: skip
        for (setting, rep, color) in (("cls_head", "backbone", "#1f77b4"),
                                      ("cls_head", "head", "#ff7f0e"),
                                      ("mean", "backbone", "#d62728")):  # fmt: skip
            for density, style in styles.items():
                sel = [r for r in rows if r["setting"] == setting and r["density"] == density]
                if not sel:
                    continue
                name = {"cls_head": "[CLS]+head", "mean": "mean, no head"}[setting]
                ax.plot([r["step"] for r in sel], [r[f"{rep}_{metric}"] for r in sel], style,
                        color=color, label=f"{name}: {rep} (ρ = {density:g})")  # fmt: skip
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("what the loss sees (head) vs what is exported (backbone)", fontsize=10)
    axes[1].set_title("quality of each representation", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "-o", "--out", type=Path, default=ROOT / "docs/results/cpu-scale/head-geometry"
    )
    args = parser.parse_args()
    rows = []
    for setting in SETTINGS:
        for density in DENSITIES:
            rows += run(setting, density, args.seed, args.steps, args.data_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geometry.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, args.out / "geometry.png")
    keys = ["backbone_gold_cos", "backbone_random_cos", "backbone_gap", "backbone_stsb_dev",
            "head_gold_cos", "head_random_cos", "head_gap", "head_stsb_dev"]  # fmt: skip
    print("| setting | ρ | step | " + " | ".join(keys) + " |")
    for r in rows:
        if r["step"] in (0, args.steps):
            cells = [f"{r[k]:.3f}" if k in r else "—" for k in keys]
            print(
                f"| {r['setting']} | {r['density']:g} | {r['step']} | " + " | ".join(cells) + " |"
            )


if __name__ == "__main__":
    main()
