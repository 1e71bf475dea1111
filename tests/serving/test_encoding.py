"""The serving encoder adapter: texts -> token ids as bulk encoding makes them."""

from __future__ import annotations

from dclr.data.text import CHARS_PER_TOKEN_BOUND
from dclr.models.encoder import SentenceEncoder, model_limit
from dclr.serving.encoding import encoder_functions


def test_served_texts_are_cut_by_characters_before_the_tokenizer(tiny_model_dir):
    """Issue 47 point 3: the serving tokenizer took every text whole (`--max-chars` can be
    raised to any size); it now cuts as bulk encoding does, to the same ids."""
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean")
    seen: list[int] = []
    tokenizer = encoder.tokenizer

    def recording(texts, **kwargs):
        seen.extend(len(t) for t in texts)
        return tokenizer(texts, **kwargs)

    encoder.tokenizer = recording
    tokenize, _ = encoder_functions(encoder)
    long = "words of a long text " * 50_000  # 1,050,000 characters
    ids = tokenize(["short", long])
    encoder.tokenizer = tokenizer
    limit = encoder.max_length or model_limit(tokenizer)
    assert max(seen) <= limit * CHARS_PER_TOKEN_BOUND
    assert ids == [list(x) for x in tokenizer(["short", long], truncation=True,
                                              max_length=limit)["input_ids"]]  # fmt: skip
