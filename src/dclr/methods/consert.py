"""ConSERT (Yan et al., ACL 2021) as a method: two views (e.g. token shuffle + feature cutoff),
NT-Xent over the 2N views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dclr.losses.consert import ConSERTLoss
from dclr.methods.simcse import ContrastiveMethod, ContrastiveSection

if TYPE_CHECKING:
    pass


@dataclass
class ConSERTSection(ContrastiveSection):
    """ConSERT's options: the two views and tau (ConSERT's own tau is 0.1; the default stays
    0.05 so a recipe that omits it trains as it always did)."""


class ConSERT(ContrastiveMethod):
    name = "consert"
    title = "ConSERT (Yan et al., ACL 2021)"
    section = ConSERTSection
    loss_class = ConSERTLoss


CONSERT = ConSERT()
