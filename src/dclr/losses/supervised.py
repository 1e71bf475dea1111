"""Supervised objectives on NLI: SimCSE-supervised and the SBERT/ConSERT classification head.

* Supervised SimCSE (Gao et al., 2021). Anchors h, entailed positives h+ and contradiction hard
  negatives h- (each (n, d)), temperature tau:
      loss = mean_i -log( e^{cos(h_i, h+_i)/tau} / sum_j [e^{cos(h_i, h+_j)/tau} + e^{cos(h_i, h-_j)/tau}] )
  Without hard negatives it is InfoNCE over (anchor, positive) pairs, i.e. `simcse_loss`.
* NLI classification (Reimers & Gurevych 2019; ConSERT's joint objective): a linear softmax
  classifier over (u, v, |u - v|) of premise u and hypothesis v, cross-entropy on the 3 labels.
  The head is training-only: it is never exported with the encoder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from dclr.contract import Batch, DrawsAhead, SupportsGradCache
from dclr.distributed import gather_with_grad, mean_over_ranks
from dclr.errors import ConfigError, InputError
from dclr.losses.infonce import info_nce
from dclr.losses.simcse import check_temperature
from dclr.options.nli import NLIOptions
from dclr.views.adversarial import fgsm_perturbation
from dclr.views.masks import content_mask
from dclr.views.pair import (
    ViewSpec,
    apply_view,
    draw_view,
    dropout_off,
    unwrap,
    view_generator,
)

NLI_CLASSES = 3  # entailment, neutral, contradiction (dclr.data.nli.NLI_LABELS)


def supervised_simcse_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: torch.Tensor | None,
    temperature: float,
) -> torch.Tensor:
    """anchors, positives, hard_negatives: (n, d) (negatives may be None) -> scalar.

    InfoNCE with in-batch positives (and hard negatives) as negatives: (n, n) or (n, 2n) logits.
    """
    blocks = [positives] if hard_negatives is None else [positives, hard_negatives]
    return info_nce(anchors, blocks, temperature)


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """SBERT's classifier input: u, v (n, d) -> (n, 3d) = [u; v; |u - v|]."""
    return torch.cat([u, v, (u - v).abs()], dim=-1)


class NLIHead(nn.Module):
    """Linear classifier over (u, v, |u - v|) -> (n, 3) logits; train-only, never exported."""

    def __init__(self, hidden_size: int, num_labels: int = NLI_CLASSES) -> None:
        super().__init__()
        self.classifier = nn.Linear(3 * hidden_size, num_labels)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.classifier(pair_features(u, v))


