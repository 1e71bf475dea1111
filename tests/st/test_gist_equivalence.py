"""dclr's DCLRLoss contains sentence-transformers' GISTEmbedLoss "absolute" rule (issue 37).

On (s, s) pairs with an eval-mode guide, the guide scores every positive at cosine 1, so
GISTEmbedLoss(temperature=0.05, margin_strategy="absolute", margin=m, contrast_anchors=False,
contrast_positives=False) masks exactly the in-batch candidates whose guide cosine is over 1 - m:
DCLR's paper-form weighting at phi = 1 - m without noise negatives (GIST masks with `>`, DCLR
drops with `>=`, so the thresholds here sit between two guide cosines, never on one). Loss and
gradient must agree, with real drops: the test fails if DCLRLoss's weighting changes.
sentence-transformers' own class is used, never a copy.
"""

from __future__ import annotations

import inspect

import pytest
import torch

pytest.importorskip("sentence_transformers")

from dclr.st import DCLRLoss  # noqa: E402

try:
    from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss
except ImportError:  # sentence-transformers < 6
    from sentence_transformers.losses import GISTEmbedLoss

if "contrast_anchors" not in inspect.signature(GISTEmbedLoss.__init__).parameters:
    # releases before contrast_anchors / contrast_positives (e.g. 3.4.1, which pyproject allows)
    # always add the anchor-anchor and positive-positive blocks: no form of theirs is DCLR's
    pytest.skip(
        "this sentence-transformers' GISTEmbedLoss has no contrast_anchors / contrast_positives",
        allow_module_level=True,
    )

from test_st_losses import tiny_st  # noqa: E402

TAU = 0.05
SENTENCES = [
    "a cat sleeps on the sofa", "the cat is asleep on a couch", "two dogs run on the beach",
    "a dog runs by the sea", "the stock market fell today", "shares dropped sharply",
    "he reads a book", "a man is reading", "rain is expected tomorrow", "it will rain soon",
    "kids play football", "children are playing soccer",
]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gist")
    student, guide = tiny_st(root / "student", seed=0, dropout=0.0), tiny_st(root / "guide", seed=3)
    student.eval()
    guide.eval()
    return student, guide


def thresholds(guide) -> list[float]:
    """Three phi values between consecutive off-diagonal guide cosines (no ties), at the 25th,
    50th and 75th percentile: each drops some in-batch candidates and keeps others."""
    with torch.no_grad():
        g = guide.encode(SENTENCES, convert_to_tensor=True, normalize_embeddings=True)
    upper = torch.triu(torch.ones(len(SENTENCES), len(SENTENCES), dtype=torch.bool), diagonal=1)
    cos = (g @ g.T)[upper].sort().values  # each pair once (the matrix is symmetric)
    picks = []
    for q in (0.25, 0.5, 0.75):
        i = int(q * (len(cos) - 1))
        assert cos[i + 1] - cos[i] > 1e-6, "a tie at the chosen threshold"
        picks.append(float((cos[i] + cos[i + 1]) / 2))
    return picks


def loss_and_grads(loss_fn, student, anchors=SENTENCES, positives=SENTENCES):
    """Loss and the student's parameter gradients on (anchor, positive) columns; by default
    (s, s) pairs."""
    student.zero_grad()
    loss = loss_fn([student.tokenize(anchors), student.tokenize(positives)], None)
    loss.backward()
    grads = [p.grad.detach().clone() for p in student.parameters() if p.grad is not None]
    return loss.detach(), grads


def test_dclr_loss_equals_gist_absolute_at_phi_one_minus_margin(models):
    student, guide = models
    phis = thresholds(guide)
    for phi in phis:
        gist = GISTEmbedLoss(student, guide, temperature=TAU, margin_strategy="absolute",
                             margin=1.0 - phi, contrast_anchors=False, contrast_positives=False)  # fmt: skip
        dclr = DCLRLoss(student, guide=guide, form="paper", noise_mode="none", temperature=TAU,
                        false_negative_threshold=phi)  # fmt: skip
        want, want_grads = loss_and_grads(gist, student)
        got, got_grads = loss_and_grads(dclr, student)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert len(got_grads) == len(want_grads) > 0
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_equivalence_is_not_vacuous(models):
    """The thresholds do drop candidates, and dropping changes the loss: without weighting
    DCLRLoss is plain SimCSE and differs from GIST at every phi used above."""
    student, guide = models
    plain = DCLRLoss(student, guide=guide, form="paper", noise_mode="none", temperature=TAU,
                     weighting="none")  # fmt: skip
    base, _ = loss_and_grads(plain, student)
    for phi in thresholds(guide):
        gist = GISTEmbedLoss(student, guide, temperature=TAU, margin_strategy="absolute",
                             margin=1.0 - phi, contrast_anchors=False, contrast_positives=False)  # fmt: skip
        masked, _ = loss_and_grads(gist, student)
        assert abs(float(masked) - float(base)) > 1e-4, phi


