"""`batch_token_ids` gives the ids of the tokenizer's own call, whatever the tokenizer's settings
and whatever an earlier call left in its backend."""

from __future__ import annotations

import pytest
import torch
from helpers import SAMPLE_SENTENCES, minilm_path

from dclr.models.token_ids import batch_features, batch_token_ids

TEXTS = [
    *SAMPLE_SENTENCES,
    "",
    "   ",
    "Ünïcödé façade — naïve café, 東京の天気は晴れ, emoji 🙂🚀.",
    "[CLS] a [SEP] b [MASK] c [PAD]",
    " ".join(f"word{i}" for i in range(700)),  # past every limit below
    "A man is playing a guitar.",  # a repeat
]


def reference(tokenizer, texts, limit):
    return [list(x) for x in tokenizer(texts, truncation=True, max_length=limit)["input_ids"]]


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path())


@pytest.mark.parametrize("limit", [8, 128, 512])
def test_the_ids_are_the_calls_ids(minilm_tokenizer, limit):
    assert batch_token_ids(minilm_tokenizer, TEXTS, limit) == reference(
        minilm_tokenizer, TEXTS, limit
    )


def test_a_padding_call_before_does_not_pad_them(minilm_tokenizer):
    """An earlier call with padding leaves it set on the backend; the first text's own call
    clears it again, as every call sets what its arguments ask."""
    minilm_tokenizer(TEXTS, padding="max_length", max_length=64, truncation=True)
    ids = batch_token_ids(minilm_tokenizer, TEXTS, 32)
    assert ids == reference(minilm_tokenizer, TEXTS, 32)
    assert len(ids[2]) < 32  # "The cat sleeps." unpadded


def test_the_tokenizers_own_settings_hold(minilm_tokenizer):
    """Left truncation and split special tokens are the tokenizer's, carried by its call."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        minilm_path(), truncation_side="left", split_special_tokens=True
    )
    ids = batch_token_ids(tokenizer, TEXTS, 16)
    assert ids == reference(tokenizer, TEXTS, 16)
    assert ids != batch_token_ids(minilm_tokenizer, TEXTS, 16)  # the settings changed them


def test_a_byte_level_bpe_tokenizer_gives_its_calls_ids():
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS * 3, vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"])
    bpe.post_processor = RobertaProcessing(("</s>", bpe.token_to_id("</s>")),
                                           ("<s>", bpe.token_to_id("<s>")))  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    ids = batch_token_ids(tokenizer, TEXTS, 24)
    assert ids == reference(tokenizer, TEXTS, 24)
    assert all(x[0] == bpe.token_to_id("<s>") for x in ids)


class SlowTokenizer:
    """A tokenizer without a Rust backend: the plain call is the path."""

    is_fast = False

    def __call__(self, texts, truncation, max_length):
        return {"input_ids": [[len(t)][:max_length] for t in texts]}


def test_a_slow_tokenizer_takes_the_plain_call_and_no_text_gives_no_ids():
    assert batch_token_ids(SlowTokenizer(), ["ab", "abc"], 4) == [[2], [3]]
    assert batch_token_ids(SlowTokenizer(), [], 4) == []


def reference_features(tokenizer, texts, limit, multiple):
    return dict(tokenizer(texts, padding=True, truncation=True, max_length=limit,
                          pad_to_multiple_of=multiple, return_tensors="pt"))  # fmt: skip


def assert_same_features(a, b):
    assert list(a) == list(b)  # the same inputs, in the call's order
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


@pytest.mark.parametrize(("limit", "multiple"), [(8, None), (32, 8), (512, None)])
def test_a_padded_batch_is_the_calls_batch(minilm_tokenizer, limit, multiple):
    features = batch_features(minilm_tokenizer, TEXTS, limit, multiple)
    assert_same_features(features, reference_features(minilm_tokenizer, TEXTS, limit, multiple))
    assert set(features) == {"input_ids", "token_type_ids", "attention_mask"}  # BERT's inputs
    if multiple:
        assert features["input_ids"].shape[1] % multiple == 0


def test_a_padded_batch_keeps_the_tokenizers_side_and_inputs():
    """Left padding, and a model without token type ids (byte-level BPE, RoBERTa's inputs)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS * 3, vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, pad_token="<pad>", padding_side="left",
        model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip
    tokenizer(TEXTS, truncation=True, max_length=5)  # an earlier call without padding
    features = batch_features(tokenizer, TEXTS, 24)
    assert_same_features(features, reference_features(tokenizer, TEXTS, 24, None))
    assert set(features) == {"input_ids", "attention_mask"}
    assert features["attention_mask"][2, 0] == 0  # a short text, padded on the left


def test_one_text_takes_the_call(minilm_tokenizer):
    one = batch_features(minilm_tokenizer, TEXTS[:1], 16)
    assert_same_features(one, reference_features(minilm_tokenizer, TEXTS[:1], 16, None))
