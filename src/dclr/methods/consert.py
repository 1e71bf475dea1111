"""ConSERT (Yan et al., ACL 2021) as a method: two views (e.g. token shuffle + feature cutoff),
NT-Xent over the 2N views."""

from __future__ import annotations

from dclr.losses.consert import ConSERTLoss
from dclr.methods.simcse import ContrastiveMethod
from dclr.options.contrastive import ConSERTSection


class ConSERT(ContrastiveMethod):
    name = "consert"
    title = "ConSERT (Yan et al., ACL 2021)"
    label = "ConSERT"
    section = ConSERTSection
    loss_class = ConSERTLoss


CONSERT = ConSERT()
