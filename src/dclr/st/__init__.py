"""dclr's objectives as sentence-transformers losses, for `SentenceTransformerTrainer`.

    from dclr.st import DCLRLoss, ConSERTLoss

Each is one `nn.Module` taking `(sentence_features, labels)` like every sentence-transformers loss,
and each delegates its maths to dclr's own pure loss functions (`dclr.losses.dclr`,
`dclr.losses.consert`), so a model trained here optimises exactly what `dclr train` optimises.
"""

from dclr.st.consert import ConSERTLoss
from dclr.st.dclr import DCLRLoss
from dclr.st.logging import DCLRPartsCallback, log_dclr_parts

__all__ = ["ConSERTLoss", "DCLRLoss", "DCLRPartsCallback", "log_dclr_parts"]
