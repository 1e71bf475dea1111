"""SentEval's STS text (`dclr.data.senteval_text`): Moses-tokenised, lower-cased STS12-16 and
STS-B, SICK as released."""

import sys

import numpy as np
import pytest

from dclr.data.senteval_text import as_text, check_sts_text, moses_lower
from dclr.data.sts import StsPairs
from dclr.errors import ConfigError

pytest.importorskip("sacremoses")

# What Moses' tokenizer.perl -l en -no-escape then lowercase.perl print for these lines
# (English clitics split before the apostrophe, punctuation and symbols apart).
MOSES = {
    "One woman is measuring another woman's ankle.": (
        "one woman is measuring another woman 's ankle ."
    ),
    'He paid $4 (or 3.5%) for "it".': 'he paid $ 4 ( or 3.5 % ) for " it " .',
    "I can't go - it's 9:30!": "i can 't go - it 's 9 : 30 !",
}


def pairs(task: str, first: str, second: str) -> StsPairs:
    return StsPairs(task, "x", [first], [second], np.array([3.0]))


def test_moses_lower_gives_senteval_text():
    transform = moses_lower()
    for raw, senteval in MOSES.items():
        assert transform(raw) == senteval


def test_only_sts12_16_and_stsb_are_processed():
    raw, senteval = next(iter(MOSES.items()))
    groups = [
        pairs("STS13", raw, raw),
        pairs("STSBenchmark", raw, raw),
        pairs("SICKRelatedness", raw, raw),
    ]
    out = as_text(groups, "senteval", moses_lower())
    assert [p.sentences1[0] for p in out] == [senteval, senteval, raw]
    assert as_text(groups, "raw", moses_lower()) is groups


def test_an_unknown_text_form_and_a_missing_tokenizer_name_the_fix(monkeypatch):
    with pytest.raises(ConfigError, match="raw or senteval"):
        check_sts_text("moses")
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'dclr\[senteval-text\]'"):
        moses_lower()
