"""Every paper number in dclr_lab.paper equals the line it cites in ../shared/papers/dclr.txt."""

from __future__ import annotations

import re

import pytest
from helpers import REPO_ROOT

from dclr_lab import paper

TEXT = REPO_ROOT / paper.PAPER_TEXT


@pytest.fixture(scope="module")
def lines() -> list[str]:
    if not TEXT.is_file():
        pytest.skip(f"no paper text at {TEXT}")
    return TEXT.read_text(encoding="utf-8").splitlines()


def _line(number: paper.PaperNumber) -> int:
    return int(re.search(r"l\.(\d+)", number.source).group(1))


def test_table1_cells_match_their_lines(lines: list[str]) -> None:
    names = {"bert-base": "BERT-base", "bert-large": "BERT-large", "roberta-base": "RoBERTa-base",
             "roberta-large": "RoBERTa-large"}  # fmt: skip
    assert len(paper.TABLE1) == 8
    for (backbone, method), row in paper.TABLE1.items():
        (line,) = {_line(n) for n in row.values()}
        fields = lines[line - 1].split("\t")
        assert fields[:2] == [names[backbone], {"simcse": "SimCSE", "dclr": "DCLR"}[method]]
        values = [row[t].value for t in (*paper.TABLE1_TASKS, "avg")]
        assert values == [float(x) for x in fields[2:]]


def test_table6_rows_match_their_lines(lines: list[str]) -> None:
    wording = {"full": "BERT-base + Ours", "no_noise": "Without noise-based negatives",
               "no_weighting": "Without instance weighting", "random_noise": "BERT-base + random noise",
               "distill": "BERT-base + knowledge distillation",
               "self_weighting": "BERT-base + self instance weighting"}  # fmt: skip
    assert set(paper.ABLATION) == set(paper.ABLATION_LABELS)
    for variant, number in paper.ABLATION.items():
        label, value = lines[_line(number) - 1].split("\t")
        assert label == wording[variant] and float(value) == number.value


def test_main_averages_and_quoted_gains(lines: list[str]) -> None:
    gains = {"bert-base": 0.97, "bert-large": 0.49, "roberta-base": 1.30, "roberta-large": 0.40}
    for backbone, gain in gains.items():  # "The average improvement over SimCSE is 0.97 ..." l.121
        delta = (
            paper.MAIN_AVG[(backbone, "dclr")].value - paper.MAIN_AVG[(backbone, "simcse")].value
        )
        assert round(delta, 2) == gain and f"{gain:.2f}" in lines[120]


def _lines_of(relative: str) -> list[str]:
    path = REPO_ROOT / relative
    if not path.is_file():
        pytest.skip(f"no paper text at {path}")
    return path.read_text(encoding="utf-8").splitlines()


def test_dualcse_rte_rows_match_their_lines() -> None:
    from dclr.data.inli import HYPOTHESIS_TYPES

    lines = _lines_of(paper.DUALCSE_TEXT)
    assert (*HYPOTHESIS_TYPES, "avg") == paper.HYPOTHESIS_COLUMNS
    labels = {"simcse-sup": "SimCSE (INLI)", "dualcse-cross": "DualCSE-Cross"}
    for method, row in paper.DUALCSE_RTE.items():
        (line,) = {_line(n) for n in row.values()}
        fields = lines[line - 1].split("\t")
        assert fields[0] == labels[method]
        assert [row[k].value for k in paper.HYPOTHESIS_COLUMNS] == [float(x) for x in fields[1:]]


def test_consert_number_and_findings_cite_their_lines() -> None:
    lines = _lines_of(paper.CONSERT_TEXT)
    assert f"to {paper.CONSERT_NONE_NONE.value:.2f}" in lines[_line(paper.CONSERT_NONE_NONE) - 1]
    for key, phrase in (("consert-augmentations", "Combining Shuffle with Feature Cutoff"),
                        ("consert-few-shot", "With 1,000 unlabeled texts")):  # fmt: skip
        first = int(re.search(r"l\.(\d+)", paper.FINDINGS[key][1]).group(1))
        assert any(phrase in line for line in lines[first - 1 : first + 2])
