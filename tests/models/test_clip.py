"""Bounded work per text: the tokenizer sees at most `max_tokens * CHARS_PER_TOKEN_BOUND`
characters of a text (so one huge line costs bounded memory), and the cut changes no token the
model keeps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dclr.data.text import CHARS_PER_TOKEN_BOUND, clip_for_tokens
from dclr.training.prepare import sentence_report

HUGE = "word " * 40_000  # 200,000 characters: far past any bound, small enough for a red run
LIMIT = 32


class TokenizerSpy:
    """A tokenizer that records the longest text it was asked to tokenise."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.longest = 0

    def __call__(self, texts, *args, **kwargs):
        batch = [texts] if isinstance(texts, str) else list(texts)
        self.longest = max([self.longest, *(len(t) for t in batch)])
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


TEXTS = {
    "prose": " ".join(f"the {i}th sentence of a long report about rivers." for i in range(200)),
    "100-char words": " ".join(["a" * 100] * 100),  # WordPiece's longest word kept in pieces
    "punctuation": "!?" * 5000,  # a token per character
    "cjk": "日本語の文章です。" * 1000,  # a token per character
    "one huge word": "word " * 10 + "x" * 50_000,  # one [UNK], cut or not
}


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_cut_keeps_every_token_the_model_reads(tokenizer, text):
    full = tokenizer(text, truncation=True, max_length=LIMIT)["input_ids"]
    cut = clip_for_tokens(text, LIMIT)
    assert len(cut) <= LIMIT * CHARS_PER_TOKEN_BOUND
    assert tokenizer(cut, truncation=True, max_length=LIMIT)["input_ids"] == full


def test_short_text_is_not_cut():
    assert clip_for_tokens("a short text", LIMIT) == "a short text"


def test_encode_tokenises_a_bounded_prefix(tiny_encoder):
    encoder = tiny_encoder()
    spy = TokenizerSpy(encoder.tokenizer)
    encoder.tokenizer = spy
    encoder.encode(["a short one", HUGE])
    encoder.tokenize([HUGE], max_length=LIMIT)
    assert 0 < spy.longest <= 512 * CHARS_PER_TOKEN_BOUND  # 512: the tiny encoder's limit


def test_training_data_report_tokenises_a_bounded_prefix(tokenizer):
    spy = TokenizerSpy(tokenizer)
    model = SimpleNamespace(tokenizer=spy)
    report = sentence_report(["a short one", HUGE], ["a short one", HUGE], 0, model, LIMIT)
    assert report["truncated"] == 1  # the cut text still counts as longer than the limit
    assert 0 < spy.longest <= (LIMIT + 1) * CHARS_PER_TOKEN_BOUND


def test_training_data_report_counts_lines_cut_by_the_reader(tmp_path, tokenizer, monkeypatch):
    from dclr.data import corpus as corpus_module
    from dclr.data.corpus import TextFileCorpus
    from dclr.data.report import describe

    monkeypatch.setattr(corpus_module, "MAX_LINE_CHARS", 1000)
    path = tmp_path / "long.txt"
    path.write_text("a short one\n" + "word " * 1000 + "\nanother one\n")
    corpus = TextFileCorpus(path)
    model = SimpleNamespace(tokenizer=tokenizer)
    report = sentence_report(list(corpus), corpus, 0, model, LIMIT)
    assert report["long_lines_cut"] == 1
    assert "1 line(s) too long to read whole" in describe(report)
