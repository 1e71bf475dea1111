"""Gold paraphrase pairs: known false negatives for auditing and for paraphrase-dense batches.

Sources (train splits only; a pair that also occurs in any dev or test split is dropped, so no
evaluation pair is ever placed in a training batch):
- `mrpc`: MRPC train, label 1 (paraphrase);
- `stsb`: STS-B train, gold score >= 4.0 ("mostly equivalent" or better on the 0-5 scale);
- `sick`: SICK train, relatedness >= 4.5 and entailment label ENTAILMENT.
The thresholds are the ones issue 12 fixes for the audit; they are our choice of "clearly the same
meaning", not a number of the DCLR paper (which has no gold false negatives).

Two sentences are also a gold false negative when they are equal after `normalize_text`
(lower-case, whitespace collapsed): exact duplicates, as web corpora hold them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dclr.data.sts import normalize, read_sick, read_stsb, sick_rows
from dclr.data.text import read_lines
from dclr.errors import ConfigError, InputError

SOURCES = ("mrpc", "stsb", "sick")
STSB_MIN_SCORE = 4.0  # "mostly equivalent" and above on STS-B's 0-5 scale
SICK_MIN_SCORE = 4.5  # SICK relatedness, together with the ENTAILMENT label
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
MRPC_COLUMNS = 5  # Quality, #1 ID, #2 ID, #1 String, #2 String


@dataclass(frozen=True)
class ParaphrasePair:
    first: str
    second: str
    source: str


def normalize_text(sentence: str) -> str:
    """The duplicate key of a sentence: lower-cased, whitespace collapsed."""
    return " ".join(sentence.lower().split())


def pair_key(a: str, b: str) -> frozenset[str]:
    """Order-free key of a sentence pair, on normalised text."""
    return frozenset((normalize_text(a), normalize_text(b)))


def parse_sources(spec: str) -> tuple[str, ...]:
    """'mrpc,stsb,sick' -> ('mrpc', 'stsb', 'sick'); unknown names are a ConfigError."""
    names = tuple(s.strip() for s in spec.split(",") if s.strip())
    unknown = [s for s in names if s not in SOURCES]
    if unknown or not names:
        raise ConfigError(
            f"paraphrase_sources {spec!r}: unknown or empty; choose a comma-separated subset "
            f"of {', '.join(SOURCES)}"
        )
    return names


def read_mrpc(root: Path, split: str) -> list[tuple[str, str, int]]:
    """(sentence1, sentence2, label) rows of MRPC's tab-separated file (header skipped)."""
    path = root / "senteval" / "MRPC" / MRPC_FILES[split]
    rows = []
    for number, line in enumerate(read_lines(path), start=1):
        if number == 1 or not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != MRPC_COLUMNS or fields[0].strip() not in ("0", "1"):
            raise InputError(
                f"expected {MRPC_COLUMNS} tab-separated fields starting with a 0/1 label, "
                f"found {len(fields)} fields",
                path=path,
                line=number,
                fix="MRPC rows are Quality, #1 ID, #2 ID, #1 String, #2 String",
            )
        rows.append((normalize(fields[3]), normalize(fields[4]), int(fields[0])))
    return rows


def _train_pairs(root: Path, source: str) -> list[ParaphrasePair]:
    if source == "mrpc":
        return [ParaphrasePair(a, b, "mrpc") for a, b, y in read_mrpc(root, "train") if y == 1]
    if source == "stsb":
        p = read_stsb(root, "train")
        return [
            ParaphrasePair(a, b, "stsb")
            for a, b, s in zip(p.sentences1, p.sentences2, p.scores, strict=True)
            if s >= STSB_MIN_SCORE
        ]
    labels = _sick_labels(root)
    p = read_sick(root, "train")
    return [
        ParaphrasePair(a, b, "sick")
        for a, b, s, label in zip(p.sentences1, p.sentences2, p.scores, labels, strict=True)
        if s >= SICK_MIN_SCORE and label == "ENTAILMENT"
    ]


def _sick_labels(root: Path) -> list[str]:
    """entailment_judgment (column 4) of SICK train, aligned with `read_sick`'s rows."""
    return [fields[4] for _, fields in sick_rows(root, "train", columns=5)]


def evaluation_pair_keys(root: Path) -> set[frozenset[str]]:
    """Keys of every dev/test pair of STS-B, SICK and MRPC (pairs that must never be placed)."""
    keys: set[frozenset[str]] = set()
    for split in ("dev", "test"):
        for p in (read_stsb(root, split), read_sick(root, split)):
            keys.update(pair_key(a, b) for a, b in zip(p.sentences1, p.sentences2, strict=True))
    keys.update(pair_key(a, b) for a, b, _ in read_mrpc(root, "test"))
    return keys


def gold_paraphrase_pairs(root: Path, sources: Sequence[str] = SOURCES) -> list[ParaphrasePair]:
    """Train-split paraphrase pairs of `sources`, deduplicated, none equal to an eval pair.

    Pairs of two identical sentences are dropped (they are duplicates, not paraphrase pairs)."""
    banned = evaluation_pair_keys(root)
    seen: set[frozenset[str]] = set()
    out = []
    for source in sources:
        for pair in _train_pairs(root, source):
            key = pair_key(pair.first, pair.second)
            if len(key) < 2 or key in banned or key in seen:
                continue
            seen.add(key)
            out.append(pair)
    return out


class GoldIndex:
    """Answers "is (a, b) a gold false negative?": a gold paraphrase pair or an exact duplicate."""

    def __init__(self, pairs: Iterable[ParaphrasePair]) -> None:
        self.keys = {pair_key(p.first, p.second) for p in pairs}

    def matrix(self, sentences: Sequence[str]) -> list[list[bool]]:
        """(n, n) booleans, True where sentences i != j (positions) are gold false negatives."""
        norm = [normalize_text(s) for s in sentences]
        n = len(norm)
        out = [[False] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                hit = norm[i] == norm[j] or frozenset((norm[i], norm[j])) in self.keys
                out[i][j] = out[j][i] = hit
        return out
