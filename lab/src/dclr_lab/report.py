"""`dclr report EXPERIMENT`: Markdown (and optional self-contained HTML) with tables and PNG plots.

Reads the runs an experiment registered in the SQLite index (scores from results.json, curves from
metrics.jsonl), aggregates seeds as mean ± sample std, and puts the paper's reported numbers
(`dclr_lab.paper`) next to ours. A report is a list of blocks rendered twice: Markdown with
PNG files beside it, and HTML with the PNGs inlined. This module is the builder (the heading, the
scale caveat, the sources); each experiment's own section lives with its runs in
`dclr_lab.studies`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dclr.lab_api import ConfigError, write_text
from dclr_lab import paper
from dclr_lab.registry import Registry
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE
from dclr_lab.specs import EXPERIMENTS
from dclr_lab.stats import RunData, load_runs
from dclr_lab.studies import (
    augmentations,
    consert,
    dclr_paper,
    dense,
    dualcse,
    retrieval_indomain,
    search_trials,
)

Section = Callable[[Report, list[RunData], Path], None]

# experiment -> its section of the report (after the description and the scale caveat).
SECTIONS: dict[str, Section] = {
    "main": dclr_paper.section_main,
    "ablation": dclr_paper.section_ablation,
    "uniformity": dclr_paper.section_uniformity,
    "few-shot": dclr_paper.section_few_shot,
    "sensitivity": dclr_paper.section_sensitivity,
    "augmentations": augmentations.section,
    "dense": dense.section_dense,
    "dup-corpus": dense.section_dup_corpus,
    "noise-mode": dense.section_noise_mode,
    "consert-augmentations": consert.section_augmentations,
    "consert-few-shot": consert.section_few_shot,
    "dualcse-inli": dualcse.section,
    "retrieval-indomain": retrieval_indomain.section,
}


def _sources(experiment: str) -> str:
    """Which paper's numbers and findings the report quotes, and where they are read from."""
    papers = paper.EXPERIMENT_PAPERS.get(experiment, ((paper.PAPER, paper.PAPER_TEXT),))
    cited = "; ".join(f"{name}, read from {text}" for name, text in papers)
    return (
        f"Paper numbers and findings: {cited} (text summaries; the PDFs were not available "
        "offline), each with its line. Kept in dclr_lab/paper.py."
    )


# What the CPU-scale runs of an experiment train on, for the report's caveat.
CPU_SCALE_DATA = {
    "dup-corpus": "duplicate-rich corpora built from train / dev splits",
    "consert-few-shot": "n texts of ConSERT's 89,192 STS texts",
    "dualcse-inli": "INLI train",
    "retrieval-indomain": "the paraphrase retrieval task's 8,388 unlabelled test passages",
}


SCORES = {
    "dualcse-inli": "RTE accuracy × 100 on INLI test of the final model.",
    "retrieval-indomain": "nDCG@10 and Recall@10 × 100 on the paraphrase retrieval task's "
    "test queries (trec_eval's definitions), final model.",
}


def build_report(
    experiment: str,
    registry: Registry,
    out_dir: Path,
    scale: str | None = None,
    html_out: bool = False,
) -> Path:
    """Write OUT_DIR/report.md (+ report.html) and the PNGs; returns the Markdown path."""
    if experiment not in SECTIONS and not experiment.startswith("search:"):
        raise ConfigError(f"unknown experiment {experiment!r}; choose from {', '.join(SECTIONS)}")
    runs, incomplete = load_runs(registry, experiment, scale)
    if not runs:
        raise ConfigError(
            f"no complete run of {experiment!r}"
            + (f" at scale {scale!r}" if scale else "")
            + f" in the index {registry.db_path}; run `dclr experiment run {experiment}` first"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a report's folder holds only its current plots
        old.unlink()
    scales = sorted({r.labels.get("scale", "?") for r in runs})
    rep = Report(f"DCLR reproduction: {experiment}", [])
    description = EXPERIMENTS[experiment][1] if experiment in EXPERIMENTS else "search"
    backbones = sorted({r.labels.get("backbone", "?") for r in runs})
    rep.text(
        f"{description}. Scale: {', '.join(scales)}; backbone(s): {', '.join(backbones)}; "
        f"{len({r.run_dir for r in runs})} complete runs, seeds "
        f"{', '.join(str(s) for s in sorted({r.seed for r in runs}))}"
        + (f"; {incomplete} incomplete run(s) left out" if incomplete else "")
        + ". Scores: "
        + SCORES.get(
            experiment, "Spearman × 100 of cosine similarity on the STS test sets of best/."
        )
    )
    if scales == ["cpu"]:
        rep.text(
            f"CPU scale ({ANALYSIS_BACKBONE['cpu']} on "
            f"{CPU_SCALE_DATA.get(experiment, 'the STS corpus')}, minutes per run) is a "
            "smoke-scale reproduction: it checks the pipeline and the direction of effects, "
            "not the paper's magnitudes (see docs/reproduction-log.md)."
        )
    section = search_trials.section if experiment.startswith("search:") else SECTIONS[experiment]
    section(rep, runs, out_dir)
    rep.heading("Sources")
    rep.text(_sources(experiment))
    md = out_dir / "report.md"
    write_text(md, rep.markdown())
    if html_out:
        write_text(out_dir / "report.html", rep.html())
    return md