# ---- the pair rules: GIST's own masks on real (anchor, positive) pairs --------------------------
ANCHORS = SENTENCES[0::2]
POSITIVES = SENTENCES[1::2]
# The tiny guide's pair cosines sit at 0.88-0.985: margin 0 drops 10 of the 30 in-batch
# candidates, 0.01 16 and 0.03 22 (margin 0.1 would keep one: an equivalence on one negative).
MARGINS = [0.0, 0.01, 0.03]


def pair_loss_and_grads(loss_fn, student):
    return loss_and_grads(loss_fn, student, ANCHORS, POSITIVES)


@pytest.mark.parametrize("strategy", ["absolute", "relative"])
@pytest.mark.parametrize("margin", MARGINS)
def test_the_pair_rules_equal_gist_on_real_pairs(models, strategy, margin):
    """false_negative_rule pair_absolute / pair_relative is GISTEmbedLoss's mask, anchor by
    anchor, on pairs whose positives differ from their anchors."""
    student, guide = models
    gist = GISTEmbedLoss(student, guide, temperature=TAU, margin_strategy=strategy, margin=margin,
                         contrast_anchors=False, contrast_positives=False)  # fmt: skip
    dclr = DCLRLoss(student, guide=guide, form="paper", noise_mode="none", temperature=TAU,
                    false_negative_rule=f"pair_{strategy}", pair_margin=margin)  # fmt: skip
    want, want_grads = pair_loss_and_grads(gist, student)
    got, got_grads = pair_loss_and_grads(dclr, student)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def pair_guide_cosines(guide) -> torch.Tensor:
    """The guide's anchor x positive cosines of the pairs above (what both losses mask on)."""
    with torch.no_grad():
        a = guide.encode(ANCHORS, convert_to_tensor=True, normalize_embeddings=True)
        p = guide.encode(POSITIVES, convert_to_tensor=True, normalize_embeddings=True)
    return a @ p.T


@pytest.mark.parametrize("strategy", ["absolute", "relative"])
@pytest.mark.parametrize("margin", MARGINS)
def test_the_pair_rules_mask_some_pairs_here(models, strategy, margin):
    """Not vacuous, at every rule and margin the equivalence above is checked on: the mask drops
    some in-batch candidates and keeps others, and dropping them moves GIST's loss and DCLRLoss's
    away from plain SimCSE on the same pairs."""
    from dclr.losses.dclr import pair_false_negative_weights

    student, guide = models
    weights = pair_false_negative_weights(pair_guide_cosines(guide), margin, strategy == "relative")
    n = len(ANCHORS)
    dropped = int((weights == 0).sum())
    assert 5 <= dropped <= n * (n - 1) - 5, (strategy, margin, dropped)  # both sides tested
    plain = DCLRLoss(student, guide=guide, form="paper", noise_mode="none", temperature=TAU,
                     weighting="none")  # fmt: skip
    pair = DCLRLoss(student, guide=guide, form="paper", noise_mode="none", temperature=TAU,
                    false_negative_rule=f"pair_{strategy}", pair_margin=margin)  # fmt: skip
    gist = GISTEmbedLoss(student, guide, temperature=TAU, margin_strategy=strategy, margin=margin,
                         contrast_anchors=False, contrast_positives=False)  # fmt: skip
    base, _ = pair_loss_and_grads(plain, student)
    for masked_loss in (pair, gist):
        masked, _ = pair_loss_and_grads(masked_loss, student)
        assert abs(float(masked) - float(base)) > 1e-4, (strategy, margin)
