"""Positive views (ConSERT): each strategy changes exactly what it should, reproducibly."""

import pytest
import torch

from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.simcse import SimCSELoss, two_views
from dclr.views.adversarial import fgsm_perturbation
from dclr.views.cutoff import (
    cut_elements,
    cut_features,
    cut_tokens,
    element_dropout_mask,
    feature_cutoff_mask,
    span_cutoff_mask,
    token_cutoff_mask,
)
from dclr.views.masks import content_mask
from dclr.views.pair import PositiveViews, ViewSpec, view_generator, view_inputs
from dclr.views.shuffle import shuffle_permutation, shuffled_position_ids
from dclr.views.strategies import VIEW_STRATEGIES, check_view

SENTENCES = [
    "a man is playing a large flute on the stage tonight .",
    "two dogs run .",
    "the quick brown fox jumps over the lazy dog near the river bank",
]


@pytest.fixture
def batch(tokenizer):
    features = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    content = content_mask(
        features["input_ids"], features["attention_mask"], tokenizer.all_special_ids
    )
    return features, content


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---- masks ----------------------------------------------------------------------------------
def test_content_mask_excludes_special_tokens_and_padding(batch, tokenizer):
    features, content = batch
    ids, mask = features["input_ids"], features["attention_mask"]
    assert not content[:, 0].any()  # [CLS]
    assert not content[ids == tokenizer.sep_token_id].any()
    assert not content[mask == 0].any()
    lengths = mask.sum(1)
    assert content.sum(1).tolist() == (lengths - 2).tolist()  # all but [CLS] and [SEP]


# ---- token shuffle --------------------------------------------------------------------------
def test_shuffle_keeps_the_multiset_of_real_tokens_and_the_special_tokens_in_place(batch):
    features, content = batch
    ids = features["input_ids"]
    perm = shuffle_permutation(content, gen())
    reordered = torch.empty_like(ids).scatter_(1, perm, ids)  # token j moves to slot perm[j]
    assert torch.equal(reordered[~content], ids[~content])  # [CLS], [SEP], padding untouched
    for row in range(ids.shape[0]):
        assert sorted(reordered[row][content[row]].tolist()) == sorted(
            ids[row][content[row]].tolist()
        )
    assert not torch.equal(reordered, ids)  # something moved
    assert torch.equal(perm[~content], torch.arange(ids.shape[1]).expand_as(perm)[~content])


def test_shuffled_position_ids_start_at_the_offset(batch):
    _, content = batch
    positions = shuffled_position_ids(content, gen(), offset=2)
    assert positions[:, 0].tolist() == [2] * content.shape[0]
    assert sorted(positions[0].tolist()) == list(range(2, 2 + content.shape[1]))


def test_shuffled_positions_equal_reordered_tokens_in_the_encoder(batch, tiny_encoder):
    """Positions permuted through `position_ids` = the tokens themselves reordered (mean pool)."""
    features, content = batch
    encoder = tiny_encoder(pooler="mean")
    inputs = view_inputs(encoder, features, ViewSpec("token_shuffle"), gen(3))
    perm = inputs["position_ids"]
    reordered = dict(features)
    reordered["input_ids"] = torch.empty_like(features["input_ids"]).scatter_(
        1, perm, features["input_ids"]
    )
    with torch.no_grad():
        shuffled = encoder(**inputs)
        by_tokens = encoder(**reordered)
        original = encoder(**features)
    torch.testing.assert_close(shuffled, by_tokens, atol=1e-5, rtol=1e-5)
    assert (shuffled - original).abs().max() > 1e-3


# ---- cutoffs --------------------------------------------------------------------------------
def test_token_cutoff_zeroes_floor_rate_n_content_tokens_only(batch):
    _, content = batch
    rate = 0.3
    cut = token_cutoff_mask(content, rate, gen())
    assert not cut[~content].any()
    expected = [int(n * rate) for n in content.sum(1).tolist()]
    assert cut.sum(1).tolist() == expected
    embeds = torch.randn(*content.shape, 8)
    out = cut_tokens(embeds, cut)
    assert (out[cut] == 0).all()
    assert torch.equal(out[~cut], embeds[~cut])


def test_span_cutoff_zeroes_one_contiguous_span_of_content_tokens(batch):
    _, content = batch
    rate = 0.4
    for seed in range(5):
        cut = span_cutoff_mask(content, rate, gen(seed))
        assert not cut[~content].any()
        for row in range(content.shape[0]):
            where = torch.nonzero(cut[row]).squeeze(1).tolist()
            assert len(where) == int(int(content[row].sum()) * rate)
            assert where == list(range(where[0], where[0] + len(where)))  # contiguous


