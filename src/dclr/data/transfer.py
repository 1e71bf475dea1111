"""Readers for SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC), as SentEval reads
them: the same files, encodings, token splitting, label mapping and sort order (the order matters:
SentEval's stratified folds are drawn over the sorted rows).

Sentences are returned as token lists (SentEval's `line.split()`); an encoder sees them joined by
one space, as SimCSE's batcher does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dclr.errors import InputError

Tokens = list[str]
BINARY_FILES = {  # task -> (folder, file of label 1, file of label 0), SentEval's binary.py
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")  # SimCSE's order: MR CR
# MPQA SUBJ SST2 TREC MRPC; this tuple only fixes the order of our tables.


@dataclass
class Split:
    """Rows of one split, sorted as SentEval sorts them. `second` holds MRPC's second sentences."""

    first: list[Tokens]
    labels: np.ndarray  # (n,) int64
    second: list[Tokens] | None = None


def _read_lines(path: Path, encoding: str) -> list[str]:
    if not path.is_file():
        raise InputError(
            "transfer-task file not found",
            path=path,
            fix="point --data-dir (or $DCLR_DATA_DIR) at the folder holding senteval/ with "
            "SentEval's MR CR SUBJ MPQA SST TREC MRPC folders",
        )
    with path.open(encoding=encoding) as fh:
        return fh.read().splitlines()


def _sorted(first: list[Tokens], labels: list[int], second: list[Tokens] | None = None) -> Split:
    """SentEval's order: by (len tokens, label), or (len A, len B, label) for pairs; stable."""
    if second is None:
        rows = sorted(zip(first, labels, strict=True), key=lambda z: (len(z[0]), z[1]))
        return Split([r[0] for r in rows], np.array([r[1] for r in rows], dtype=np.int64))
    rows3 = sorted(
        zip(first, second, labels, strict=True), key=lambda z: (len(z[0]), len(z[1]), z[2])
    )
    return Split(
        [r[0] for r in rows3],
        np.array([r[2] for r in rows3], dtype=np.int64),
        [r[1] for r in rows3],
    )


def load_binary(root: Path, task: str) -> Split:
    """MR, CR, SUBJ, MPQA: one sentence per line (latin-1, as SentEval reads them)."""
    folder, one, zero = BINARY_FILES[task]
    pos = [line.split() for line in _read_lines(root / folder / one, "latin-1")]
    neg = [line.split() for line in _read_lines(root / folder / zero, "latin-1")]
    return _sorted(pos + neg, [1] * len(pos) + [0] * len(neg))


def load_sst2(root: Path) -> dict[str, Split]:
    """SST-2: `sentence<TAB>label` per line; train / dev / test."""
    out = {}
    for split in ("train", "dev", "test"):
        path = root / "SST" / "binary" / f"sentiment-{split}"
        x, y = [], []
        for i, line in enumerate(_read_lines(path, "utf-8"), 1):
            parts = line.strip().split("\t")
            if len(parts) < 2:
                raise InputError("expected `sentence<TAB>label`", path=path, line=i)
            x.append(parts[0].split())
            y.append(int(parts[1]))
        out[split] = _sorted(x, y)
    return out


def load_trec(root: Path) -> dict[str, Split]:
    """TREC: `COARSE:fine question` per line (latin-1); train (5452) / test (500), 6 classes."""
    out = {}
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = root / "TREC" / name
        x, y = [], []
        for i, line in enumerate(_read_lines(path, "latin-1"), 1):
            target, _, rest = line.strip().partition(":")
            if target not in TREC_LABELS or " " not in rest:
                raise InputError(f"unknown TREC label {target!r}", path=path, line=i)
            x.append(rest.split(" ", 1)[1].split())
            y.append(TREC_LABELS[target])
        out[split] = _sorted(x, y)
    return out


def load_mrpc(root: Path) -> dict[str, Split]:
    """MRPC: a header, then `label<TAB>id1<TAB>id2<TAB>sentence1<TAB>sentence2`."""
    out = {}
    for split in ("train", "test"):
        path = root / "MRPC" / f"msr_paraphrase_{split}.txt"
        a, b, y = [], [], []
        for i, line in enumerate(_read_lines(path, "utf-8")[1:], 2):
            parts = line.strip().split("\t")
            if len(parts) < 5:
                raise InputError("expected 5 tab-separated columns", path=path, line=i)
            a.append(parts[3].split())
            b.append(parts[4].split())
            y.append(int(parts[0]))
        out[split] = _sorted(a, y, b)
    return out
