"""Packed (padding-free) forwards equal padded ones: values, gradients, every pooler, BERT and RoBERTa."""

import pytest
import torch
from helpers import TINY, minilm_path
from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

import dclr.models.encoder as encoder_module
from dclr.models.encoder import SentenceEncoder
from dclr.models.packing import pack, segment_first, segment_mean

SENTENCES = [
    "A man is playing a guitar.",
    "hi",
    "Two dogs run along the beach at sunset.",
    "The cat sleeps.",
    "Stocks fell sharply on Monday after the report was released.",
]
# 3 to 6 tokens each: rows of 16 tokens must hold three or more of them.
SHORT = ["hi", "The cat sleeps.", "ok", "Dogs bark.", "yes", "A man sings."]


def tiny(kind: str, dropout: float = 0.0):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    if kind == "bert":
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            initializer_range=0.2,
            **TINY,
        )
        return BertModel(config), tokenizer
    # RoBERTa counts positions from padding_idx + 1: the packed path must apply that offset.
    config = RobertaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        initializer_range=0.2,
        pad_token_id=tokenizer.pad_token_id,
        **{**TINY, "max_position_embeddings": 514},
    )
    return RobertaModel(config), tokenizer


def test_pack_layout():
    batch = pack([[1, 2, 3], [4], [5, 6]], pad_id=0, row_tokens=4)
    # first-fit decreasing: [1,2,3]+[4] fill row 0; [5,6] goes to row 1
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]
    assert batch.segment.tolist() == [[0, 0, 0, 1], [2, 2, -1, -1]]
    allowed = batch.attention_mask[0, 0] == 0
    assert allowed[0, :3].all() and not allowed[0, 3] and not allowed[3, 0]


def test_rows_as_long_as_the_longest_sentence():
    batch = pack([[1, 2, 3, 4], [5], [6, 7], [8, 9, 10]], pad_id=0, row_tokens=None)
    # rows of 4 (the longest): [1,2,3,4]; [8,9,10]+[5]; [6,7]
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [8, 9, 10, 5], [6, 7, 0, 0]]
    assert batch.segment.tolist() == [[0, 0, 0, 0], [3, 3, 3, 1], [2, 2, -1, -1]]


@pytest.mark.parametrize("rows", [None, 8, 256])
def test_packed_equals_padded_for_every_row_length(rows):
    backbone, tokenizer = tiny("bert")
    encoder = SentenceEncoder(backbone, tokenizer, "mean").eval()
    padded = encoder.encode(SENTENCES, batch_size=4)
    assert encoder.enable_packing()
    encoder.row_tokens = rows
    packed = encoder.encode(SENTENCES, batch_size=4)
    assert (padded - packed).__abs__().max() < 1e-5


def test_segment_pooling():
    hidden = torch.arange(8.0).reshape(1, 4, 2)
    segment = torch.tensor([[1, 1, 0, -1]])
    assert segment_mean(hidden, segment, 2).tolist() == [[4.0, 5.0], [1.0, 2.0]]
    assert segment_first(hidden, segment, 2).tolist() == [[4.0, 5.0], [0.0, 1.0]]


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("pooler", ["cls_before_pooler", "mean", "avg_first_last", "avg_top2"])
def test_packed_equals_padded(kind, pooler, monkeypatch):
    backbone, tokenizer = tiny(kind)
    encoder = SentenceEncoder(backbone, tokenizer, pooler).eval()
    padded = encoder.encode(SHORT, batch_size=len(SHORT))
    assert encoder.enable_packing()
    encoder.row_tokens = 16
    sentences_per_row = []

    def recorded(*args, **kwargs):
        batch = pack(*args, **kwargs)
        sentences_per_row.extend(len(set(row.tolist()) - {-1}) for row in batch.segment)
        return batch

    monkeypatch.setattr(encoder_module, "pack", recorded)
    packed = encoder.encode(SHORT, batch_size=len(SHORT))
    # Sentences really share rows (with whole rows each, a packing bug could not show here).
    assert max(sentences_per_row) >= 3
    assert (padded - packed).__abs__().max() < 1e-5


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_packed_training_gradients_equal_padded(kind):
    backbone, tokenizer = tiny(kind, dropout=0.0)
    encoder = SentenceEncoder(backbone, tokenizer, "cls", mlp_head=True).train()
    features = encoder.tokenize(SENTENCES, max_length=16)

    def grads():
        encoder.zero_grad()
        z = encoder(**features)
        (z.pow(2).sum() + z[0] @ z[1]).backward()
        return {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}

    padded = grads()
    assert encoder.enable_packing()
    packed = grads()
    assert padded.keys() == packed.keys() and padded
    for name in padded:
        torch.testing.assert_close(packed[name], padded[name], atol=1e-5, rtol=1e-4, msg=name)


def test_pooler_cls_without_head_stays_padded():
    backbone, tokenizer = tiny("bert")
    encoder = SentenceEncoder(backbone, tokenizer, "cls")
    assert not encoder.enable_packing() and not encoder.packing
