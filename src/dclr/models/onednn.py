"""fp32 inference on the CPU through oneDNN: the backbone's linear layers with pre-packed weights.

PyTorch runs an fp32 `nn.Linear` on the CPU through its BLAS (MKL's sgemm). oneDNN's
inner-product primitive (`torch.ops.mkldnn._linear_pointwise`, what torch.compile's CPU freezing
pass uses), with each weight reordered once into oneDNN's blocked layout, is faster at every size
a sentence encoder sees on this project's machines: on the 2-core AMD EPYC (AVX512 kernels),
384 x 1536 weights, 1.3-1.7x at 13 rows (one query) and 1.2-1.3x at 2,048 rows (a bulk pass), 1
or 2 threads (`benchmarks/linear_kernels.py` measures both kernels side by side; its latest
results are in benchmarks/results/). A feed-forward layer's exact (erf) GELU runs inside the
same primitive (`gelu` post-op) instead of as a second pass over the activations.

`use_onednn(encoder)` swaps every `nn.Linear` of an eval-mode fp32 CPU encoder's backbone for a
`PackedLinear`. The vectors agree with the BLAS ones to float32 rounding (a different summation
order: ~1e-6, tested); the state dict still holds the plain weights (unpacked on demand, bit for
bit), so fingerprints, exports and `SentenceTransformer` interchange do not change. It is for
inference: the packed weights have no gradient, and `SentenceEncoder.train()` refuses an encoder
that uses them. `DCLR_LINEAR_KERNEL=aten` (or `linear_kernel="aten"`) keeps PyTorch's own kernel.
oneDNN's caches of per-shape primitives are bounded when dclr is imported
(`dclr.models.onednn_env`), or a server's resident memory grows with every new pass size.
"""

from __future__ import annotations

import os
from typing import Any, Literal, get_args

import torch
from torch import nn

from dclr.errors import ConfigError

LinearKernel = Literal["auto", "onednn", "aten"]
KERNELS: tuple[str, ...] = get_args(LinearKernel)
KERNEL_ENV = "DCLR_LINEAR_KERNEL"


def has_ops(namespace: str, *names: str) -> bool:
    """Whether this PyTorch build has oneDNN and the ops `torch.ops.<namespace>.<name>`."""
    ops = getattr(torch.ops, namespace, None)
    return torch.backends.mkldnn.is_available() and all(hasattr(ops, n) for n in names)


def available() -> bool:
    """Whether this PyTorch build has oneDNN's packed linear (CPU builds from PyPI do)."""
    return has_ops("mkldnn", "_linear_pointwise", "_reorder_linear_weight")


def exact_gelu(module: nn.Module) -> bool:
    """Whether `module` computes the erf GELU (nn.GELU() or transformers' GELUActivation)."""
    if isinstance(module, nn.GELU):
        return module.approximate == "none"
    return type(module).__name__ == "GELUActivation" and getattr(module, "act", None) is (
        nn.functional.gelu
    )


class PackedLinear(nn.Module):
    """`nn.Linear` (optionally followed by the erf GELU) on oneDNN with a pre-packed weight.

    The state dict holds `weight` (unpacked, bit-identical to the original) and `bias`, as
    `nn.Linear`'s does, so nothing that reads weights sees a difference."""

    def __init__(self, linear: nn.Linear, activation: Literal["none", "gelu"] = "none") -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.activation = activation
        self._algorithm = "none" if activation == "gelu" else ""  # the erf GELU, not tanh
        weight = linear.weight.detach()
        self._packed = torch.ops.mkldnn._reorder_linear_weight(weight)  # opaque oneDNN layout
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x, self._packed, self.bias, self.activation, [], self._algorithm
        )
        return out

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        destination[prefix + "weight"] = self._packed.to_dense()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias if keep_vars else self.bias.detach()

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, activation={self.activation}"
        )


def pack_linears(module: nn.Module) -> int:
    """In place: every fp32 `nn.Linear` under `module` -> `PackedLinear`; a linear layer whose
    output goes straight into an exact GELU (a block with `dense` and `intermediate_act_fn`, as
    BERT's feed-forward) takes the GELU in. Returns how many layers were swapped."""
    swapped = 0
    for parent in list(module.modules()):
        fuse = getattr(parent, "intermediate_act_fn", None)
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or child.weight.dtype != torch.float32:
                continue
            gelu = name == "dense" and fuse is not None and exact_gelu(fuse)
            setattr(parent, name, PackedLinear(child, "gelu" if gelu else "none"))
            if gelu:
                parent.intermediate_act_fn = nn.Identity()
            swapped += 1
    return swapped


def unpack_linears(module: nn.Module) -> int:
    """In place: every `PackedLinear` under `module` back to `nn.Linear` with the same weights (its
    fused GELU back as the block's `intermediate_act_fn`), the inverse of `pack_linears`, for
    what rewrites `nn.Linear` layers (int8 quantisation). Returns how many layers were swapped."""
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, PackedLinear):
                continue
            linear = nn.Linear(child.in_features, child.out_features, child.bias is not None)
            linear.requires_grad_(False)
            with torch.no_grad():
                linear.weight.copy_(child._packed.to_dense())
                if child.bias is not None:
                    linear.bias.copy_(child.bias)
            setattr(parent, name, linear)
            if child.activation == "gelu":
                parent.intermediate_act_fn = nn.GELU()  # the erf GELU it had fused
            swapped += 1
    return swapped


def choose_kernel(requested: str | None = None) -> str:
    """'onednn' or 'aten': `requested`, else $DCLR_LINEAR_KERNEL, else 'auto': the kernel measured
    fastest on this CPU kind (`dclr.models.cpu_kind.cpu_policy`), oneDNN only when this build has
    it."""
    kernel = requested or os.environ.get(KERNEL_ENV) or "auto"
    if kernel not in KERNELS:
        source = "linear_kernel" if requested else KERNEL_ENV
        raise ConfigError(f"{source}={kernel!r}: choose one of {', '.join(KERNELS)}")
    if kernel == "auto":
        from dclr.models.cpu_kind import cpu_policy

        return "onednn" if cpu_policy().linear_kernel == "onednn" and available() else "aten"
    if kernel == "onednn" and not available():
        raise ConfigError(
            "linear kernel 'onednn' asked for, but this PyTorch build has no oneDNN linear "
            f"(torch {torch.__version__}); use {KERNEL_ENV}=aten"
        )
    return kernel


def use_onednn(encoder: Any) -> bool:
    """In place: an eval-mode fp32 CPU encoder's backbone linears -> PackedLinear; returns whether
    it was done (not for int8, other devices, or an encoder in training mode)."""
    if encoder.precision != "fp32" or encoder.device.type != "cpu" or encoder.training:
        return False
    if not pack_linears(encoder.backbone):
        return False
    encoder.linear_kernel = "onednn"
    return True
