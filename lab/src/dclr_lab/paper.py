"""The papers' reported numbers, kept as data with their source line.

Zhou, Zhang, Zhao and Wen, "Debiased Contrastive Learning of Unsupervised Sentence Representations",
ACL 2022, arXiv 2205.00656. Every number is read from the paper's text summary in
`../shared/papers/dclr.txt` and carries its line there; `tests/experiments/test_paper_numbers.py`
reads them from that file, so a typo fails. Scores are Spearman x100 (SentEval "all" setting for STS12-16).
The ConSERT and DualCSE numbers and findings the reports print come from `consert.txt` and
`dualcse.txt` in the same folder, and are read back the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "Zhou et al., ACL 2022, arXiv 2205.00656"
PAPER_TEXT = "../shared/papers/dclr.txt"
TABLE1_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")


@dataclass(frozen=True)
class PaperNumber:
    """One reported number: its value, where it is read from, and a caveat."""

    value: float
    source: str
    note: str = ""


def _table1(line: int, *values: float) -> dict[str, PaperNumber]:
    source = f"{PAPER}, main STS table (page 6); {PAPER_TEXT} l.{line}"
    return {t: PaperNumber(v, source) for t, v in zip((*TABLE1_TASKS, "avg"), values, strict=True)}


# (backbone, method) -> task -> score: every cell of the main table for SimCSE and DCLR.
TABLE1: dict[tuple[str, str], dict[str, PaperNumber]] = {
    ("bert-base", "simcse"): _table1(112, 68.40, 82.41, 74.38, 80.91, 78.56, 76.85, 72.23, 76.25),
    ("bert-base", "dclr"): _table1(113, 70.81, 83.73, 75.11, 82.56, 78.44, 78.31, 71.59, 77.22),
    ("bert-large", "simcse"): _table1(114, 70.88, 84.16, 76.43, 84.50, 79.76, 79.26, 73.88, 78.41),
    ("bert-large", "dclr"): _table1(115, 71.87, 84.83, 77.37, 84.70, 79.81, 79.55, 74.19, 78.90),
    ("roberta-base", "simcse"): _table1(
        116, 70.16, 81.77, 73.24, 81.36, 80.65, 80.22, 68.56, 76.57
    ),
    ("roberta-base", "dclr"): _table1(117, 70.01, 83.08, 75.09, 83.66, 81.06, 81.86, 70.33, 77.87),
    ("roberta-large", "simcse"): _table1(
        118, 72.86, 83.99, 75.62, 84.77, 81.80, 81.98, 71.26, 78.90
    ),
    ("roberta-large", "dclr"): _table1(119, 73.09, 84.57, 76.13, 85.15, 81.99, 82.35, 71.80, 79.30),
}
# (backbone, method) -> 7-task STS average (the main table's last column).
MAIN_AVG: dict[tuple[str, str], PaperNumber] = {key: row["avg"] for key, row in TABLE1.items()}

ABLATION_LABELS: dict[str, str] = {
    "full": "DCLR (full)",
    "no_noise": "w/o noise-based negatives",
    "no_weighting": "w/o instance weighting",
    "random_noise": "random noise (t = 0)",
    "self_weighting": "self instance weighting",
    "distill": "knowledge distillation",
}
# Table 6 (ablation, BERT-base, 7-task avg): variant -> the paper's value and its line.
_ABLATION = f"{PAPER}, ablation table (page 7, BERT-base, 7-task avg); {PAPER_TEXT}"
ABLATION: dict[str, PaperNumber] = {
    "full": PaperNumber(77.22, f"{_ABLATION} l.253"),
    "no_noise": PaperNumber(76.17, f"{_ABLATION} l.254"),
    "no_weighting": PaperNumber(76.31, f"{_ABLATION} l.255"),
    "random_noise": PaperNumber(75.22, f"{_ABLATION} l.256"),
    "distill": PaperNumber(75.05, f"{_ABLATION} l.257"),
    "self_weighting": PaperNumber(73.93, f"{_ABLATION} l.258"),
}

CONSERT = "Yan et al., ACL 2021, arXiv 2105.11741"
CONSERT_TEXT = "../shared/papers/consert.txt"
DUALCSE = "Oda, Chuang, Shirai et al., arXiv 2510.09293"
DUALCSE_TEXT = "../shared/papers/dualcse.txt"
# The papers an experiment's report draws on: (citation, text file).
EXPERIMENT_PAPERS: dict[str, tuple[tuple[str, str], ...]] = {
    "consert-augmentations": ((CONSERT, CONSERT_TEXT),),
    "consert-few-shot": ((CONSERT, CONSERT_TEXT),),
    "dualcse-inli": ((DUALCSE, DUALCSE_TEXT),),
}
HYPOTHESIS_COLUMNS = ("explicit", "implied", "neutral", "contradiction", "avg")


def _rte(line: int, *values: float) -> dict[str, PaperNumber]:
    source = f"{DUALCSE}, RTE accuracy on INLI test per hypothesis type; {DUALCSE_TEXT} l.{line}"
    return {k: PaperNumber(v, source) for k, v in zip(HYPOTHESIS_COLUMNS, values, strict=True)}


# DualCSE's RTE table (backbone not named in the text): method -> hypothesis type -> accuracy x100.
DUALCSE_RTE: dict[str, dict[str, PaperNumber]] = {
    "simcse-sup": _rte(117, 90.60, 69.10, 66.90, 91.00, 79.40),  # "SimCSE (INLI)"
    "dualcse-cross": _rte(118, 90.20, 73.40, 68.40, 88.70, 80.18),  # "DualCSE-Cross"
}
# ConSERT's analysis of its views (BERT-base, unsupervised): the text gives one number (no
# augmentation, "None-None") and the order of the rest.
CONSERT_NONE_NONE = PaperNumber(63.84, f"{CONSERT}, augmentation analysis; {CONSERT_TEXT} l.91")

# Qualitative findings with no number we can plot; reports print them next to our results.
FINDINGS: dict[str, tuple[str, str]] = {
    "ablation": (
        "Every variant scores below full DCLR on the 7-task average (BERT-base): removing "
        "instance weighting or the noise-based negatives, random noise (no gradient steps), the "
        "model itself as the complementary model, and distillation from SimCSE.",
        f"{_ABLATION} l.253-258 (values per row in ABLATION)",
    ),
    "few-shot": (
        "At 0.3% of the training data the drop relative to full data is only 9% on STS-B and "
        "4% on SICK-R (BERT-base; the figure's per-point values are not in the text).",
        f"{PAPER}, few-shot figure (page 8); {PAPER_TEXT} l.141",
    ),
    "sensitivity": (
        "Noise ratio k around 1 works best; STS-B is sensitive to phi (too high suppresses too "
        "few false negatives, too low removes true negatives), SICK-R comparatively insensitive.",
        f"{PAPER}, hyper-parameter analysis figure; {PAPER_TEXT} l.144",
    ),
    "uniformity": (
        "DCLR's uniformity loss is below SimCSE's for nearly the entire training process and "
        "decreases faster, whereas SimCSE shows no comparable downward trend (BERT-base, STS-B "
        "validation).",
        f"{PAPER}, uniformity-vs-step figure; {PAPER_TEXT} l.138",
    ),
    "consert-augmentations": (
        "Shuffle and Token Cutoff are the most effective single views (Shuffle slightly ahead), "
        "above Feature Cutoff and Dropout, which each improve roughly 4 points over None-None "
        "(63.84); Shuffle with Feature Cutoff is the best pair (BERT-base, unsupervised).",
        f"{CONSERT}, section 5.2; {CONSERT_TEXT} l.89-91",
    ),
    "consert-few-shot": (
        "With 1,000 unlabeled texts ConSERT is comparable to training on all 89,192 "
        "(1, 10, 100, 1,000, 10,000 and all texts studied; per-point values not in the text).",
        f"{CONSERT}, section 5.4; {CONSERT_TEXT} l.92",
    ),
}

# Paper defaults drawn as reference lines on the sensitivity plots.
PAPER_DEFAULTS: dict[str, PaperNumber] = {
    "false_negative_threshold": PaperNumber(0.9, f"{PAPER}, BERT-base phi; {PAPER_TEXT} l.103"),
    "noise_ratio": PaperNumber(1.0, f"{PAPER}, BERT-base k; {PAPER_TEXT} l.103"),
}
