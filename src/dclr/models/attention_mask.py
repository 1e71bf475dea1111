"""The padded forward's attention mask, prepared in four dimensions so transformers reads nothing
from the device to build it (issue 44: no host synchronisation in an ordinary step).

From a 2-D padding mask transformers 5.x builds the 4-D mask itself, and first checks
`padding_mask.all()` (`masking_utils._ignore_bidirectional_mask_sdpa`), to drop the mask when
nothing is padded: a read of a device value on every forward, which on a GPU waits for the work
queued before it. A 4-D mask is "returned as-is" (`_preprocess_mask_arguments`), so passing the
mask transformers would build, `(b, 1, L, L)` bool with True where a key may be attended, skips
the read and gives the same attention (tested bit for bit against transformers' own on the CPU).
Only where that holds: transformers 5 or later, the attention implementation "sdpa" (a boolean
mask; eager attention adds a float mask instead), an encoder (not a decoder), and a model family
whose 5.x code builds its mask with `create_bidirectional_mask` (BERT, RoBERTa, XLM-R).
The one difference: a batch with no padding keeps its (all-True) mask, where transformers drops
it to let SDPA use its flash kernel; the vectors agree to rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

# The families whose 5.x forward builds its mask with `create_bidirectional_mask`.
PREPARED_MASK_TYPES = frozenset({"bert", "roberta", "xlm-roberta"})
TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def takes_prepared_mask(backbone: Any) -> bool:
    """Whether `backbone` uses a prepared 4-D mask exactly as its own (module docstring)."""
    config = getattr(backbone, "config", None)
    return (
        TRANSFORMERS_MAJOR >= 5
        and getattr(config, "model_type", None) in PREPARED_MASK_TYPES
        and getattr(config, "_attn_implementation", None) == "sdpa"
        and not getattr(config, "is_decoder", False)
    )


def prepared_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(b, L) padding mask -> (b, 1, L, L) bool, True where a query may attend to a key: the
    mask transformers builds for SDPA (materialised as its own is), with no read of its values."""
    b, length = attention_mask.shape
    return attention_mask.bool()[:, None, None, :].expand(b, 1, length, length).contiguous()


def use_prepared_mask(
    choice: str, backbone: Any, attention_mask: torch.Tensor, training: bool = True
) -> bool:
    """`model.prepared_mask`: "on" where the backbone takes it; "auto" there in training on a GPU
    only (where the read stalls the queued step; on a CPU it costs nothing and the CPU's results
    stay as recorded; encoding reads each batch's vectors anyway, and keeps transformers' flash
    kernel for batches with no padding); "off" never."""
    if choice == "off":
        return False
    if choice == "auto" and not (training and attention_mask.device.type == "cuda"):
        return False
    return takes_prepared_mask(backbone)


def step_mask_choice(choice: str, device: torch.device) -> str:
    """`model.prepared_mask` for a frozen model that runs inside the training step (DCLR's
    complementary model on the fly, in eval mode): auto is on on a GPU, as for the trained model."""
    return "on" if choice == "auto" and device.type == "cuda" else choice
