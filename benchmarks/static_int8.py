"""A prototype of static int8 for issue 46, measured beside the peers by `int8_encode.py`
(variant `dclr_int8_static_packed`); not yet dclr's `--precision int8`.

Every `nn.Linear` of the backbone becomes oneDNN's static int8 linear
(`torch.ops.onednn.qlinear_pointwise`, what torch.compile's x86 quantisation lowers to): weights
int8 with one symmetric scale per output channel, packed once for oneDNN
(`onednn.qlinear_prepack`); activations uint8 with one asymmetric scale per tensor, fixed by
calibration (the min and max each layer's input reaches over the calibration sentences); float32
out, with the bias and a feed-forward layer's exact GELU fused in. Dynamic int8 (dclr's
`--precision int8` today) finds each input's range at run time, one more pass over it per layer.

The input is quantised by `torch.quantize_per_tensor` (one pass in C++), which torch 2.13 marks
deprecated along with the other quint8 tensor constructors (pytorch issue 184982); the warning is
silenced here, and a product version needs another fused quantise kernel (torchao's, or
torch.compile's lowering).

What is left before it can be dclr's int8: the calibration sentences for a user's own model and
domain (a stored sample, or the user's corpus), the quality check on STS test, and the fingerprint,
export and test work of `dclr.models.precision`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)  # see the docstring
UINT8_MAX = 255
INT8_MAX = 127


class StaticQLinear(nn.Module):
    """`nn.Linear` (optionally followed by the exact GELU) as oneDNN static int8, its input range
    [lo, hi] fixed by calibration."""

    def __init__(self, linear: nn.Linear, lo: float, hi: float, gelu: bool = False) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(1).clamp(min=1e-8) / INT8_MAX  # (out,)
        qweight = torch.round(weight / scale[:, None]).clamp(-INT8_MAX - 1, INT8_MAX)
        self.qweight = torch.ops.onednn.qlinear_prepack(qweight.to(torch.int8), None)
        self.weight_scale = scale
        self.weight_zero = torch.zeros_like(scale, dtype=torch.int64)
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # zero is exact (padding, ReLU-like inputs)
        self.x_scale = max((hi - lo) / UINT8_MAX, 1e-8)
        self.x_zero = int(round(-lo / self.x_scale))
        self.post_op, self.algorithm = ("gelu", "none") if gelu else ("none", "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])  # (n, in)
        qx = torch.quantize_per_tensor(rows, self.x_scale, self.x_zero, torch.quint8).int_repr()
        out = torch.ops.onednn.qlinear_pointwise(
            qx, self.x_scale, self.x_zero, self.qweight, self.weight_scale, self.weight_zero,
            self.bias, 1.0, 0, torch.float32, self.post_op, [], self.algorithm,
        )  # fmt: skip
        return out.reshape(*x.shape[:-1], out.shape[-1])


def input_ranges(encoder, sentences: Sequence[str]) -> dict[nn.Module, tuple[float, float]]:
    """{linear: (min, max) of its input} over `sentences`, encoded as the encoder encodes."""
    ranges: dict[nn.Module, tuple[float, float]] = {}

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], _: object) -> None:
        lo, hi = float(inputs[0].min()), float(inputs[0].max())
        old_lo, old_hi = ranges.get(module, (lo, hi))
        ranges[module] = (min(old_lo, lo), max(old_hi, hi))

    linears = [m for m in encoder.backbone.modules() if isinstance(m, nn.Linear)]
    hooks = [m.register_forward_hook(record) for m in linears]
    try:
        encoder.encode(list(sentences), batch_size=64)
    finally:
        for hook in hooks:
            hook.remove()
    return ranges


def quantize_static(encoder, sentences: Sequence[str]):
    """In place: an fp32 encoder whose linears are `nn.Linear` (linear_kernel "aten") -> static
    int8 linears calibrated on `sentences`."""
    ranges = input_ranges(encoder, sentences)
    for parent in list(encoder.backbone.modules()):
        act = getattr(parent, "intermediate_act_fn", None)
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear):
                continue
            gelu = name == "dense" and act is not None and not isinstance(act, nn.Identity)
            setattr(parent, name, StaticQLinear(child, *ranges[child], gelu=gelu))
            if gelu:
                parent.intermediate_act_fn = nn.Identity()
    return encoder
