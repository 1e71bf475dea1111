"""INLI (Implied NLI, Havaldar et al. 2025) and EIS pair files, read strictly.

INLI: `train.csv` / `val.csv` / `test.csv`, one premise and its four hypotheses per row, columns
`premise`, `implied_entailment`, `explicit_entailment`, `neutral`, `contradiction` (plus `dataset`
and an unnamed index, which are optional here). Fields hold quoted commas and newlines, so the file
is read with a real CSV reader; errors name the line on which the bad record starts.

EIS pairs: a UTF-8 TSV, one pair per line, `more-implicit sentence<TAB>more-explicit sentence`; an
optional first line `implicit<TAB>explicit` is a header; blank lines are skipped.

EIS data as Wang et al. (ImpScore, ICLR 2025; github.com/audreycs/ImpScore) publish it: a CSV with
a header row naming `pos_implicit, pos_explicit, neg_implicit, neg_explicit` (other columns are
ignored); each row holds two (implicit, explicit) pairs that share the implicit sentence: the
positive pair (the explicit sentence states what the implicit one means) and the negative pair
(an explicit sentence of another meaning). 56,290 rows = 112,580 pairs. ImpScore's own test dump
(`pos_implicit, pos_explicit, pragmatic_label`, one pair per row, label 1 / 0 for positive /
negative) is read too. For EIS both pairs of a row count: in each, the first sentence is the more
implicit one. `eis_split` cuts the rows into DualCSE's train / val / test sizes (see there).
"""

from __future__ import annotations

import csv
import io
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dclr.data.text import csv_records, read_text
from dclr.errors import InputError

INLI_SPLITS = ("train", "val", "test")
# CSV column -> InliExample field.
INLI_COLUMNS = {
    "premise": "premise",
    "explicit_entailment": "explicit",
    "implied_entailment": "implied",
    "neutral": "neutral",
    "contradiction": "contradiction",
}
# Hypothesis types in table order; the first two are entailed by the premise.
HYPOTHESIS_TYPES = ("explicit", "implied", "neutral", "contradiction")
ENTAILED = ("explicit", "implied")
INLI_FOLDER = "inli"
ENV_VAR = "DCLR_DATA_DIR"
INLI_SOURCE = "https://github.com/google-deepmind/inli"  # Havaldar et al., ACL 2025


@dataclass(frozen=True)
class InliExample:
    """One INLI row: a premise and its explicit/implied-entailment, neutral, contradiction hypotheses."""

    premise: str
    explicit: str
    implied: str
    neutral: str
    contradiction: str
    source: str = ""  # the `dataset` column (circa, socialchem, normbank, ludwig)
    line: int = 0  # 1-based line where the record starts

    def hypothesis(self, kind: str) -> str:
        return str(getattr(self, kind))


def resolve_inli_dir(data_dir: str | Path | None = None) -> Path:
    """The INLI folder: `<data_dir>/inli` or `data_dir` itself; else from $DCLR_DATA_DIR."""
    source = "--data-dir"
    if data_dir is None:
        if not os.environ.get(ENV_VAR):
            raise InputError(
                "no INLI data folder given",
                fix=f"pass --data-dir (a folder holding inli/train.csv) or set ${ENV_VAR}",
            )
        data_dir, source = os.environ[ENV_VAR], f"${ENV_VAR}"
    root = Path(data_dir).expanduser()
    for candidate in (root / INLI_FOLDER, root):
        if (candidate / "test.csv").is_file():
            return candidate
    raise InputError(
        f"no INLI data found (looked for {root / INLI_FOLDER}/test.csv, from {source})",
        path=root,
        fix=f"download INLI ({INLI_SOURCE}) and put train.csv, val.csv, test.csv in {root / 'inli'}",
    )


def inli_split(data_dir: str | Path | None, split: str) -> Path:
    if split not in INLI_SPLITS:
        raise InputError(
            f"unknown INLI split {split!r}", fix=f"use one of {', '.join(INLI_SPLITS)}"
        )
    return resolve_inli_dir(data_dir) / f"{split}.csv"


