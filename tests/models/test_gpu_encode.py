"""The encode loop's GPU paths, checked on the CPU (issue 44): numpy padding equals the
tokenizer's, outputs held on the device and read in one go land in the right rows, and the dev
evaluation's once-tokenised texts give the vectors `encode` gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import SAMPLE_SENTENCES

import dclr.models.encoder as encoder_module
from dclr.methods.base import encode_dev
from dclr.models.encoder import SentenceEncoder, _Outputs, padded_batch


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean").eval()


@pytest.mark.parametrize("side", ["right", "left"])
def test_numpy_padding_equals_the_tokenizers(encoder, side, monkeypatch):
    monkeypatch.setattr(encoder.tokenizer, "padding_side", side)
    ids = encoder.token_ids(SAMPLE_SENTENCES)
    ours = padded_batch(ids, encoder.tokenizer, torch.device("cpu"))
    theirs = encoder.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype
        assert torch.equal(ours[key], value)


def test_outputs_held_on_the_device_land_in_their_rows(encoder, monkeypatch):
    """The GPU's way (held, read back in one go every FLUSH_ROWS), forced on the CPU with a
    flush every few rows: the same array as writing each batch at once. The texts are distinct
    (`encode` encodes each distinct text once: repeated ones would leave too few rows for a
    flush before the end)."""
    texts = [f"{s} ({i})" for i, s in enumerate(SAMPLE_SENTENCES * 4)]
    plain = encoder.encode(texts, batch_size=4)
    real_init, real_flush = _Outputs.__init__, _Outputs.flush
    reads: list[int] = []  # rows read back by each flush that read any

    def held(self, out, device):
        real_init(self, out, device)
        self.wait = True

    def counted(self):
        if self.held:
            reads.append(sum(len(rows) for _, rows, _ in self.held))
        real_flush(self)

    monkeypatch.setattr(_Outputs, "__init__", held)
    monkeypatch.setattr(_Outputs, "flush", counted)
    monkeypatch.setattr(_Outputs, "FLUSH_ROWS", 5)
    assert np.array_equal(encoder.encode(texts, batch_size=4), plain)
    assert len(reads) >= 3 and sum(reads) == len(texts)  # several reads on the way
    reads.clear()
    monkeypatch.setattr(_Outputs, "FLUSH_ROWS", 10**9)  # one read at the end
    assert np.array_equal(encoder.encode(texts, batch_size=4), plain)
    assert reads == [len(texts)]


def test_held_outputs_are_copies_not_views_of_the_batch():
    """A held batch is a copy: the output it came from may be a CUDA graph's, overwritten by the
    next replay (a compiled backbone), or a view that keeps a batch's whole hidden states alive."""
    out = {"cls": np.zeros((2, 3), dtype=np.float32)}
    held = _Outputs(out, torch.device("cuda"))  # the GPU's way; nothing here runs on a GPU
    hidden = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)  # (b, L, d)
    first_token = hidden[:, 0]  # a view, as a CLS pooler gives
    held.add("cls", np.array([0, 1]), first_token)
    assert held.held[0][2].untyped_storage().nbytes() == 2 * 3 * 4  # its own (b, d), not (b, L, d)
    hidden.fill_(-1.0)  # the next replay writes over the graph's output
    held.flush()
    assert out["cls"].tolist() == [[0.0, 1.0, 2.0], [12.0, 13.0, 14.0]]


def test_dev_evaluation_tokenises_once_and_gives_encodes_vectors(encoder, monkeypatch):
    sentences = list(dict.fromkeys(SAMPLE_SENTENCES))
    cache: dict = {}
    calls = {"n": 0}
    real = encoder_module.SentenceEncoder.token_ids

    def counted(self, texts, max_length=None):
        calls["n"] += 1
        return real(self, texts, max_length)

    monkeypatch.setattr(encoder_module.SentenceEncoder, "token_ids", counted)
    first = encode_dev(encoder, sentences, cache)
    second = encode_dev(encoder, sentences, cache)
    assert calls["n"] == 1
    expected = encoder.encode(sentences, batch_size=128)
    assert np.array_equal(first, expected) and np.array_equal(second, expected)
