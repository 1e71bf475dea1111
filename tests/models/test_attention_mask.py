"""dclr.models.attention_mask (issue 44): the padded forward's mask prepared in 4-D is the one
transformers builds, so the vectors are the same bit for bit, and transformers no longer reads a
device value to build it (its `padding_mask.all()`, found by dclr.training.host_syncs)."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel
from transformers.masking_utils import create_bidirectional_mask

from dclr.models import attention_mask as attention_mask_module
from dclr.models.attention_mask import prepared_mask, takes_prepared_mask, use_prepared_mask
from dclr.training.host_syncs import _cpu_detector

SENTENCES = ["a man is playing a flute .", "two dogs run", "the quick brown fox jumps over it"]


def small(kind: str) -> torch.nn.Module:
    args = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=37)  # fmt: skip
    torch.manual_seed(0)
    if kind == "roberta":
        model = RobertaModel(RobertaConfig(**args, pad_token_id=1), add_pooling_layer=False)
    else:
        model = BertModel(BertConfig(**args))
    return model.eval()


@pytest.mark.skipif(attention_mask_module.TRANSFORMERS_MAJOR < 5, reason="transformers 5's path")
@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_the_prepared_mask_is_transformers_own_and_gives_the_same_vectors(kind, tokenizer):
    model = small(kind)
    assert takes_prepared_mask(model)
    features = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    mask = features["attention_mask"]
    assert not mask.all()  # padded: transformers builds a mask (else it drops it)
    embeds = model.embeddings(input_ids=features["input_ids"])
    # positional: transformers 5.0 names the embeddings `input_embeds`, later releases
    # `inputs_embeds` (scripts/test_dependency_floors.sh runs 5.0)
    theirs = create_bidirectional_mask(model.config, embeds, mask)
    ours = prepared_mask(mask)
    assert ours.dtype == theirs.dtype == torch.bool
    assert torch.equal(ours, theirs) and ours.stride() == theirs.stride()
    with torch.no_grad():
        plain = model(**features).last_hidden_state
        prepared = model(**{**features, "attention_mask": ours}).last_hidden_state
    assert torch.equal(plain, prepared)


def test_where_it_applies():
    model = small("bert")
    cpu = torch.ones(2, 3, dtype=torch.long)
    assert not use_prepared_mask("auto", model, cpu)  # auto: a GPU's, not a CPU's
    on_gpu = type("Mask", (), {"device": torch.device("cuda")})()  # only its device is read
    assert use_prepared_mask("auto", model, on_gpu) == (
        attention_mask_module.TRANSFORMERS_MAJOR >= 5
    )
    assert not use_prepared_mask("auto", model, on_gpu, training=False)  # encoding: transformers'
    assert not use_prepared_mask("off", model, cpu)
    assert use_prepared_mask("on", model, cpu) == (attention_mask_module.TRANSFORMERS_MAJOR >= 5)
    model.config._attn_implementation = "eager"  # eager adds a float mask: not ours to build
    assert not takes_prepared_mask(model)
    model.config._attn_implementation = "sdpa"
    model.config.is_decoder = True
    assert not takes_prepared_mask(model)
    model.config.is_decoder = False
    model.config.model_type = "distilbert"  # a family not checked
    assert not takes_prepared_mask(model)


@pytest.mark.skipif(attention_mask_module.TRANSFORMERS_MAJOR < 5, reason="transformers 5's path")
def test_the_encoder_with_a_prepared_mask_reads_nothing_and_encodes_the_same(tiny_encoder):
    """The read transformers makes on every padded forward is gone with the mask prepared (red
    with it off: the read is there), and the vectors are the same bit for bit."""
    encoder = tiny_encoder(pooler="mean")
    features = encoder.tokenize(SENTENCES)
    reads = {}
    for choice in ("off", "on"):
        encoder.prepared_mask = choice
        seen: list[str] = []
        with torch.no_grad(), _cpu_detector(seen.append):
            reads[choice] = (seen, encoder(**features))
    assert reads["off"][0] == ["__bool__"]  # transformers' `padding_mask.all()`
    assert reads["on"][0] == []
    assert torch.equal(reads["off"][1], reads["on"][1])
