"""INLI (Implied NLI, Havaldar et al. 2025) and EIS pair files, read strictly.

INLI: `train.csv` / `val.csv` / `test.csv`, one premise and its four hypotheses per row, columns
`premise`, `implied_entailment`, `explicit_entailment`, `neutral`, `contradiction` (plus `dataset`
and an unnamed index, which are optional here). Fields hold quoted commas and newlines, so the file
is read with a real CSV reader; errors name the line on which the bad record starts.

EIS pairs: a UTF-8 TSV, one pair per line, `more-implicit sentence<TAB>more-explicit sentence`; an
optional first line `implicit<TAB>explicit` is a header; blank lines are skipped.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

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
