"""Inference precision of a `SentenceEncoder`: fp32, int8 (CPU), or fp16 / bf16 (GPU).

`int8` replaces every `nn.Linear` of the backbone (attention projections, feed-forward, the
backbone's pooler) by an int8 layer: weights int8 with one scale per output channel, the product
in int8, float32 out. Embeddings, LayerNorm, softmax and attention's matrix products stay float32.
Two engines; the one measured faster for this CPU kind (`dclr.models.cpu_kind`, static where
no kind is recorded) where this PyTorch build has both:
- static int8 on oneDNN (`dclr.models.static_int8`, x86 builds from PyPI): each layer's input
  range is calibrated once, at load, on fixed general-English sentences, after SmoothQuant
  scaling of the input channels, so the layers read pre-quantised inputs (about 2x fp32's speed
  and mean cosine 0.995 to its vectors on MiniLM, where dynamic int8 gave 1.5x and 0.974:
  docs/performance.md);
- dynamic int8 (`torch.ao.quantization.quantize_dynamic`, fbgemm / x86 kernels) after
  SmoothQuant scaling (`dclr.models.smoothing`): each forward quantises its input per tensor at
  run time.
Both compose with packing: the packed forward only feeds the backbone `input_ids`,
`position_ids` and a 4-D mask, none of which the quantised layers see.

The vectors change (quantisation error): `docs/performance.md` reports the STS scores of each
precision next to its speed (`benchmarks/int8_encode.py`). A quantised encoder records its
precision (`encoder.precision`), which enters its fingerprint (`dclr.indexing.fingerprint`) with
its int8 weights and scales, so an index, a bulk job or a cache built at one precision (or with
the other engine) refuses the other. It is for inference only: `encoder.train()` refuses it, and
it runs on the CPU only.

With precision `fp32` everything reduces to `SentenceEncoder.from_pretrained`, and on the CPU the
backbone's linear layers then run on oneDNN with pre-packed weights (`dclr.models.onednn`: the
same vectors to float32 rounding, faster; `linear_kernel="aten"` or `DCLR_LINEAR_KERNEL=aten`
keeps PyTorch's BLAS kernel).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from dclr.errors import ConfigError, InputError
from dclr.models import static_int8
from dclr.models.cpu_kind import cpu_policy
from dclr.models.encoder import SentenceEncoder
from dclr.models.onednn import choose_kernel, unpack_linears, use_onednn
from dclr.models.precision_names import PRECISIONS, Precision
from dclr.models.smoothing import CALIBRATION_SENTENCES, smooth_linears

# Half precisions: the whole backbone cast (weights and activations), for a GPU's tensor cores.
HALF: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_precision(precision: str) -> Precision:
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return precision  # type: ignore[return-value]


def quantize_int8(encoder: SentenceEncoder, engine: str = "auto") -> SentenceEncoder:
    """In place: the backbone's `nn.Linear` layers -> int8 (per-channel weights): `engine`
    "static" (oneDNN, calibrated), "dynamic" (torch.ao), or "auto": the engine measured for this
    CPU kind (`dclr.models.cpu_kind.cpu_policy`, static where none is), static only where this
    build has it (module docstring).

    The encoder must be on the CPU and in eval mode; afterwards it cannot be trained.
    """
    if engine not in ("auto", "static", "dynamic"):
        raise ConfigError(f"int8 engine {engine!r}: choose auto, static or dynamic")
    if engine == "auto":
        engine = cpu_policy().int8_engine if static_int8.available() else "dynamic"
    if engine == "static" and not static_int8.available():
        raise ConfigError(
            "this PyTorch build has no oneDNN int8 linear: use engine auto or dynamic"
        )
    if encoder.precision != "fp32":
        raise ConfigError(f"this encoder is already {encoder.precision}")
    if encoder.device.type != "cpu":
        raise ConfigError(
            f"int8 runs on the CPU only (PyTorch's quantised kernels); this encoder is on "
            f"{encoder.device}: use --device cpu, or precision fp32 on a GPU"
        )
    if encoder.mlp_head is not None:
        raise ConfigError("int8 is for inference: export the model first (the MLP head is dropped)")
    encoder.eval()
    if encoder.linear_kernel == "onednn":  # packed fp32 layers are not nn.Linear: unpack first
        unpack_linears(encoder.backbone)
        encoder.linear_kernel = "aten"
    if engine == "static":  # smoothed, calibrated ranges on oneDNN's int8 kernels (docstring)
        static_int8.quantize_static(encoder, CALIBRATION_SENTENCES)
        encoder.precision = "int8"
        return encoder
    smooth_linears(encoder)  # outlier input channels moved into the weights before rounding
    # Per-channel weight scales: one outlier row of a weight matrix does not coarsen the others
    # (per-tensor scales cost MiniLM ~0.5 STS points more in our checks).
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with warnings.catch_warnings():
        # torch 2.13 marks torch.ao quantisation as deprecated (moving to torchao); the
        # dynamic int8 linear kernels it wraps are still the CPU's fastest path here.
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.ao.quantization.quantize_dynamic(
            encoder.backbone, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True
        )
    encoder.precision = "int8"
    return encoder


def inference_device(device: torch.device | str = "auto") -> torch.device:
    """`auto`: the first GPU when one is visible, else the CPU; anything else as torch reads it
    (`cuda` without a GPU is refused by name)."""
    device = _requested(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device cuda (--device cuda, device='cuda'), but no GPU is visible: use cpu or auto"
        )
    return device


def _requested(device: torch.device | str) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"unknown device {device!r} (--device, device=...): use auto, cpu, cuda or cuda:N"
        ) from None


def check_device_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision the device has no fast kernels for, naming the fix."""
    if precision == "int8" and device.type != "cpu":
        raise ConfigError(
            f"precision int8 runs on the CPU only; got device {device} (pass --device cpu, or "
            "--precision fp16 / bf16 / fp32 on a GPU)"
        )
    if precision in HALF and device.type != "cuda":
        raise ConfigError(
            f"precision {precision} runs on a GPU only (a CPU computes half precision slower "
            f"than fp32); this command runs on {device}: use --precision fp32, or int8 for a "
            "faster CPU encoder"
        )


