"""Export: a saved encoder loads in stock sentence-transformers with identical embeddings, keeps no
training-only parts, and loading errors say what is wrong and how to fix it."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from safetensors import safe_open
from sentence_transformers import SentenceTransformer

from dclr.data.sts import read_stsb
from dclr.errors import InputError
from dclr.models.encoder import DCLR_CONFIG, SentenceEncoder
from dclr.models.export import save_encoder

MAX_ABS_DIFF = 1e-5  # float32 forward passes of the same weights, batched differently
SENTENCES = [
    "A man is playing a guitar.",
    "A woman slices an onion on a wooden board while the radio plays.",
    "Hi",
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "Two dogs run through a field.",
    "unicode: café naïve résumé",
]
SLOW_SENTENCE_COUNT = 50


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a - b).max())


def sentence_transformers_encode(path: Path, sentences: list[str]) -> np.ndarray:
    model = SentenceTransformer(str(path), device="cpu")
    return model.encode(sentences, convert_to_numpy=True)


@pytest.mark.parametrize("pooler", ["mean", "cls_before_pooler", "avg_first_last", "avg_top2"])
def test_saved_encoder_loads_in_sentence_transformers(tiny_encoder, tmp_path, pooler):
    encoder = tiny_encoder(pooler)
    path = save_encoder(encoder, tmp_path / "model")
    assert json.loads((path / DCLR_CONFIG).read_text())["pooler"] == pooler
    ours = SentenceEncoder.from_pretrained(path).encode(SENTENCES)
    theirs = sentence_transformers_encode(path, SENTENCES)
    assert max_abs_diff(ours, theirs) < MAX_ABS_DIFF
    assert max_abs_diff(ours, encoder.encode(SENTENCES)) < MAX_ABS_DIFF


def test_training_head_is_not_exported(tiny_encoder, tmp_path):
    encoder = tiny_encoder("cls", mlp_head=True)
    assert any(name.startswith("mlp_head.") for name, _ in encoder.named_parameters())
    path = save_encoder(encoder, tmp_path / "model")
    with safe_open(str(path / "model.safetensors"), framework="pt") as weights:
        keys = list(weights.keys())
    assert keys
    assert not [k for k in keys if "mlp" in k]
    assert json.loads((path / DCLR_CONFIG).read_text())["pooler"] == "cls_before_pooler"
    # The exported model is the [CLS] vector itself, as the training encoder gives in eval mode.
    with torch.no_grad():
        batch = encoder.tokenize(SENTENCES)
        cls_vectors = encoder.eval()(**batch).numpy()
    loaded = SentenceEncoder.from_pretrained(path)
    assert loaded.pooler == "cls_before_pooler"
    assert loaded.mlp_head is None
    assert max_abs_diff(loaded.encode(SENTENCES), cls_vectors) < MAX_ABS_DIFF
    assert max_abs_diff(sentence_transformers_encode(path, SENTENCES), cls_vectors) < MAX_ABS_DIFF


@pytest.mark.parametrize("pooler", [None, "mean"])
def test_folder_without_config_is_an_input_error(tmp_path, pooler):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("no weights here\n")
    with pytest.raises(InputError, match="no config.json") as err:
        SentenceEncoder.from_pretrained(folder, pooler=pooler)
    assert err.value.path == str(folder)
    assert str(folder) in str(err.value)
    assert "fix" in str(err.value)


def test_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist") as err:
        SentenceEncoder.from_pretrained(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(err.value)


def test_hub_id_while_offline_is_an_input_error_with_a_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: set the flag it consults too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="from the Hugging Face Hub") as err:
        SentenceEncoder.from_pretrained("dclr-tests/no-such-model", pooler="mean")
    assert "'dclr-tests/no-such-model'" in str(err.value)
    assert "fix:" in str(err.value)


@pytest.mark.slow
def test_minilm_round_trip_through_sentence_transformers(minilm_path, data_dir, tmp_path):
    pairs = read_stsb(data_dir, "test")
    sentences = [*pairs.sentences1, *pairs.sentences2][:SLOW_SENTENCE_COUNT]
    encoder = SentenceEncoder.from_pretrained(minilm_path)  # pooler from its 1_Pooling: mean
    assert encoder.pooler == "mean"
    path = save_encoder(encoder, tmp_path / "minilm")
    ours = SentenceEncoder.from_pretrained(path).encode(sentences)
    assert max_abs_diff(ours, sentence_transformers_encode(path, sentences)) < MAX_ABS_DIFF
    # The published model adds a Normalize module; normalised, ours gives the same vectors.
    published = sentence_transformers_encode(minilm_path, sentences)
    normalised = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    assert max_abs_diff(normalised, published) < MAX_ABS_DIFF


def test_eval_pooler_pools_differently_in_training_and_evaluation(tmp_path, tokenizer):
    # ConSERT: average of the last layer in training (consert.txt l.68), of the last two at
    # evaluation (l.79); the exported model is the evaluation one.
    from helpers import tiny_bert

    backbone = tiny_bert(len(tokenizer))
    for module in backbone.modules():  # no dropout: train and eval mode differ only by pooler
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    encoder = SentenceEncoder(backbone, tokenizer, "mean", eval_pooler="avg_top2")
    mean = SentenceEncoder(backbone, tokenizer, "mean")
    top2 = SentenceEncoder(backbone, tokenizer, "avg_top2")
    assert encoder.active_pooler == "mean" and encoder.inference_pooler == "avg_top2"
    features = encoder.tokenize(SENTENCES[:3])
    encoder.train(), mean.train()
    assert torch.equal(encoder(**features), mean(**features))
    encoder.eval(), top2.eval()
    assert encoder.active_pooler == "avg_top2"
    assert torch.equal(encoder(**features), top2(**features))
    np.testing.assert_array_equal(encoder.encode(SENTENCES), top2.encode(SENTENCES))
    assert encoder.training is False
    path = save_encoder(encoder, tmp_path / "model")
    assert json.loads((path / DCLR_CONFIG).read_text())["pooler"] == "avg_top2"
    with pytest.raises(Exception, match="MLP head"):
        SentenceEncoder(backbone, tokenizer, "cls", mlp_head=True, eval_pooler="mean")
