"""SentEval's STS procedure, re-implemented on its own code path: the reference `StsEvaluator` is
checked against.

It follows SentEval (`senteval/sts.py`, as vendored by SimCSE) and SimCSE's `evaluation.py` step by
step rather than sharing anything with `dclr.evaluation` or `dclr.data`:

- STS12-16: `open(...).read().splitlines()` for the input and gold files, `l.split("\\t")`,
  pairs with a blank gold line dropped, sentences kept as token lists (`s.split()`), each subset
  sorted by (len(tokens1), len(tokens2), score) as SentEval does to reduce padding;
- STSBenchmark: `for line in f`, `line.strip().split("\\t")`, sentences from columns 5 and 6, score
  from column 4, no sorting; SICKRelatedness: the same after skipping the header, columns 1, 2, 3;
- every subset / split is encoded on its own, in batches of 128 pairs (SentEval's default
  `batch_size`), sentence 1 and sentence 2 of a batch in two batcher calls;
- the batcher is SimCSE's: `" ".join(tokens)`, `tokenizer(..., padding=True)` with no truncation,
  one forward pass with `output_hidden_states=True`, then the pooler;
- similarity is SentEval's cosine on float32 vectors with `nan_to_num` before and after;
- STS12-16 report the "all" Spearman (one correlation over the concatenated subsets, SimCSE's
  `results[task]["all"]["spearman"]["all"]`); STS-B and SICK report the requested split.

Only the pooler itself comes from dclr (`dclr.models.pooling.pool`), so the comparison isolates
data reading, batching, similarity and aggregation. One deliberate shortcut: SentEval encodes all
three STS-B / SICK splits, this encodes only the one reported (splits never interact).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
from scipy.stats import spearmanr

from dclr.models.pooling import pool

Mode = Literal["test", "dev"]
Tokens = list[str]
Subset = tuple[list[Tokens], list[Tokens], list[float]]  # SentEval's (input1, input2, gs_scores)
Batcher = Callable[[list[Tokens]], np.ndarray]

SENTEVAL_BATCH_SIZE = 128  # SentEval's engine default; SimCSE's evaluation.py does not change it
STS_YEARS: dict[str, list[str]] = {  # SentEval's `self.datasets` for each STSxxEval class
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
TEST_TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")
DEV_TASKS = ("STSBenchmark", "SICKRelatedness")
STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


# ---------------------------------------------------------------- loading, as SentEval does it


def load_sts_year(folder: str, subsets: Sequence[str]) -> dict[str, Subset]:
    """STSEval.loadFile: every subset of one year, blank-gold pairs dropped, sorted by length."""
    data = {}
    for name in subsets:
        with open(os.path.join(folder, f"STS.input.{name}.txt"), encoding="utf8") as f:
            rows = [line.split("\t") for line in f.read().splitlines()]
        first, second = zip(*rows, strict=False)  # SentEval unpacks zip(*rows) the same way
        with open(os.path.join(folder, f"STS.gs.{name}.txt"), encoding="utf8") as f:
            raw = np.array(f.read().splitlines())
        scored = raw != ""
        gold = [float(x) for x in raw[scored]]
        tokens1 = np.array([s.split() for s in first], dtype=object)[scored]
        tokens2 = np.array([s.split() for s in second], dtype=object)[scored]
        ordered = sorted(
            zip(tokens1, tokens2, gold, strict=True), key=lambda z: (len(z[0]), len(z[1]), z[2])
        )
        input1, input2, scores = (list(column) for column in zip(*ordered, strict=True))
        data[name] = (input1, input2, scores)
    return data


def load_columns(path: str, cols: tuple[int, int, int], skip_header: bool) -> Subset:
    """STSBenchmarkEval / SICKRelatednessEval.loadFile: (sentence1, sentence2, score) columns."""
    input1, input2, raw = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f):
            if skip_header and number == 0:
                continue
            fields = line.strip().split("\t")
            input1.append(fields[cols[0]].split())
            input2.append(fields[cols[1]].split())
            raw.append(fields[cols[2]])
    return input1, input2, [float(s) for s in raw]


def load_task(data_dir: str, task: str, split: str) -> dict[str, Subset]:
    """The subsets SentEval evaluates for `task`, keyed by subset name (or by split)."""
    sts = os.path.join(data_dir, "senteval", "STS")
    if task in STS_YEARS:
        return load_sts_year(os.path.join(sts, f"{task}-en-test"), STS_YEARS[task])
    if task == "STSBenchmark":
        path = os.path.join(sts, "STSBenchmark", STSB_FILES[split])
        return {split: load_columns(path, (5, 6, 4), skip_header=False)}
    if task == "SICKRelatedness":
        path = os.path.join(data_dir, "senteval", "SICK", SICK_FILES[split])
        return {split: load_columns(path, (1, 2, 3), skip_header=True)}
    raise ValueError(f"unknown task {task!r}")


# ---------------------------------------------------------------- batcher, as SimCSE writes it


def make_batcher(backbone: torch.nn.Module, tokenizer: object, pooler: str) -> Batcher:
    """SimCSE's batcher: join tokens, pad (no truncation), forward with all hidden states, pool."""

    def batcher(batch: list[Tokens]) -> np.ndarray:
        sentences = [" ".join(tokens) for tokens in batch]
        inputs = tokenizer(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = backbone(**inputs, output_hidden_states=True, return_dict=True)
        vectors = pool(
            pooler,
            inputs["attention_mask"],
            out.last_hidden_state,
            hidden_states=out.hidden_states,
            pooler_output=getattr(out, "pooler_output", None),
        )
        return vectors.cpu().numpy().astype(np.float32)

    return batcher


# ---------------------------------------------------------------- scoring, as SentEval does it


def cosine(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """senteval.utils.cosine (computed in the vectors' own dtype, float32 here)."""
    return np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v))