def nli_classification_loss(
    head: NLIHead, u: torch.Tensor, v: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy of the head's (n, 3) logits against labels (n,) in {0, 1, 2}."""
    return F.cross_entropy(head(u, v).float(), labels)


def joint_loss(
    classification: torch.Tensor, contrastive: torch.Tensor, contrastive_weight: float
) -> torch.Tensor:
    """ConSERT's joint objective: L = L_ce + alpha * L_con."""
    return classification + contrastive_weight * contrastive


SupervisedKind = Literal["simcse", "nli_head", "joint"]


class SupervisedNLILoss(nn.Module):
    """A supervised NLI objective around an encoder.

    Args:
        model: maps tokenized features to (m, d) vectors (under DDP, the wrapped model).
        kind: 'simcse' — features tokenize [anchors; positives; hard negatives] (3n rows, or 2n
            without hard negatives) and the loss is `supervised_simcse_loss`;
            'nli_head' — features tokenize [premises; hypotheses] (2n rows), `labels` (n,) are
            required, and the loss is the (u, v, |u - v|) head's cross-entropy;
            'joint' — 'nli_head' plus `joint_weight` times `contrastive` (an unsupervised loss
            module: SimCSE, ConSERT or DCLR with its views) on the same 2n sentences.
        temperature: tau of supervised SimCSE (default: `NLIOptions`'s, as `dclr train`'s `nli:`).
        head: the NLIHead ('nli_head', 'joint'); a training-only parameter of this loss.
        hard_negatives: whether 'simcse' features hold a third block of hard negatives.
        adversarial: ('joint' only) make one view adversarial: the input embeddings moved by
            `fgsm_perturbation` of the classification loss's gradient (`AdversarialView`).
    With joint_weight 0, 'joint' is 'nli_head'. Returns a dict: loss and its parts.
    """

    def training_modules(self) -> dict[str, nn.Module]:
        """Modules trained with the encoder and checkpointed, never exported: the NLI head."""
        return {} if self.head is None else {"nli_head": self.head}

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        kind: SupervisedKind,
        temperature: float = NLIOptions.temperature,
        head: NLIHead | None = None,
        contrastive: nn.Module | None = None,
        joint_weight: float = NLIOptions.joint_weight,
        hard_negatives: bool = True,
        adversarial: AdversarialView | None = None,
    ) -> None:
        super().__init__()
        if adversarial is not None and kind != "joint":
            raise ConfigError("the adversarial view needs the joint objective (a contrastive part)")
        if kind in ("nli_head", "joint") and head is None:
            raise ConfigError(f"supervised loss {kind!r} needs an NLIHead")
        if kind == "joint" and contrastive is None:
            raise ConfigError("the joint objective needs a contrastive loss")
        self.model = model
        self.kind = kind
        self.temperature = check_temperature(temperature)
        self.head = head
        self.contrastive = contrastive
        self.joint_weight = joint_weight
        self.hard_negatives = hard_negatives
        self.adversarial = adversarial

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        """`batch.features` tokenizes the rows described above; `batch.labels` the pair labels."""
        features, labels, step = dict(batch.features), batch.labels, batch.step
        if self.kind == "simcse":
            z = self.model(**features)  # (3n or 2n, d)
            if self.hard_negatives:
                anchors, positives, negatives = z.chunk(3)  # (n, d) each
            else:
                (anchors, positives), negatives = z.chunk(2), None
            # under torchrun each block holds every rank's rows, in rank order: one global loss
            anchors, positives = gather_with_grad(anchors), gather_with_grad(positives)
            negatives = None if negatives is None else gather_with_grad(negatives)
            return {"loss": supervised_simcse_loss(anchors, positives, negatives, self.temperature)}
        if labels is None:
            raise InputError(
                f"supervised loss {self.kind!r} needs labels",
                fix="train on labelled NLI pairs (SentEval's s1/s2/labels layout)",
            )
        assert self.head is not None
        if self.adversarial is not None:
            return self._adversarial_joint(features, labels, step, batch.drawn)
        u, v = self.model(**features).chunk(2)  # premises, hypotheses: (n, d) each
        classification = self._classification(u, v, labels)
        if self.kind == "nli_head":
            return {"loss": classification}
        assert self.contrastive is not None
        contrastive = self.contrastive(Batch(features, step=step, drawn=batch.drawn))["loss"]
        return self._joint(classification, contrastive)

    def draw_ahead(self, batch: Batch) -> dict[str, Any] | None:
        """The contrastive part's views of `batch` (`DrawsAhead`): the adversarial view's other
        view, or what the contrastive loss draws; None for the other objectives."""
        if self.kind != "joint":
            return None
        if self.adversarial is not None:
            return {"other": self._draw_other(dict(batch.features), batch.step)}
        if isinstance(self.contrastive, DrawsAhead):
            return self.contrastive.draw_ahead(Batch(batch.features, step=batch.step))
        return None

    def _draw_other(self, features: dict[str, torch.Tensor], step: int) -> dict[str, Any]:
        adv = self.adversarial
        assert adv is not None
        generator = view_generator(adv.seed, step, adv.rank)
        return draw_view(unwrap(self.model), features, adv.other, generator)

    def _classification(
        self, u: torch.Tensor, v: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        """The head's cross-entropy of this rank's pairs, as the global batch's mean under torchrun
        (`mean_over_ranks`; the head's gradients are averaged as the model's, by the trainer)."""
        assert self.head is not None
        return mean_over_ranks(nli_classification_loss(self.head, u, v, labels))

    def _joint(
        self, classification: torch.Tensor, contrastive: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        loss = joint_loss(classification, contrastive, self.joint_weight)
        return {
            "loss": loss,
            "classification": classification.detach(),
            "contrastive": contrastive.detach(),
        }

    def _adversarial_joint(
        self,
        features: dict[str, torch.Tensor],
        labels: torch.Tensor,
        step: int,
        drawn: Any = None,
    ) -> dict[str, torch.Tensor]:
        """Joint objective whose contrastive views are (other view, adversarial view).

        The classification pass runs on the word embeddings passed as `inputs_embeds`; the
        gradient of its loss with respect to them gives the FGSM step (a constant); the
        adversarial view re-encodes the moved embeddings, the other view is the configured one.
        """
        adv = self.adversarial
        assert adv is not None and self.head is not None and self.contrastive is not None
        encoder = unwrap(self.model)
        ids = features["input_ids"]
        embeds = encoder.backbone.get_input_embeddings()(ids)  # (2n, L, d)
        plain = {**features, "input_ids": None, "inputs_embeds": embeds}
        u, v = self.model(**plain).chunk(2)
        classification = self._classification(u, v, labels)
        (grad,) = torch.autograd.grad(classification, embeds, retain_graph=True)
        content = content_mask(ids, features["attention_mask"], encoder.tokenizer.all_special_ids)
        delta = fgsm_perturbation(grad, content, adv.epsilon)  # (2n, L, d), no gradient
        z_adv = self.model(**{**plain, "inputs_embeds": embeds + delta})
        other_drawn = drawn["other"] if drawn is not None else self._draw_other(features, step)
        other = apply_view(encoder, features, other_drawn)
        guard = dropout_off(encoder) if adv.other.strategy == "none" else contextlib.nullcontext()
        with guard:
            z_other = self.model(**other)
        z1, z2 = (z_adv, z_other) if adv.adversarial_first else (z_other, z_adv)
        contrastive = cast(SupportsGradCache, self.contrastive).objective(  # typed as nn.Module
            z1, z2, Batch(features, step=step)
        )["loss"]
        return self._joint(classification, contrastive)


@dataclass(frozen=True)
class AdversarialView:
    """One adversarial view of L2 size `epsilon` and the `other` view it is paired with."""

    epsilon: float
    other: ViewSpec
    adversarial_first: bool = False  # the adversarial view is view 1 (else view 2)
    seed: int = 0
    rank: int = 0