def read_inli(path: str | Path) -> list[InliExample]:
    """Every row of an INLI CSV file; InputError naming file, line and fix on any bad record."""
    path = Path(path)
    text = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InputError("the file is empty", path=path, fix=_header_fix()) from None
    missing = [c for c in INLI_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)} (header: {', '.join(header)})",
            path=path,
            line=1,
            fix=_header_fix(),
        )
    index = {column: header.index(column) for column in INLI_COLUMNS}
    source_index = header.index("dataset") if "dataset" in header else None
    examples: list[InliExample] = []
    for line, row in csv_records(path, reader, len(header)):
        values = {field: row[index[column]].strip() for column, field in INLI_COLUMNS.items()}
        empty = [c for c, f in INLI_COLUMNS.items() if not values[f]]
        if empty:
            raise InputError(
                f"empty {', '.join(empty)}",
                path=path,
                line=line,
                fix="every premise needs all four hypotheses: fill the field or drop the row",
            )
        source = row[source_index].strip() if source_index is not None else ""
        examples.append(InliExample(**values, source=source, line=line))
    if not examples:
        raise InputError("no examples", path=path, fix="the file has a header but no rows")
    return examples


def _header_fix() -> str:
    return (
        "the first line must name the columns " + ", ".join(INLI_COLUMNS) + " (INLI's own header)"
    )


EIS_HEADER = ("implicit", "explicit")


def read_eis_pairs(path: str | Path) -> list[tuple[str, str]]:
    """(more-implicit, more-explicit) sentence pairs from a TSV (see the module docstring)."""
    path = Path(path)
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("\t")]
        if number == 1 and tuple(f.lower() for f in fields) == EIS_HEADER:
            continue
        if len(fields) != 2 or not all(fields):
            raise InputError(
                f"expected 2 non-empty tab-separated fields, got {len(fields)}"
                + ("" if len(fields) != 2 else " with an empty one"),
                path=path,
                line=number,
                fix="write `more-implicit sentence<TAB>more-explicit sentence` on each line",
            )
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise InputError(
            "no sentence pairs",
            path=path,
            fix="add lines `implicit sentence<TAB>explicit sentence`",
        )
    return pairs


# ---- EIS data in ImpScore's published CSV ---------------------------------------------------
IMPSCORE_ROW_COLUMNS = ("pos_implicit", "pos_explicit", "neg_implicit", "neg_explicit")
IMPSCORE_PAIR_COLUMNS = ("pos_implicit", "pos_explicit", "pragmatic_label")
IMPSCORE_SOURCE = "https://github.com/audreycs/ImpScore"  # Wang et al., ICLR 2025
# DualCSE's EIS sizes (../shared/papers/dualcse.txt l.93: 101,320 / 5,630 / 5,630 pairs) are
# ImpScore's 90 / 5 / 5 row split of its 56,290 rows with the held-out shares rounded up:
# ceil(0.05 * 56,290) = 2,815 rows = 5,630 pairs each, 50,660 rows = 101,320 pairs for training.
EIS_HELD_OUT_SHARE = 0.05
EisSplit = Literal["all", "train", "val", "test"]


@dataclass(frozen=True)
class EisRow:
    """One row of ImpScore's CSV: its (implicit, explicit) pairs and the line it starts on."""

    pairs: tuple[tuple[str, str], ...]
    line: int


def is_impscore_csv(path: str | Path) -> bool:
    """Whether the file's first line is an ImpScore CSV header (names `pos_implicit`)."""
    first = read_text(path).split("\n", 1)[0]
    return "pos_implicit" in next(csv.reader([first]), [])