def test_feature_cutoff_zeroes_exactly_the_chosen_columns(batch):
    _, content = batch
    b, length, d = *content.shape, 20
    columns = feature_cutoff_mask(b, d, 0.25, gen())
    assert columns.sum(1).tolist() == [5] * b
    assert not torch.equal(columns[0], columns[1])  # chosen per sentence
    embeds = torch.randn(b, length, d) + 3.0  # no accidental zeros
    out = cut_features(embeds, content, columns)
    zero = out == 0
    expected = content[:, :, None] & columns[:, None, :]
    assert torch.equal(zero, expected)
    assert torch.equal(out[~expected], embeds[~expected])


def test_embedding_dropout_zeroes_floor_rate_n_d_elements_of_content_tokens(batch):
    # ConSERT's "dropout" (consert.txt l.71): random elements of the embedding matrix, exact count
    _, content = batch
    d = 8
    cut = element_dropout_mask(content, d, 0.3, gen())
    n = content.sum(1)
    assert cut.sum((1, 2)).tolist() == [int(0.3 * int(k) * d) for k in n]
    assert not cut[~content].any()  # special tokens and padding untouched
    per_token = cut.any(-1) & content
    assert per_token.sum() > cut.shape[0]  # spread over tokens, not whole rows or columns
    embeds = torch.randn(*content.shape, d) + 3.0
    out = cut_elements(embeds, cut)
    assert torch.equal(out == 0, cut) and torch.equal(out[~cut], embeds[~cut])  # no rescaling
    assert torch.equal(cut, element_dropout_mask(content, d, 0.3, gen()))  # seeded


def test_rate_zero_cuts_nothing(batch):
    _, content = batch
    assert not element_dropout_mask(content, 4, 0.0, gen()).any()
    assert not token_cutoff_mask(content, 0.0, gen()).any()
    assert not span_cutoff_mask(content, 0.0, gen()).any()
    assert not feature_cutoff_mask(3, 16, 0.0, gen()).any()


@pytest.mark.parametrize(
    "strategy", ["token_cutoff", "span_cutoff", "feature_cutoff", "embedding_dropout"]
)
def test_cutoff_views_go_through_inputs_embeds_and_keep_gradients(batch, tiny_encoder, strategy):
    features, content = batch
    encoder = tiny_encoder(pooler="mean").train()
    inputs = view_inputs(encoder, features, ViewSpec(strategy, 0.3), gen())
    assert inputs["input_ids"] is None
    embeds = inputs["inputs_embeds"]
    word = encoder.backbone.get_input_embeddings()(features["input_ids"])
    changed = (embeds != word).any(-1)  # (b, L)
    assert changed.any() and not changed[~content].any()
    encoder(**inputs).sum().backward()
    grad = encoder.backbone.get_input_embeddings().weight.grad
    assert grad is not None and grad.abs().sum() > 0


# ---- seeding, dropout, defaults ---------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["token_shuffle", "token_cutoff", "span_cutoff"])
def test_a_seeded_view_is_reproducible_and_the_step_changes_it(batch, tiny_encoder, strategy):
    features, _ = batch
    encoder = tiny_encoder()
    key = "position_ids" if strategy == "token_shuffle" else "inputs_embeds"
    spec = ViewSpec(strategy, 0.3)

    def draw(step):
        return view_inputs(encoder, features, spec, view_generator(seed=7, step=step))[key]

    assert torch.equal(draw(4), draw(4))
    assert not torch.equal(draw(4), draw(5))


def test_none_views_with_dropout_off_are_identical(batch, tiny_encoder):
    features, _ = batch
    encoder = tiny_encoder(pooler="cls", mlp_head=True).train()  # dropout 0.1 in the backbone
    z1, z2 = PositiveViews(ViewSpec("none"), ViewSpec("none")).encode(encoder, features)
    assert torch.equal(z1, z2)
    assert encoder.backbone.training  # restored afterwards
    d1, d2 = PositiveViews(ViewSpec("dropout"), ViewSpec("none")).encode(encoder, features)
    assert not torch.equal(d1, d2)  # the dropout view does differ
    torch.testing.assert_close(d2, z1)  # the `none` view is deterministic


