"""NLI training data for supervised SimCSE / ConSERT, read strictly.

Two layouts:
* SentEval's (SNLI, MNLI): a folder with `s1.<split>`, `s2.<split>` and `labels.<split>`, one
  premise / hypothesis / label per line, line i of each file belonging together. Labels are
  `entailment`, `neutral` or `contradiction`. The three files must have the same number of lines.
* SimCSE's CSV (`nli_for_simcse.csv`): a header `sent0,sent1,hard_neg` (anchor, entailed positive,
  contradiction hard negative); `sent0,sent1` alone gives pairs without a hard negative.

`nli_triples` turns labelled pairs into SimCSE's supervised triples: each premise with each of its
entailed hypotheses as the positive and one of its contradictions as the hard negative.
Every error names the file, the line and the fix.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from dclr.data.text import csv_records, read_lines, read_text
from dclr.errors import InputError

NLI_LABELS = ("entailment", "neutral", "contradiction")
NLI_FILES = ("s1", "s2", "labels")  # SentEval's premise, hypothesis and label files
SIMCSE_COLUMNS = ("sent0", "sent1", "hard_neg")


@dataclass(frozen=True)
class NliPair:
    """A premise, a hypothesis and their gold label (an index into NLI_LABELS)."""

    premise: str
    hypothesis: str
    label: int
    line: int = 0  # 1-based line in the source files

    @property
    def label_name(self) -> str:
        return NLI_LABELS[self.label]


@dataclass(frozen=True)
class NliTriple:
    """Supervised SimCSE's input: anchor, entailed positive, contradiction hard negative (or None)."""

    anchor: str
    positive: str
    hard_negative: str | None


def read_senteval_nli(folder: str | Path, split: str) -> list[NliPair]:
    """The pairs of `folder/{s1,s2,labels}.<split>` (SentEval's SNLI layout)."""
    folder = Path(folder)
    paths = {name: folder / f"{name}.{split}" for name in NLI_FILES}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise InputError(
            f"missing NLI file(s) {', '.join(missing)}",
            path=folder,
            fix=f"the folder needs s1.{split}, s2.{split} and labels.{split} (SentEval's layout)",
        )
    lines = {name: read_lines(path) for name, path in paths.items()}
    counts = {name: len(rows) for name, rows in lines.items()}
    if len(set(counts.values())) != 1:
        raise InputError(
            "the NLI files do not line up: "
            + ", ".join(f"{paths[n].name} has {c} lines" for n, c in counts.items()),
            path=folder,
            fix="line i of s1, s2 and labels must be the same example; re-extract the split",
        )
    pairs = []
    for i, (premise, hypothesis, label) in enumerate(
        zip(lines["s1"], lines["s2"], lines["labels"], strict=True), start=1
    ):
        for name, text in (("s1", premise), ("s2", hypothesis)):
            if not text.strip():
                raise InputError(
                    "empty sentence", path=paths[name], line=i, fix="fill or drop that example"
                )
        pairs.append(
            NliPair(premise.strip(), hypothesis.strip(), _label(label, paths["labels"], i), i)
        )
    if not pairs:
        raise InputError("no examples", path=folder, fix=f"the {split} files are empty")
    return pairs


def _label(text: str, path: Path, line: int) -> int:
    name = text.strip().lower()
    if name not in NLI_LABELS:
        raise InputError(
            f"unknown label {text.strip()!r}",
            path=path,
            line=line,
            fix=f"labels are one of {', '.join(NLI_LABELS)}",
        )
    return NLI_LABELS.index(name)


def read_simcse_csv(path: str | Path) -> list[NliTriple]:
    """Triples (or pairs) of SimCSE's NLI CSV, header `sent0,sent1[,hard_neg]`."""
    path = Path(path)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    fix_header = "the first line must be `sent0,sent1,hard_neg` (or `sent0,sent1`)"
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError("the file is empty", path=path, fix=fix_header) from None
    if header not in (list(SIMCSE_COLUMNS), list(SIMCSE_COLUMNS[:2])):
        raise InputError(f"unexpected header {','.join(header)}", path=path, line=1, fix=fix_header)
    triples = []
    for line, row in csv_records(path, reader, len(header)):
        fields = [field.strip() for field in row]
        if not all(fields):
            empty = [h for h, f in zip(header, fields, strict=True) if not f]
            raise InputError(f"empty {', '.join(empty)}", path=path, line=line,
                             fix="fill the field or drop the row")  # fmt: skip
        triples.append(NliTriple(fields[0], fields[1], fields[2] if len(fields) == 3 else None))
    if not triples:
        raise InputError("no examples", path=path, fix="the file has a header but no rows")
    return triples


def nli_triples(pairs: list[NliPair]) -> list[NliTriple]:
    """SimCSE's supervised triples from labelled pairs, in the order premises first appear.

    Each (premise, entailed hypothesis) becomes a triple whose hard negative is one of the same
    premise's contradictions (the k-th entailment takes the k-th contradiction, cycling); premises
    without both an entailment and a contradiction are skipped.
    """
    entailed: dict[str, list[str]] = {}
    contradicted: dict[str, list[str]] = {}
    for pair in pairs:
        if pair.label_name == "entailment":
            entailed.setdefault(pair.premise, []).append(pair.hypothesis)
        elif pair.label_name == "contradiction":
            contradicted.setdefault(pair.premise, []).append(pair.hypothesis)
    triples = []
    for premise, positives in entailed.items():
        negatives = contradicted.get(premise)
        if not negatives:
            continue
        for k, positive in enumerate(positives):
            triples.append(NliTriple(premise, positive, negatives[k % len(negatives)]))
    return triples
