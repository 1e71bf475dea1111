"""Readers for the STS tasks in SentEval's layout, parsing exactly as SentEval does.

SentEval (as used by SimCSE's `evaluation.py`) splits every sentence on whitespace and the batcher
joins the tokens with single spaces, so each sentence here is `" ".join(s.split())`.
STS12-16 pairs whose gold line is blank are skipped ("unscored"). STS-B takes the score from
column 4 and the sentences from columns 5 and 6; SICK skips its header and takes columns 1-3.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from dclr.data.text import read_lines
from dclr.errors import InputError

# SentEval's subset order for each year (its `self.datasets`).
STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STS_TASKS = (*STS_SUBSETS, "STSBenchmark", "SICKRelatedness")
Split = Literal["train", "dev", "test"]

_STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
_SICK_FILES = {
    "train": "SICK_train.txt",
    "dev": "SICK_trial.txt",
    "test": "SICK_test_annotated.txt",
}


@dataclass(frozen=True)
class StsPairs:
    """Sentence pairs with gold similarity scores, for one subset or split of a task."""

    task: str
    subset: str
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray  # (n,) float64 gold scores

    def __len__(self) -> int:
        return len(self.scores)


def normalize(sentence: str) -> str:
    """SentEval's tokenisation round trip: split on whitespace, join with one space."""
    return " ".join(sentence.split())


def _score(text: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            f"gold score {text!r} is not a number",
            path=path,
            line=line,
            fix="each gold line must hold one number (or be blank for an unscored pair)",
        ) from None
    if not np.isfinite(value):
        raise InputError(
            f"gold score {text!r} is not finite",
            path=path,
            line=line,
            fix="replace it with a finite number",
        )
    return value


def split_pair(line: str, path: Path, number: int) -> list[str]:
    """The two tab-separated sentences of an STS input line (InputError naming file and line)."""
    fields = line.split("\t")
    if len(fields) != 2:
        raise InputError(
            f"expected 2 tab-separated sentences, found {len(fields)} fields",
            path=path,
            line=number,
            fix="each line must be `sentence1<TAB>sentence2`",
        )
    return fields


def read_sts_year(root: Path, task: str) -> list[StsPairs]:
    """Read every subset of STS12..STS16 from `root/senteval/STS/<task>-en-test`."""
    folder = root / "senteval" / "STS" / f"{task}-en-test"
    out = []
    for subset in STS_SUBSETS[task]:
        input_path = folder / f"STS.input.{subset}.txt"
        gold_path = folder / f"STS.gs.{subset}.txt"
        pairs = read_lines(input_path)
        gold = read_lines(gold_path)
        if len(pairs) != len(gold):
            raise InputError(
                f"{len(gold)} gold lines for {len(pairs)} sentence pairs in {input_path.name}",
                path=gold_path,
                line=min(len(pairs), len(gold)) + 1,
                fix="the input and gold files must have one line per pair (a blank gold line "
                "marks an unscored pair); restore the original files",
            )
        s1, s2, scores = [], [], []
        for number, (pair, raw) in enumerate(zip(pairs, gold, strict=True), start=1):
            if raw == "":  # SentEval: blank gold line = pair not scored, skipped
                continue
            fields = split_pair(pair, input_path, number)
            s1.append(normalize(fields[0]))
            s2.append(normalize(fields[1]))
            scores.append(_score(raw, gold_path, number))
        out.append(StsPairs(task, subset, s1, s2, np.asarray(scores, dtype=np.float64)))
    return out


def read_stsb(root: Path, split: Split) -> StsPairs:
    """STS Benchmark split: score in column 4, sentences in columns 5 and 6 (0-based)."""
    path = root / "senteval" / "STS" / "STSBenchmark" / _STSB_FILES[split]
    s1, s2, scores = [], [], []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.strip().split("\t")
        if len(fields) < 7:
            raise InputError(
                f"expected at least 7 tab-separated columns, found {len(fields)}",
                path=path,
                line=number,
                fix="STS-B rows are genre, file, year, id, score, sentence1, sentence2",
            )
        s1.append(normalize(fields[5]))
        s2.append(normalize(fields[6]))
        scores.append(_score(fields[4], path, number))
    return StsPairs("STSBenchmark", split, s1, s2, np.asarray(scores, dtype=np.float64))


