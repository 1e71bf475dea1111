"""SmoothQuant-style scaling of linear layers' input channels, so int8 rounding suits them.

Transformer encoders such as MiniLM carry a few input channels whose activations are 10-20x the
others (measured on MiniLM: the feed-forward input reaches |x| = 28 where the median channel peaks
at 1.8). Dynamic int8 quantisation uses one scale per activation tensor, so those channels set the
step for every other channel and the small ones lose most of their bits. Following SmoothQuant
(Xiao et al., 2023), each `nn.Linear` y = x W^T + b becomes y = (x / s) (W diag(s))^T + b with one
s_j per input channel, s_j = max|x_j|^alpha / max_i |W_ij|^(1 - alpha): exactly the same function in
real arithmetic, with activation and weight ranges balanced before rounding. max|x_j| is measured
on `CALIBRATION_SENTENCES` (general English written for this purpose, no evaluation data).

The layer is swapped for `SmoothedLinear` (a module replacement from the outside, as
`torch.ao.quantization.quantize_dynamic` does); `1/s` is a buffer, so it is part of the state dict
and of the model's fingerprint. Without quantisation a smoothed encoder gives the fp32 vectors up
to float rounding (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from dclr.models.encoder import SentenceEncoder

# Migration strength: 0 keeps every outlier in the activations, 1 moves it all into the weights.
# SmoothQuant uses 0.5; on MiniLM (mean cosine to the fp32 vectors of 300 STS-B dev sentences)
# 0.5 gave 0.963, 0.6 0.987, 0.7 0.992, 0.75 0.991, 0.8 0.991 (no smoothing: 0.979).
ALPHA = 0.7
# Floor on a channel statistic: a channel never seen non-zero must not divide by zero.
MIN_STAT = 1e-5
# Sentences whose activations calibrate s (lengths 1-40 words, mixed topics and registers).
CALIBRATION_SENTENCES = (
    "A man is playing a guitar on the stage.",
    "Two dogs run across a snowy field.",
    "The committee will publish its final report next Tuesday, after a vote by the members.",
    "What time does the train to the airport leave?",
    "She poured the coffee, sat down by the window and read the letter twice.",
    "Prices rose by 3.2% in March, the fastest increase since 2008.",
    "x",
    "OK.",
    "The children are not playing in the park today because it is raining heavily.",
    "A woman slices an onion.",
    "Researchers found no link between the drug and the reported side effects.",
    "He said he would never go back there again, no matter what anyone offered him.",
    "The cat is sleeping on the couch.",
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Click the button below to reset your password; the link expires in 24 hours.",
    "Heavy rain caused flooding in several northern towns on Sunday night.",
    "I don't think that's a good idea at all.",
    "The patient was given 500 mg of paracetamol every six hours.",
    "A group of people are standing in front of an old stone church, taking photographs of the "
    "towers while a guide explains the history of the building and its restoration.",
    "Stocks fell sharply.",
    "The quick brown fox jumps over the lazy dog.",
    "Who won the football match last night?",
    "Two women are dancing together in a crowded room with loud music.",
    "The government has denied the allegations and promised a full investigation.",
    "Boil the pasta for ten minutes, then drain it and add the sauce.",
    "A boy is jumping into a swimming pool.",
    "There is no evidence that the meeting ever took place.",
    "The software update fixes a bug that crashed the app on older phones.",
    "Birds are flying over the lake at sunset.",
    "According to the report, unemployment fell to its lowest level in a decade, although wages "
    "have barely kept pace with inflation over the same period.",
    "Someone is cutting a tomato.",
    "Thanks!",
)


class SmoothedLinear(nn.Module):
    """`linear(x * inv_scale)`, where `linear` holds W diag(s): the input channels rescaled."""

    inv_scale: torch.Tensor  # a buffer

    def __init__(self, linear: nn.Module, inv_scale: torch.Tensor) -> None:
        super().__init__()
        self.linear = linear
        self.register_buffer("inv_scale", inv_scale)  # (in_features,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inv_scale)


def smoothing_factors(
    act_peak: torch.Tensor,
    weight_peak: torch.Tensor,
    alpha: float,
    floor_quantile: float | None = None,
    ceiling: float | None = None,
) -> torch.Tensor:
    """SmoothQuant's s_j = max|x_j|^alpha / max_i|W_ij|^(1 - alpha) per input channel j (both
    statistics floored at `MIN_STAT`); optionally clipped to [the `floor_quantile` quantile of s,
    `ceiling`], as NNCF's SmoothQuant clips (quantile 0.1, ceiling 100)."""
    s = act_peak.clamp_min(MIN_STAT) ** alpha / weight_peak.clamp_min(MIN_STAT) ** (1 - alpha)
    if floor_quantile is not None:
        s = s.clamp_min(float(torch.quantile(s, floor_quantile)))
    if ceiling is not None:
        s = s.clamp_max(ceiling)
    return s


@torch.no_grad()
def each_linear_input(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    observe: Callable[[str, nn.Module, torch.Tensor], None],
) -> None:
    """`observe(name, linear, input)` for every backbone `nn.Linear` over `sentences`, one
    sentence per forward: no padding enters, whatever the layout (calibration for SmoothQuant
    here and for static int8's ranges, `dclr.models.static_int8`)."""

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
        return lambda module, inputs, _: observe(name, module, inputs[0].detach())

    handles = [
        module.register_forward_hook(hook(name))
        for name, module in encoder.backbone.named_modules()
        if isinstance(module, nn.Linear)
    ]
    packing, encoder.packing = encoder.packing, False
    try:
        encoder.encode(list(sentences), batch_size=1, normalize=False)
    finally:
        encoder.packing = packing
        for handle in handles:
            handle.remove()


@torch.no_grad()
def input_channel_max(
    encoder: SentenceEncoder, sentences: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """max |x_j| over every token of `sentences`, per input channel j of each backbone Linear."""
    stats: dict[str, torch.Tensor] = {}

    def record(name: str, _: nn.Module, x: torch.Tensor) -> None:
        peak = x.abs().reshape(-1, x.shape[-1]).amax(0)  # (in,) over the tokens
        stats[name] = peak if name not in stats else torch.maximum(stats[name], peak)

    each_linear_input(encoder, sentences, record)
    return stats


@torch.no_grad()
def smooth_linears(
    encoder: SentenceEncoder,
    alpha: float = ALPHA,
    sentences: tuple[str, ...] = CALIBRATION_SENTENCES,
) -> SentenceEncoder:
    """In place: every backbone `nn.Linear` seen by the calibration -> `SmoothedLinear`."""
    stats = input_channel_max(encoder, sentences)
    for name, peak in stats.items():
        parent_name, _, child = name.rpartition(".")
        parent = encoder.backbone.get_submodule(parent_name) if parent_name else encoder.backbone
        linear = getattr(parent, child)
        scale = smoothing_factors(peak, linear.weight.abs().amax(0), alpha)  # (in,)
        linear.weight.mul_(scale)  # W diag(s): column j times s_j
        setattr(parent, child, SmoothedLinear(linear, (1.0 / scale).contiguous()))
    return encoder