def load_inference_encoder(
    model: str | Path,
    pooler: str | None = None,
    precision: str = "fp32",
    packing: bool = False,
    device: torch.device | str = "auto",
    max_length: int | None = None,
    linear_kernel: str | None = None,
) -> SentenceEncoder:
    """An encoder for inference at `precision`, on `device` (`auto`: a GPU when there is one),
    packed if asked on the CPU (and if it pays: `enable_packing` checks the backbone on a probe
    first, before quantisation); fp32 on the CPU runs its linear layers on
    `dclr.models.onednn.choose_kernel(linear_kernel)`.

    On a GPU batches stay padded: packing builds its block-diagonal mask on the host (44 ms for
    256 sentences on a 2-core CPU, docs/gpu.md), longer than the GPU takes to encode them."""

    precision = check_precision(precision)
    check_device_precision(precision, _requested(device))  # the conflict first, by name
    device = inference_device(device)
    encoder = SentenceEncoder.from_pretrained(model, pooler=pooler, max_length=max_length)
    check_finite_weights(encoder, model)
    encoder = encoder.to(device)
    if packing and device.type == "cpu":  # checked in fp32: the probe tests the layout
        encoder.enable_packing()
    if precision == "int8":
        quantize_int8(encoder)
    elif precision in HALF:
        cast_half(encoder, precision)
    elif device.type == "cpu" and choose_kernel(linear_kernel) == "onednn":
        use_onednn(encoder.eval())
    return encoder


def check_finite_weights(encoder: SentenceEncoder, model: str | Path) -> None:
    """InputError naming the first parameter that holds NaN/inf: such a model encodes every
    text to NaN, so it is refused at load, before anything is encoded, indexed or served."""
    for name, tensor in encoder.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise InputError(
                f"model {model}: {count} non-finite weight(s) (NaN/inf) in {name}; it would "
                "encode every text to NaN",
                fix="use a checkpoint or export from before the training run diverged (dclr "
                "stops a run at its first non-finite loss and keeps the last good checkpoint)",
            )


def cast_half(encoder: SentenceEncoder, precision: str) -> SentenceEncoder:
    """In place: the backbone in fp16 or bf16 (inference only; `encode` returns float32)."""
    if encoder.precision != "fp32":
        raise ConfigError(f"this encoder is already {encoder.precision}")
    check_device_precision(precision, encoder.device)
    encoder.eval().to(HALF[precision])
    encoder.precision = precision
    return encoder