def test_default_dropout_views_are_simcse_unchanged(batch, tiny_encoder):
    features, _ = batch
    encoder = tiny_encoder(pooler="cls", mlp_head=True).train()
    views = PositiveViews(ViewSpec("dropout"), ViewSpec("dropout"))
    torch.manual_seed(0)
    a = SimCSELoss(encoder, 0.05, views=views)(Batch(features, step=3))["loss"]
    torch.manual_seed(0)
    b = SimCSELoss(encoder, 0.05)(Batch(features))["loss"]
    assert torch.equal(a, b)
    torch.manual_seed(1)
    z1, z2 = two_views(encoder, features, views, step=0)
    assert not torch.equal(z1, z2)


def test_shuffle_plus_feature_cutoff_pair_trains(batch, tiny_encoder):
    features, _ = batch
    encoder = tiny_encoder(pooler="avg_top2").train()
    views = PositiveViews(ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2), seed=1)
    loss = SimCSELoss(encoder, 0.1, views=views)(Batch(features, step=0))["loss"]
    loss.backward()
    assert torch.isfinite(loss)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


@pytest.mark.parametrize(
    ("view1", "view2"),
    [(ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2)),
     (ViewSpec("token_cutoff", 0.3), ViewSpec("span_cutoff", 0.3)),
     (ViewSpec("embedding_dropout", 0.1), ViewSpec("none")),
     (ViewSpec("dropout"), ViewSpec("token_shuffle"))],
)  # fmt: skip
def test_views_drawn_ahead_encode_as_views_drawn_in_the_step(batch, tiny_encoder, view1, view2):
    """What the loop draws with the batch (`PositiveViews.draw`, `DrawsAhead`) gives the same
    vectors as the views drawn inside the step: the same generator, drawn in the same order."""
    features, _ = batch
    encoder = tiny_encoder(pooler="mean").train()
    views = PositiveViews(view1, view2, seed=3)
    torch.manual_seed(0)
    in_step = views.encode(encoder, features, step=5)
    drawn = views.draw(encoder, features, step=5)
    torch.manual_seed(0)
    ahead = views.encode(encoder, features, step=5, drawn=drawn)
    for a, b in zip(in_step, ahead, strict=True):
        assert torch.equal(a, b)
    other = views.draw(encoder, features, step=6)  # and a step's draw is its own
    assert any(not torch.equal(t, other[v][k]) for v, d in drawn.items() for k, t in d.items())
    # the draw handed in is the one encoded, not a fresh draw of `step` (which would give
    # `in_step` above whether or not `drawn` were read): step 6's draw at step 5 gives step 6's
    torch.manual_seed(0)
    at_six = views.encode(encoder, features, step=6)
    torch.manual_seed(0)
    handed = views.encode(encoder, features, step=5, drawn=other)
    for a, b in zip(at_six, handed, strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(handed, in_step, strict=True))
    loss = SimCSELoss(encoder, 0.1, views=views)
    assert loss.draw_ahead(Batch(features, step=5)).keys() == drawn.keys()
    assert SimCSELoss(encoder, 0.1).draw_ahead(Batch(features)) is None  # dropout: nothing


# ---- adversarial ----------------------------------------------------------------------------
def test_fgsm_perturbation_has_size_epsilon_on_content_tokens(batch):
    _, content = batch
    grad = torch.randn(*content.shape, 6)
    grad[1] = 0.0  # a zero gradient moves nothing
    delta = fgsm_perturbation(grad, content, epsilon=0.5)
    assert (delta[~content] == 0).all()
    norms = delta.flatten(1).norm(dim=1)
    assert norms[0].item() == pytest.approx(0.5, rel=1e-5)
    assert norms[1].item() == 0.0
    expected = 0.5 * grad[0] * content[0, :, None] / (grad[0] * content[0, :, None]).norm()
    torch.testing.assert_close(delta[0], expected)


def test_adversarial_needs_labels():
    with pytest.raises(ConfigError, match="labels"):
        PositiveViews(ViewSpec("adversarial"), ViewSpec("dropout"))


# ---- bad options ----------------------------------------------------------------------------
def test_every_strategy_is_known():
    assert set(VIEW_STRATEGIES) == {
        "dropout",
        "none",
        "token_shuffle",
        "token_cutoff",
        "span_cutoff",
        "feature_cutoff",
        "embedding_dropout",
        "adversarial",
    }


@pytest.mark.parametrize(
    ("strategy", "rate", "message"),
    [
        ("word_drop", 0.1, "unknown view strategy"),
        ("token_cutoff", 1.0, r"in \[0, 1\)"),
        ("feature_cutoff", -0.1, r"in \[0, 1\)"),
    ],
)
def test_bad_view_options_are_rejected(strategy, rate, message):
    with pytest.raises(ConfigError, match=message):
        check_view(strategy, rate)
    with pytest.raises(ConfigError, match=message):
        ViewSpec(strategy, rate)