def read_impscore_csv(path: str | Path) -> list[EisRow]:
    """Every row of an ImpScore CSV (either layout); InputError naming file, line and fix."""
    path = Path(path)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError("the file is empty", path=path, fix=_impscore_fix()) from None
    if all(c in header for c in IMPSCORE_ROW_COLUMNS):
        columns: tuple[str, ...] = IMPSCORE_ROW_COLUMNS
    elif all(c in header for c in IMPSCORE_PAIR_COLUMNS):
        columns = IMPSCORE_PAIR_COLUMNS
    else:
        missing = [c for c in IMPSCORE_ROW_COLUMNS if c not in header]
        raise InputError(
            f"missing column(s) {', '.join(missing)} (header: {', '.join(header)})",
            path=path,
            line=1,
            fix=_impscore_fix(),
        )
    index = {c: header.index(c) for c in columns}
    rows: list[EisRow] = []
    for line, record in csv_records(path, reader, len(header)):
        values = {c: record[index[c]].strip() for c in columns}
        empty = [c for c in columns if not values[c]]
        if empty:
            raise InputError(
                f"empty {', '.join(empty)}",
                path=path,
                line=line,
                fix="every pair needs both sentences: fill the field or drop the row",
            )
        if columns == IMPSCORE_ROW_COLUMNS:
            pairs: tuple[tuple[str, str], ...] = (
                (values["pos_implicit"], values["pos_explicit"]),
                (values["neg_implicit"], values["neg_explicit"]),
            )
        else:
            if values["pragmatic_label"] not in ("0", "1"):
                raise InputError(
                    f"pragmatic_label {values['pragmatic_label']!r} is not 0 or 1",
                    path=path,
                    line=line,
                    fix="ImpScore's test dump labels positive pairs 1 and negative pairs 0",
                )
            pairs = ((values["pos_implicit"], values["pos_explicit"]),)
        rows.append(EisRow(pairs, line))
    if not rows:
        raise InputError("no rows", path=path, fix="the file has a header but no rows")
    return rows


def _impscore_fix() -> str:
    return (
        "the first line must name the columns " + ", ".join(IMPSCORE_ROW_COLUMNS) + " (ImpScore's "
        f"train_data.csv, {IMPSCORE_SOURCE}), or write a TSV `implicit<TAB>explicit` per line"
    )


def eis_split_sizes(n_rows: int) -> dict[str, int]:
    """Rows per split: val = test = ceil(5 % of the rows), train the rest.

    For ImpScore's 56,290 rows: 50,660 / 2,815 / 2,815 rows = 101,320 / 5,630 / 5,630 pairs, the
    sizes DualCSE reports (dualcse.txt l.93). Which rows go where is not published; `eis_split`'s
    seeded shuffle is our choice.
    """
    held_out = math.ceil(EIS_HELD_OUT_SHARE * n_rows)
    if n_rows < 3 or 2 * held_out >= n_rows:
        raise InputError(
            f"{n_rows} rows are too few for a train / val / test split",
            fix="use split 'all' on a small file",
        )
    return {"train": n_rows - 2 * held_out, "val": held_out, "test": held_out}


def eis_split(rows: list[EisRow], split: EisSplit = "all", seed: int = 0) -> list[EisRow]:
    """The rows of one split: a permutation seeded by `seed`, cut into train, val, test."""
    if split == "all":
        return list(rows)
    if split not in ("train", "val", "test"):
        raise InputError(f"unknown EIS split {split!r}", fix="use all, train, val or test")
    sizes = eis_split_sizes(len(rows))
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    start = {"train": 0, "val": sizes["train"], "test": sizes["train"] + sizes["val"]}[split]
    chosen = sorted(order[start : start + sizes[split]])  # file order within a split
    return [rows[i] for i in chosen]


def read_eis_file(
    path: str | Path, split: EisSplit = "all", seed: int = 0
) -> list[tuple[str, str]]:
    """(more-implicit, more-explicit) pairs from a TSV or an ImpScore CSV (the header decides)."""
    path = Path(path)
    if not is_impscore_csv(path):
        if split != "all":
            raise InputError(
                f"split {split!r} applies to ImpScore's CSV; this file is a pairs TSV",
                path=path,
                fix="split the TSV yourself, or pass split 'all'",
            )
        return read_eis_pairs(path)
    return [pair for row in eis_split(read_impscore_csv(path), split, seed) for pair in row.pairs]
