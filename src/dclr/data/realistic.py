"""Duplicate-rich training corpora built from the shared data, the way a user's own text is
(issue 23). Deterministic (a fixed seed), and from train / dev splits only: no STS, SICK, SNLI or
INLI *test* sentence enters them.

* `scraped`: every distinct sentence of the STS-B and SICK train splits, then, as scraped text
  repeats itself, a copy of `SCRAPED_SHARE` of them (exactly, lower-cased, upper-cased or with
  doubled / padded whitespace: equal after `normalize_text`), the lines shuffled. The duplicate-free
  sampler (`data.no_duplicates`) removes exactly this kind of false negative.
* `clusters`: clusters of near-paraphrases: SNLI dev premises (once per hypothesis, as SNLI ships
  them: exact repeats) with their entailed hypotheses, and INLI train premises with their
  explicit entailments, the lines shuffled. Most false negatives here are paraphrases, which the
  duplicate-free sampler cannot see.

`load_corpus("scraped")` / `load_corpus("clusters")` build them in memory; `dclr data
build-corpus NAME -o FILE` writes one to a text file (one sentence per line).
"""

from __future__ import annotations

import random
from pathlib import Path

from dclr.errors import ConfigError

SCRAPED = "scraped"
CLUSTERS = "clusters"
REALISTIC = (SCRAPED, CLUSTERS)
SEED = 2305  # fixed: a built-in corpus is the same on every machine
SCRAPED_SHARE = 0.4  # share of distinct lines that get a copy
VARIANTS = ("exact", "lower", "upper", "spaces")


def _variant(sentence: str, kind: str) -> str:
    if kind == "lower":
        return sentence.lower()
    if kind == "upper":
        return sentence.upper()
    if kind == "spaces":
        return "  " + "  ".join(sentence.split()) + " "
    return sentence


def scraped_corpus(root: Path, share: float = SCRAPED_SHARE, seed: int = SEED) -> list[str]:
    """STS-B + SICK train sentences with `share` of them repeated once (exact or a case /
    whitespace variant), shuffled."""
    from dclr.data.sts import read_sick, read_stsb

    seen: dict[str, None] = {}
    for pairs in (read_stsb(root, "train"), read_sick(root, "train")):
        for s in (*pairs.sentences1, *pairs.sentences2):
            if s.strip():
                seen.setdefault(s, None)
    distinct = list(seen)
    rng = random.Random(seed)
    copies = rng.sample(distinct, round(share * len(distinct)))
    lines = distinct + [_variant(s, rng.choice(VARIANTS)) for s in copies]
    rng.shuffle(lines)
    return lines


def cluster_corpus(root: Path, seed: int = SEED) -> list[str]:
    """SNLI dev premises + entailed hypotheses, INLI train premises + explicit entailments."""
    from dclr.data.inli import read_inli
    from dclr.data.nli import read_senteval_nli

    lines: list[str] = []
    for pair in read_senteval_nli(root / "senteval" / "SNLI", "dev"):
        lines.append(pair.premise)  # once per hypothesis, as SNLI ships it: exact repeats
        if pair.label_name == "entailment":
            lines.append(pair.hypothesis)
    for row in read_inli(root / "inli" / "train.csv"):
        lines += [row.premise, row.explicit]
    rng = random.Random(seed)
    lines = [s for s in lines if s.strip()]
    rng.shuffle(lines)
    return lines


def build_realistic(name: str, root: Path) -> list[str]:
    """The corpus `name` (scraped | clusters) built from the data folder `root`."""
    if name not in REALISTIC:  # it gave the clusters corpus for any other name
        raise ConfigError(f"unknown corpus {name!r}; choose from {', '.join(REALISTIC)}")
    return scraped_corpus(root) if name == SCRAPED else cluster_corpus(root)


def duplicate_share(lines: list[str]) -> float:
    """Share of lines equal (after normalisation) to an earlier line."""
    from dclr.data.report import duplicate_count

    return duplicate_count(lines) / len(lines) if lines else 0.0
