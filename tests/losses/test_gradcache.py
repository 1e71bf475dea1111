"""GradCache: same loss and gradients as the uncached loss; dropout replayed between passes."""

import pytest
import torch
from helpers import TINY, minilm_path
from transformers import AutoTokenizer, BertConfig, BertModel

from dclr.contract import Batch
from dclr.losses.dclr import DCLRLoss
from dclr.losses.simcse import SimCSELoss, simcse_loss
from dclr.models.encoder import SentenceEncoder
from dclr.training.gradcache import GradCache

SENTENCES = [
    "A man plays a guitar.",
    "Dogs run.",
    "The stock market fell sharply today.",
    "It rains.",
    "Two kids are playing football in the park.",
    "Tea or coffee?",
]


def encoder(dropout: float) -> SentenceEncoder:
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        initializer_range=0.2,
        **TINY,
    )
    return SentenceEncoder(BertModel(config), tokenizer, "cls", mlp_head=True).train()


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("chunk", [1, 4, 12])
def test_simcse_cached_equals_uncached_without_dropout(chunk):
    enc = encoder(0.0)
    features = enc.tokenize(SENTENCES)
    loss = SimCSELoss(enc, 0.05)
    reference = loss(Batch(features))["loss"]
    reference.backward()
    expected = grads(enc)
    cached = GradCache(loss, chunk)(Batch(features))
    assert cached["loss"].item() == pytest.approx(reference.item(), abs=1e-6)
    assert_same(grads(enc), expected)


def test_dclr_cached_equals_uncached_without_dropout():
    enc = encoder(0.0)
    features = enc.tokenize(SENTENCES)
    loss = DCLRLoss.of(
        enc,
        None,
        temperature=0.05,
        noise_ratio=1.0,
        weighting="self",
        false_negative_threshold=0.8,  # at 0.5 this model dropped every negative (loss ~5e-6)
        seed=3,
    )
    parts = loss(Batch(features, step=7))
    assert 0 < parts["dropped_fraction"].item() < 1  # the weights decide part of the batch
    reference = parts["loss"]
    reference.backward()
    expected = grads(enc)
    cached = GradCache(loss, 5)(Batch(features, step=7))
    assert cached["loss"].item() == pytest.approx(reference.item(), abs=1e-6)
    assert_same(grads(enc), expected)


def test_dropout_is_replayed_between_the_two_passes():
    """With dropout on, GradCache equals the same chunked computation done with gradients."""
    enc = encoder(0.3)
    features = enc.tokenize(SENTENCES)
    doubled = {k: torch.cat([v, v]) for k, v in features.items()}
    chunk = 5
    torch.manual_seed(11)
    z = torch.cat(
        [enc(**{k: v[s : s + chunk] for k, v in doubled.items()}) for s in range(0, 12, chunk)]
    )
    reference = simcse_loss(z[:6], z[6:], 0.05)
    reference.backward()
    expected = grads(enc)
    torch.manual_seed(11)
    cached = GradCache(SimCSELoss(enc, 0.05), chunk)(Batch(features))
    assert cached["loss"].item() == pytest.approx(reference.item(), abs=1e-6)
    assert_same(grads(enc), expected)
    # and the dropout really is on: another seed gives another loss
    torch.manual_seed(12)
    assert GradCache(SimCSELoss(enc, 0.05), chunk)(Batch(features))["loss"].item() != pytest.approx(
        reference.item(), abs=1e-6
    )
