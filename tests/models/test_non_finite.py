"""NaN and inf are detected at inference: a model with non-finite weights is refused at load,
and an encode that produces a non-finite vector raises instead of returning it."""

import numpy as np
import pytest
import torch
from helpers import make_tiny_model_dir

from dclr.errors import InputError, NonFiniteVectors
from dclr.models.encoder import SentenceEncoder, check_finite_rows
from dclr.models.precision import load_inference_encoder


def test_a_non_finite_row_is_named():
    vectors = np.ones((4, 3), dtype=np.float32)
    check_finite_rows(vectors)  # finite: nothing to say
    vectors[2, 1] = np.nan
    vectors[3, 0] = np.inf
    with pytest.raises(NonFiniteVectors, match=r"2 of 4 texts \(first: row 2\).*diverged"):
        check_finite_rows(vectors)
    with pytest.raises(NonFiniteVectors, match="bf16 or fp32"):
        check_finite_rows(vectors, "fp16")


def test_a_model_with_nan_weights_is_refused_at_load_and_its_vectors_never_returned(tmp_path):
    folder = make_tiny_model_dir(tmp_path / "model")
    encoder = SentenceEncoder.from_pretrained(folder, pooler="mean")
    with torch.no_grad():
        norm = encoder.backbone.embeddings.LayerNorm.weight
        norm[0] = float("nan")  # what a diverged step leaves in the weights
    encoder.backbone.save_pretrained(folder)
    with pytest.raises(InputError, match=r"1 non-finite weight.*embeddings\.LayerNorm\.weight"):
        load_inference_encoder(str(folder), pooler="mean", device="cpu")
    loaded = SentenceEncoder.from_pretrained(folder, pooler="mean")  # training's loader
    with pytest.raises(NonFiniteVectors, match="2 of 2 texts"):
        loaded.encode(["a cat", "a dog"])