def similarity(s1: np.ndarray, s2: np.ndarray) -> float:
    """STSEval's default similarity."""
    return float(np.nan_to_num(cosine(np.nan_to_num(s1), np.nan_to_num(s2))))


def run(
    data: dict[str, Subset], batcher: Batcher, batch_size: int = SENTEVAL_BATCH_SIZE
) -> dict[str, float]:
    """STSEval.run: Spearman of each subset and of their concatenation ("all"), not x 100."""
    results = {}
    all_sys, all_gold = [], []
    for name, (input1, input2, gold) in data.items():
        sys_scores = []
        for start in range(0, len(gold), batch_size):
            batch1 = input1[start : start + batch_size]
            batch2 = input2[start : start + batch_size]
            enc1, enc2 = batcher(batch1), batcher(batch2)
            sys_scores += [similarity(enc1[k], enc2[k]) for k in range(enc2.shape[0])]
        all_sys += sys_scores
        all_gold += gold
        results[name] = spearmanr(sys_scores, gold)[0]
    results["all"] = spearmanr(all_sys, all_gold)[0]
    return results


def senteval_sts(
    backbone: torch.nn.Module,
    tokenizer: object,
    pooler: str,
    data_dir: str | os.PathLike[str],
    mode: Mode = "test",
    tasks: Sequence[str] | None = None,
) -> dict[str, float]:
    """SimCSE's STS table (Spearman x 100) for a HF backbone + tokenizer + dclr pooler name.

    `data_dir` is the folder holding `senteval/`. Keys: each task, `avg` over the tasks, and
    `<task>/<subset>` for the subsets of STS12-16. mode `test`: the 7 tasks, STS-B / SICK on their
    test split; mode `dev`: STS-B and SICK on their dev split.
    """
    if tasks is None:
        tasks = TEST_TASKS if mode == "test" else DEV_TASKS
    was_training = backbone.training
    backbone.eval()
    batcher = make_batcher(backbone, tokenizer, pooler)
    scores: dict[str, float] = {}
    try:
        for task in tasks:
            results = run(load_task(os.fspath(data_dir), task, mode), batcher)
            if task in STS_YEARS:
                scores[task] = float(results["all"] * 100)
                for name in STS_YEARS[task]:
                    scores[f"{task}/{name}"] = float(results[name] * 100)
            else:
                scores[task] = float(results[mode] * 100)
    finally:
        backbone.train(was_training)
    scores["avg"] = float(np.mean([scores[t] for t in tasks]))
    return scores