def sick_rows(root: Path, split: Split, columns: int = 4) -> Iterator[tuple[int, list[str]]]:
    """(line number, tab-separated fields) of every row of a SICK split after its header; a row
    with fewer than `columns` fields is an InputError naming the file and line."""
    path = root / "senteval" / "SICK" / _SICK_FILES[split]
    for number, line in enumerate(read_lines(path), start=1):
        if number == 1:
            continue  # header
        fields = line.strip().split("\t")
        if len(fields) < columns:
            raise InputError(
                f"expected at least {columns} tab-separated columns, found {len(fields)}",
                path=path,
                line=number,
                fix="SICK rows are pair_ID, sentence_A, sentence_B, relatedness_score, "
                "entailment_judgment, ...",
            )
        yield number, fields


def read_sick(root: Path, split: Split) -> StsPairs:
    """SICK relatedness split: header row, then id, sentence_A, sentence_B, score, ..."""
    path = root / "senteval" / "SICK" / _SICK_FILES[split]
    s1, s2, scores = [], [], []
    for number, fields in sick_rows(root, split):
        s1.append(normalize(fields[1]))
        s2.append(normalize(fields[2]))
        scores.append(_score(fields[3], path, number))
    return StsPairs("SICKRelatedness", split, s1, s2, np.asarray(scores, dtype=np.float64))


def load_task(root: Path, task: str, split: Split = "test") -> list[StsPairs]:
    """All pairs of one task; STS12-16 exist only as test sets."""
    if task in STS_SUBSETS:
        if split != "test":
            raise InputError(f"{task} has only a test set, not {split!r}")
        return read_sts_year(root, task)
    if task == "STSBenchmark":
        return [read_stsb(root, split)]
    if task == "SICKRelatedness":
        return [read_sick(root, split)]
    raise InputError(f"unknown STS task {task!r}", fix=f"choose from {', '.join(STS_TASKS)}")


def all_sentences(root: Path) -> list[str]:
    """Every distinct sentence of STS12-16, STS-B and SICK (all splits), in first-seen order.

    This is ConSERT's unsupervised transfer corpus: unlabeled text from the evaluation data.
    """
    seen: dict[str, None] = {}
    groups: list[StsPairs] = []
    for task in STS_SUBSETS:
        groups += read_sts_year(root, task)
    for split in ("train", "dev", "test"):
        groups += [read_stsb(root, split), read_sick(root, split)]
    for pairs in groups:
        for s in (*pairs.sentences1, *pairs.sentences2):
            if s:
                seen.setdefault(s, None)
    return list(seen)


def all_texts(root: Path) -> list[str]:
    """ConSERT's unsupervised corpus: every text of the seven STS datasets, duplicates kept.

    Both sentences of every line of the STS12-16 input files (scored or not: ConSERT reads the
    inputs without their gold files), of STS-B train / dev / test and of SICK train / trial /
    test, in file order, sentence 1 then sentence 2 of each pair, normalised as SentEval does.
    With the shared data: 2 x (26,041 + 8,628 + 9,927) = 89,192 texts, the "all 89,192 available
    texts" of ConSERT's few-shot study (../shared/papers/consert.txt l.92).
    """
    texts: list[str] = []
    for task, subsets in STS_SUBSETS.items():
        folder = root / "senteval" / "STS" / f"{task}-en-test"
        for subset in subsets:
            path = folder / f"STS.input.{subset}.txt"
            for number, line in enumerate(read_lines(path), start=1):
                fields = split_pair(line, path, number)
                texts += [normalize(fields[0]), normalize(fields[1])]
    for split in ("train", "dev", "test"):
        for pairs in (read_stsb(root, split), read_sick(root, split)):
            for first, second in zip(pairs.sentences1, pairs.sentences2, strict=True):
                texts += [first, second]
    return texts
