"""SentEval's STS text: the Moses tokenisation and lower-casing its download script applies.

SentEval's `data/downstream/get_transfer_data.bash` (the data SimCSE's and DCLR's `evaluation.py`
read) pipes both sentences of STS12-16 and of STS-B through `tokenizer.perl -l en -no-escape` and
`lowercase.perl` (e.g. yym6472/ConSERT's copy, `data/get_transfer_data.bash` l.101-102 and
l.122-123); SICK it takes as released. The shared data and MTEB hold the raw originals. For an
uncased model the two give nearly the same scores; a cased one (RoBERTa) sees different text, so
the published RoBERTa numbers were computed on this form. `text="senteval"` on `StsEvaluator` (and
`dclr eval --sts-text senteval`, `run.sts_text`) applies it to raw files: sacremoses, the Python
port of the Moses tokenizer, with `escape=False`, then `str.lower()` (Perl's `lc`). Data already
downloaded in SentEval's form needs nothing (tokenising it twice is not a no-op): keep `raw`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from dclr.data.sts import STS_SUBSETS, StsPairs
from dclr.errors import ConfigError

StsText = Literal["raw", "senteval"]
STS_TEXTS: tuple[str, ...] = ("raw", "senteval")
# the tasks whose sentences SentEval's script tokenises and lower-cases (SICK is left as released)
SENTEVAL_PROCESSED = (*STS_SUBSETS, "STSBenchmark")


def check_sts_text(text: str) -> None:
    if text not in STS_TEXTS:
        raise ConfigError(f"sts_text must be raw or senteval, got {text!r}")


def moses_lower() -> Callable[[str], str]:
    """The per-sentence transform (memoised): Moses-tokenised English, lower-cased."""
    try:
        from sacremoses import MosesTokenizer
    except ModuleNotFoundError:
        raise ConfigError(
            "sts_text: senteval needs sacremoses (the Moses tokenizer SentEval's data went "
            "through)\n  fix: pip install 'dclr[senteval-text]' (or pip install sacremoses)"
        ) from None
    tokenizer = MosesTokenizer(lang="en")
    seen: dict[str, str] = {}

    def transform(sentence: str) -> str:
        out = seen.get(sentence)
        if out is None:
            out = tokenizer.tokenize(sentence, escape=False, return_str=True).lower()
            seen[sentence] = out
        return out

    return transform


def as_text(
    groups: list[StsPairs], text: StsText, transform: Callable[[str], str]
) -> list[StsPairs]:
    """`groups` as `text` wants them: unchanged for raw, and for senteval the sentences of
    STS12-16 and STS-B through `transform` (`moses_lower()`); SICK stays as it is."""
    if text == "raw":
        return groups
    return [
        dataclasses.replace(
            p,
            sentences1=[transform(s) for s in p.sentences1],
            sentences2=[transform(s) for s in p.sentences2],
        )
        if p.task in SENTEVAL_PROCESSED
        else p
        for p in groups
    ]
