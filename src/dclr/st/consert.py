"""ConSERT's NT-Xent (Yan et al., ACL 2021) as a sentence-transformers loss.

The maths is `dclr.losses.consert.nt_xent_loss`; this module only embeds the batch and gathers it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from dclr.distributed import gather_with_grad
from dclr.losses.consert import nt_xent_loss
from dclr.losses.simcse import check_temperature
from dclr.options.contrastive import ConSERTOptions
from dclr.st.embed import ddp_scale, two_views

CONSERT_CITATION = """
@inproceedings{yan2021consert,
    title = {ConSERT: A Contrastive Framework for Self-Supervised Sentence Representation Transfer},
    author = {Yan, Yuanmeng and Li, Rumei and Wang, Sirui and Zhang, Fuzheng and Wu, Wei and Xu, Weiran},
    booktitle = {Proceedings of ACL},
    year = {2021},
    url = {https://aclanthology.org/2021.acl-long.393},
}
"""


class ConSERTLoss(nn.Module):
    """NT-Xent over the 2N views of a batch, for `SentenceTransformerTrainer`.

    Inputs: one text column (each sentence encoded twice, dropout makes the views) or two columns
    (anchor, positive: e.g. views you augmented yourself). Labels: none.
    Every view is an anchor; its positive is the other view of the same sentence and its negatives
    the 2(N - 1) views of the other sentences, in both directions.

    Args:
        model: the SentenceTransformer being trained.
        temperature: tau > 0 (default `ConSERTOptions`'s, the paper's 0.1: the same as
            `dclr train`'s `consert:` section and `dclr.losses.consert.ConSERTLoss`).

    ConSERT's token-shuffle / cutoff views live in `dclr train` (`dclr.views`); here the views are
    dropout or the columns you give. Under torch.distributed the views are gathered across ranks.
    """

    def __init__(self, model: nn.Module, temperature: float = ConSERTOptions.temperature) -> None:
        super().__init__()
        self.model = model
        self.temperature = check_temperature(temperature)

    def forward(
        self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor | None
    ) -> torch.Tensor:
        z1, z2 = two_views(self.model, sentence_features)
        return self.compute_loss_from_embeddings(z1, z2) * ddp_scale()

    def compute_loss_from_embeddings(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """NT-Xent of this rank's views (n_local, d), gathered across ranks first."""
        return nt_xent_loss(gather_with_grad(z1), gather_with_grad(z2), self.temperature)

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature}

    @property
    def citation(self) -> str:
        return CONSERT_CITATION
