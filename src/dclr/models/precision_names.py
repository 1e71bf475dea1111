"""The inference precisions by name, torch-free (the command lines' help reads this at import)."""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["fp32", "fp16", "bf16", "int8"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
# The --precision help of every command that encodes (encode, encode-bulk, eval, index, search,
# serve).
PRECISION_HELP = (
    "fp32 | fp16 | bf16 | int8. fp16 / bf16: the model cast to half precision, GPU only (tensor "
    "cores, docs/gpu.md). int8: the linear layers in int8 (static, calibrated at load), CPU only "
    "(~2x fp32 there, vectors differ slightly, docs/performance.md)."
)
