"""Static int8 inference on the CPU through oneDNN: `--precision int8` where this build has it.

Every `nn.Linear` of the backbone becomes `StaticQLinear`, oneDNN's int8 inner product
(`torch.ops.onednn.qlinear_pointwise`, what torch.compile's x86 quantisation lowers to):
- SmoothQuant first (Xiao et al., 2023; `smoothing_scales`): each layer that quantises its own
  input divides input channel j by s_j = max|x_j|^0.95 / max|W_:j|^0.05 and multiplies weight
  column j by it, the same function in real arithmetic with MiniLM's outlier channels (|x| up to
  30 where the median channel peaks at 1.4-1.8) moved into the weights. The division costs nothing:
  it is folded into the quantiser's one multiply (a vector instead of a scalar). Strength and
  clipping are NNCF's transformer defaults (the engine behind sentence-transformers' OpenVINO
  int8); the second feed-forward layer is not smoothed, its input arrives already quantised at
  one scale from the first. Chosen on STS-B + SICK dev (MiniLM, mean pooling; built-in / 300
  STS-B train sentences): dev 83.28 / 83.34 against 83.25 / 83.13 unsmoothed (fp32 83.26), mean
  cosine to fp32 0.9951 / 0.9963 against 0.9938; alpha 0.5-0.8 gave 83.12-83.29;
- weights int8, one symmetric scale per output channel, packed once (`onednn.qlinear_prepack`);
  on a CPU without VNNI, whose kernel saturates full-range weights (`pairs_saturate`), each
  layer's weights are rounded the way that comes closest to its fp32 output on the calibration
  sentences (`least_error_weights`: full range, 7-bit, or adjacent pairs clipped);
- activations uint8 with one asymmetric scale per tensor, *fixed by calibration*: the mean over
  `dclr.models.smoothing.CALIBRATION_SENTENCES` (general English written for this purpose, no
  evaluation data) of the min and max each layer's input reaches in each sentence, one sentence
  per forward so no padding enters. The mean clips a rare extreme (it saturates at 0 or 255);
  chosen on STS-B and SICK dev (MiniLM, mean pooling, before SmoothQuant): mean cosine 0.9937 to
  fp32 and STS dev 83.25 (fp32 83.26), against 0.9935 and 83.17 with the plain min and max, and
  83.17 with the 300 STS-B train sentences the OpenVINO peer is calibrated on;
- float32 out, with the bias and a feed-forward layer's exact GELU fused in.

Dynamic int8 (`torch.ao.quantization.quantize_dynamic`, the fallback) finds each input's range at
run time, one more pass over every activation per layer. Here the ranges are constants, and the
quantising passes that remain are few: the query, key and value projections read one input and
share one quantised copy of it (`SharedQuantizer`), and the feed-forward's first layer writes its
GELU output already quantised for the second (uint8 out, at the second layer's calibrated range),
so a BERT layer quantises three 384-wide tensors instead of five plus one 1536-wide one. The
quantiser is plain tensor arithmetic (`quantize_uint8`), not `torch.quantize_per_tensor`, which
torch 2.13 marks deprecated with the other quint8 tensor constructors.

Each layer's int8 weight, scales, zero points and bias are buffers, so they are the state dict
and `dclr.indexing.fingerprint` hashes them: an index built with dynamic int8, or with other
calibration sentences, is refused by a static int8 encoder. Measured on MiniLM (STS, speed beside
sentence-transformers' OpenVINO static int8): docs/performance.md, `benchmarks/int8_encode.py`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import torch
from torch import nn

from dclr.models.encoder import SentenceEncoder
from dclr.models.onednn import exact_gelu, has_ops
from dclr.models.smoothing import each_linear_input, input_channel_max, smoothing_factors

UINT8_MAX = 255
INT8_MAX = 127
# How weights are rounded (`round_weights`): "full" -128..127, what every layer gets where the
# kernel is exact; "exact_pairs" and "int7", what a kernel that saturates (`pairs_saturate`)
# computes exactly, which `least_error_weights` weighs against "full" layer by layer there.
WEIGHT_MODES = ("full", "exact_pairs", "int7")
# The most two adjacent int8 weights of one sign may add up to in magnitude where the kernel sums
# their products with uint8 inputs in int16 (`pairs_saturate`): 255 * 128 = 32,640 <= 32,767.
PAIR_MAGNITUDE_MAX = 128
INT7_MAX = 63  # 255 * 64 * 2 = 32,640: 7-bit weights never saturate a pair either
QKV = ("query", "key", "value")  # BERT's attention projections, which read the same input
ESTIMATORS = ("mean_minmax", "minmax")  # how calibration turns inputs into ranges (input_ranges)
# SmoothQuant before rounding (`smoothing_scales`): NNCF's strength and clipping for transformers
# (its AdvancedSmoothQuantParameters.matmul = 0.95; s clipped to [its 0.1 quantile, 100]).
SMOOTH_ALPHA = 0.95
SMOOTH_CLIP = (0.1, 100.0)


def available() -> bool:
    """Whether this PyTorch build has oneDNN's static int8 linear (x86 CPU builds from PyPI do)."""
    return has_ops("onednn", "qlinear_pointwise", "qlinear_prepack")


@functools.cache
def pairs_saturate() -> bool:
    """Whether oneDNN's u8 x s8 inner product on this CPU saturates: without VNNI (AVX2 before
    AVX-VNNI, AVX512 before Cascade Lake, or a run limited by ONEDNN_MAX_CPU_ISA) it multiplies
    adjacent input channels (2j, 2j + 1) with `vpmaddubsw`, whose int16 sum of the two products
    saturates before it is widened to int32 ("Nuances of int8 Computations", oneDNN's developer
    guide: avoiding it is the caller's job). Asked of the kernel itself, once per process: a row
    of 255s against two weights of 127 comes back exact (VNNI, AMX) or clipped (no VNNI).
    Measured on MiniLM under an AVX2 limit (docs/performance.md): mean cosine to fp32 0.9935 with
    every layer full range, 0.9922-0.9925 with every layer exact, 0.9945 layer by layer
    (`least_error_weights`), against 0.9950 where the kernel is exact."""
    inputs = 64
    weight = torch.full((2, inputs), INT8_MAX, dtype=torch.int8)
    weight[1] = -INT8_MAX - 1
    packed = torch.ops.onednn.qlinear_prepack(weight, None)
    scale, zero = torch.ones(2), torch.zeros(2, dtype=torch.int64)
    for rows in (1, 16):  # a one-text pass and a batch can take different kernels
        x = torch.full((rows, inputs), UINT8_MAX, dtype=torch.uint8)
        out = torch.ops.onednn.qlinear_pointwise(
            x, 1.0, 0, packed, scale, zero, None, 1.0, 0, torch.float32, "none", [], ""
        )  # fmt: skip
        if not torch.equal(out, (x.double() @ weight.double().T).float()):
            return True
    return False


def round_weights(weight: torch.Tensor, mode: str = "full") -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weights (out, in), scale (out,)): symmetric, one scale per output channel, the
    largest magnitude of each row at 127 (`mode` "full" and "exact_pairs", the latter then
    `clip_pairs`) or 63 ("int7")."""
    if mode not in WEIGHT_MODES:
        raise ValueError(f"weights {mode!r}: choose one of {', '.join(WEIGHT_MODES)}")
    top = INT7_MAX if mode == "int7" else INT8_MAX
    scale = weight.abs().amax(1).clamp(min=1e-8) / top  # (out,)
    qweight = torch.round(weight / scale[:, None]).clamp(-top - 1, top)
    if mode == "exact_pairs":
        qweight = clip_pairs(qweight)
    return qweight.to(torch.int8), scale


def clip_pairs(qweight: torch.Tensor) -> torch.Tensor:
    """(out, in) integer weights with each adjacent input pair (2j, 2j + 1) of one sign brought
    to |w_2j| + |w_2j+1| <= PAIR_MAGNITUDE_MAX, the excess taken from both halves alike (the
    larger takes the odd unit): what a saturating kernel (`pairs_saturate`) computes exactly
    for any uint8 input. Pairs of opposite sign, or within the limit, are unchanged."""
    rows, inputs = qweight.shape
    pairs = nn.functional.pad(qweight.to(torch.int32), (0, inputs % 2)).reshape(rows, -1, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    excess = ((a.abs() + b.abs() - PAIR_MAGNITUDE_MAX).clamp_min(0)) * (a * b > 0)
    cut_a = torch.where(a.abs() >= b.abs(), (excess + 1) // 2, excess // 2)
    a, b = a - a.sign() * cut_a, b - b.sign() * (excess - cut_a)
    return torch.stack([a, b], dim=-1).reshape(rows, -1)[:, :inputs].to(qweight.dtype)


def affine(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) of uint8 over [lo, hi], widened to hold 0 exactly."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max((hi - lo) / UINT8_MAX, 1e-8)
    return scale, int(round(-lo / scale))


def quantize_uint8(
    x: torch.Tensor, scale: float, zero: int, channel: torch.Tensor | None = None
) -> torch.Tensor:
    """round(x / scale) + zero, clamped to [0, 255], as uint8 (values outside the calibrated
    range saturate); with `channel`, x is first multiplied by it, one factor per input channel
    (SmoothQuant's 1/s, folded into the same multiply)."""
    y = torch.mul(x, 1.0 / scale if channel is None else channel)
    return y.round_().add_(zero).clamp_(0, UINT8_MAX).to(torch.uint8)


class SharedQuantizer(nn.Module):
    """One input's uint8 copy for the `readers` layers that read that same tensor (query, key and
    value): the first quantises it, the others reuse the copy, and the last one lets it go. The
    copy is per thread: a server's encode workers share one encoder."""

    def __init__(
        self, lo: float, hi: float, readers: int = 1, smooth: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        self.scale, self.zero = affine(lo, hi)
        self.readers = readers
        self._local = threading.local()
        self.smooth = smooth  # s per input channel (SmoothQuant), or None
        self._channel = None if smooth is None else (1.0 / (smooth * self.scale)).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        held = getattr(self._local, "held", None)
        if held is None or held[0] is not x:
            held = [x, quantize_uint8(x, self.scale, self.zero, self._channel), 0]
        held[2] += 1
        self._local.held = held if held[2] < self.readers else None
        q: torch.Tensor = held[1]
        return q


class StaticQLinear(nn.Module):
    """`nn.Linear` (optionally with the exact GELU fused) as oneDNN static int8.

    Its input is float (quantised at the calibrated range by `quantizer`) or already uint8 at that
    range (from a previous `StaticQLinear` with `out_range`). Output float32, or uint8 at
    `out_range` for the next layer. `weights`: how the weights are rounded (`round_weights`)."""

    def __init__(
        self,
        linear: nn.Linear,
        quantizer: SharedQuantizer,
        gelu: bool = False,
        out_range: tuple[float, float] | None = None,
        weights: str = "full",
    ) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        if quantizer.smooth is not None:  # W diag(s): the input channels' outliers moved in
            weight = weight * quantizer.smooth
            self.register_buffer("smooth", quantizer.smooth.clone())
        qweight, scale = round_weights(weight, weights)
        self.register_buffer("qweight", qweight)
        self.register_buffer("weight_scale", scale)
        self.register_buffer("weight_zero", torch.zeros_like(scale, dtype=torch.int64))
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.register_buffer("bias", bias)
        self.quantizer = quantizer
        self.register_buffer("x_range", torch.tensor([quantizer.scale, float(quantizer.zero)]))
        self.out_scale, self.out_zero, self.out_dtype = 1.0, 0, torch.float32
        if out_range is not None:
            self.out_scale, self.out_zero = affine(*out_range)
            self.out_dtype = torch.uint8
            self.register_buffer("out_range", torch.tensor([self.out_scale, float(self.out_zero)]))
        self.post_op, self.algorithm = ("gelu", "none") if gelu else ("none", "")
        self._packed = torch.ops.onednn.qlinear_prepack(self.qweight, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qx = x if x.dtype == torch.uint8 else self.quantizer(x)
        rows = qx.reshape(-1, qx.shape[-1])  # (n, in)
        out: torch.Tensor = torch.ops.onednn.qlinear_pointwise(
            rows, self.quantizer.scale, self.quantizer.zero, self._packed, self.weight_scale,
            self.weight_zero, self.bias, self.out_scale, self.out_zero, self.out_dtype,
            self.post_op, [], self.algorithm,
        )  # fmt: skip
        return out.reshape(*qx.shape[:-1], out.shape[-1])


@torch.no_grad()
def input_ranges(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    estimator: str = "mean_minmax",
    smooth: Mapping[nn.Module, torch.Tensor] = MappingProxyType({}),
) -> dict[nn.Module, tuple[float, float]]:
    """{linear: (lo, hi) of its input} over `sentences`, one sentence per forward (no padding
    enters the ranges, so a packed and a padded encoder calibrate alike): the lowest and highest
    value seen (`minmax`), or the mean over sentences of each one's min and max (`mean_minmax`)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"range estimator {estimator!r}: choose one of {', '.join(ESTIMATORS)}")
    seen: dict[nn.Module, list[tuple[float, float]]] = {}

    def record(_: str, linear: nn.Module, x: torch.Tensor) -> None:
        if linear in smooth:
            x = x / smooth[linear]
        seen.setdefault(linear, []).append((float(x.min()), float(x.max())))

    each_linear_input(encoder, sentences, record)
    if estimator == "minmax":
        return {m: (min(r[0] for r in v), max(r[1] for r in v)) for m, v in seen.items()}
    return {
        m: (sum(r[0] for r in v) / len(v), sum(r[1] for r in v) / len(v)) for m, v in seen.items()
    }


def _feed_forward_pairs(backbone: nn.Module) -> dict[nn.Module, nn.Linear]:
    """{first feed-forward linear: the second} for BERT-shaped layers (`intermediate.dense` with
    an exact-GELU `intermediate_act_fn`, then `output.dense`): the first, GELU fused, writes the
    second's uint8 input."""
    pairs: dict[nn.Module, nn.Linear] = {}
    for layer in backbone.modules():
        intermediate = getattr(layer, "intermediate", None)
        first = getattr(intermediate, "dense", None)
        second = getattr(getattr(layer, "output", None), "dense", None)
        act = getattr(intermediate, "intermediate_act_fn", None)
        fused = act is not None and exact_gelu(act)
        if isinstance(first, nn.Linear) and isinstance(second, nn.Linear) and fused:
            pairs[first] = second
    return pairs


def _shared_inputs(backbone: nn.Module) -> dict[nn.Module, tuple[nn.Linear, ...]]:
    """{layer: the layers that read its input, itself included} for BERT's query, key and value
    (a parent that has all three): one quantised copy of that input, one SmoothQuant s."""
    shared: dict[nn.Module, tuple[nn.Linear, ...]] = {}
    for parent in backbone.modules():
        children = dict(parent.named_children())
        qkv = tuple(m for m in (children.get(n) for n in QKV) if isinstance(m, nn.Linear))
        if len(qkv) == len(QKV):
            shared.update({m: qkv for m in qkv})
    return shared


@torch.no_grad()
def smoothing_scales(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    alpha: float = SMOOTH_ALPHA,
    fuse_feed_forward: bool = True,
) -> dict[nn.Module, torch.Tensor]:
    """{linear: s} per input channel (SmoothQuant, `smoothing.smoothing_factors` with NNCF's
    clipping) for the layers whose input `quantize_static` quantises itself: query, key and value
    read one input and share one s (their weights' column maxima taken together); the second
    feed-forward layer is left out where the first writes its uint8 input at one scale
    (`fuse_feed_forward`), else it gets its own."""
    peak = input_channel_max(encoder, tuple(sentences))  # {name: max |x_j| over every token}
    names = {m: n for n, m in encoder.backbone.named_modules()}
    second = set(_feed_forward_pairs(encoder.backbone).values()) if fuse_feed_forward else set()
    shared = _shared_inputs(encoder.backbone)
    scales: dict[nn.Module, torch.Tensor] = {}
    for module, name in names.items():
        if module in scales or module in second or name not in peak:
            continue
        layers = shared.get(module, (module,))  # nn.Linear: only they have a peak
        weight_peak = torch.stack([m.weight.abs().amax(0) for m in layers]).amax(0)
        s = smoothing_factors(peak[name], weight_peak, alpha, *SMOOTH_CLIP)
        scales.update({m: s for m in layers})
    return scales


def int8_probes(
    input_range: Mapping[nn.Linear, tuple[float, float]],
    smooth: Mapping[nn.Module, torch.Tensor],
    roundings: Callable[[nn.Module], Sequence[str]],
) -> dict[nn.Module, list[StaticQLinear]]:
    """{linear: one `StaticQLinear` of it per rounding in roundings(linear)}, each quantising its
    own input at the layer's calibrated range (smoothed where `smooth` has it)."""
    return {
        m: [
            StaticQLinear(m, SharedQuantizer(*r, smooth=smooth.get(m)), weights=w)
            for w in roundings(m)
        ]
        for m, r in input_range.items()
    }


def each_output_error(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    probes: Mapping[nn.Module, Sequence[StaticQLinear]],
    observe: Callable[[nn.Module, int, torch.Tensor], None],
) -> None:
    """For each layer in `probes`, fed the fp32 model's own input on `sentences` (one sentence per
    forward, `each_linear_input`): observe(layer, i, its fp32 output minus probe i's output), a
    (tokens, out) tensor. Pre-activation: a probe with GELU fused is compared before the GELU."""

    def record(_: str, linear: nn.Module, x: torch.Tensor) -> None:
        if linear not in probes:
            return
        rows = x.reshape(-1, x.shape[-1])
        assert isinstance(linear, nn.Linear)
        fp32 = nn.functional.linear(rows, linear.weight, linear.bias)  # linear() reruns this hook
        for i, probe in enumerate(probes[linear]):
            observe(linear, i, fp32 - probe(rows))

    each_linear_input(encoder, sentences, record)


@torch.no_grad()
def bias_shifts(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    input_range: dict[nn.Linear, tuple[float, float]],
    smooth: Mapping[nn.Module, torch.Tensor] = MappingProxyType({}),
    weights: Mapping[nn.Module, str] = MappingProxyType({}),
) -> dict[nn.Module, torch.Tensor]:
    """{linear: the mean over every calibration token of its fp32 output minus its int8 output},
    each layer fed the fp32 model's own input (empirical bias correction, as NNCF's "fast bias
    correction"; Nagel et al. 2019, "Data-Free Quantization", section 4.2): added to the int8
    layer's bias, it removes the mean shift that rounding its weights and input adds to each
    output channel. `weights`: each layer's rounding ("full" where absent)."""
    probes = int8_probes(input_range, smooth, lambda m: [weights.get(m, "full")])
    sums: dict[nn.Module, torch.Tensor] = {}
    tokens: dict[nn.Module, int] = {}

    def observe(linear: nn.Module, _: int, diff: torch.Tensor) -> None:
        total = diff.sum(0, dtype=torch.float64)
        sums[linear] = sums[linear] + total if linear in sums else total
        tokens[linear] = tokens.get(linear, 0) + diff.shape[0]

    each_output_error(encoder, sentences, probes, observe)
    return {m: (sums[m] / tokens[m]).float() for m in sums}


@torch.no_grad()
def least_error_weights(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    input_range: dict[nn.Linear, tuple[float, float]],
    smooth: Mapping[nn.Module, torch.Tensor] = MappingProxyType({}),
) -> dict[nn.Module, str]:
    """{linear: the rounding (`WEIGHT_MODES`) whose output on this CPU's kernel is closest to the
    fp32 layer's, by squared error summed over every calibration token}: on a CPU whose kernel
    saturates (`pairs_saturate`), full-range weights win where little saturates (a trained
    model's layers, mostly) and an exact rounding where much does (e.g. random weights)."""
    probes = int8_probes(input_range, smooth, lambda m: WEIGHT_MODES)
    errors: dict[nn.Module, list[float]] = {m: [0.0] * len(WEIGHT_MODES) for m in probes}

    def observe(linear: nn.Module, i: int, diff: torch.Tensor) -> None:
        errors[linear][i] += float(diff.double().square().sum())

    each_output_error(encoder, sentences, probes, observe)
    return {m: WEIGHT_MODES[min(range(len(e)), key=e.__getitem__)] for m, e in errors.items()}


@torch.no_grad()
def quantize_static(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    estimator: str = "mean_minmax",
    bias_correction: bool = False,
    smooth_alpha: float | None = SMOOTH_ALPHA,
    fuse_feed_forward: bool = True,
    weights: str = "auto",
) -> int:
    """In place: every `nn.Linear` of an fp32, eval-mode encoder's backbone -> `StaticQLinear`,
    calibrated on `sentences`: input channels smoothed first (`smoothing_scales`; None: not), and
    with `bias_correction` each layer's bias also takes its `bias_shifts`. With
    `fuse_feed_forward` False (an ablation: ~20 % slower, docs/performance.md) the first
    feed-forward layer writes float32 and the second smooths and quantises its own input, as
    NNCF's engine does. `weights`: how weights are rounded, one of `WEIGHT_MODES` for every
    layer, or "auto": "full" where this CPU's kernel is exact, else each layer's
    `least_error_weights`. Returns how many layers were swapped."""
    if weights not in ("auto", *WEIGHT_MODES):  # before the calibration passes, not after
        raise ValueError(f"weights {weights!r}: choose one of auto, {', '.join(WEIGHT_MODES)}")
    pairs = _feed_forward_pairs(encoder.backbone) if fuse_feed_forward else {}
    readers = _shared_inputs(encoder.backbone)
    smooth = (
        {}
        if smooth_alpha is None
        else smoothing_scales(encoder, sentences, smooth_alpha, fuse_feed_forward)
    )
    ranges = input_ranges(encoder, sentences, estimator, smooth)
    # (parent, name, linear, input range, gelu, shared): what is swapped, decided before it is
    plan: list[tuple[nn.Module, str, nn.Linear, tuple[float, float], bool, bool]] = []
    for parent in list(encoder.backbone.modules()):
        act = getattr(parent, "intermediate_act_fn", None)
        for name, child in parent.named_children():
            if not isinstance(child, nn.Linear) or child not in ranges:
                continue
            gelu = name == "dense" and act is not None and exact_gelu(act)
            group = [ranges[m] for m in readers.get(child, ()) if m in ranges]
            shared = len(group) == len(QKV)  # one input: one quantised copy
            lo_hi = (
                (min(r[0] for r in group), max(r[1] for r in group)) if shared else ranges[child]
            )
            plan.append((parent, name, child, lo_hi, gelu, shared))
    if not plan:  # e.g. layers already swapped (oneDNN's packed fp32: onednn.unpack_linears)
        raise ValueError("quantize_static: the backbone has no nn.Linear layer to quantise")
    planned = {p[2]: p[3] for p in plan}
    if weights == "auto":
        rounding = (
            least_error_weights(encoder, sentences, planned, smooth) if pairs_saturate() else {}
        )
    else:
        rounding = dict.fromkeys(planned, weights)
    shifts = {}
    if bias_correction:
        shifts = bias_shifts(encoder, sentences, planned, smooth, rounding)
    quantizers: dict[int, SharedQuantizer] = {}  # by parent: query, key and value share one
    for parent, name, child, lo_hi, gelu, shared in plan:
        s = smooth.get(child)
        if shared:
            quantizer = quantizers.setdefault(id(parent), SharedQuantizer(*lo_hi, len(QKV), s))
        else:
            quantizer = SharedQuantizer(*lo_hi, smooth=s)
        second = pairs.get(child)
        out_range = ranges[second] if second is not None and gelu else None
        layer = StaticQLinear(child, quantizer, gelu, out_range, rounding.get(child, "full"))
        if child in shifts:
            bias = layer.bias if isinstance(layer.bias, torch.Tensor) else 0.0
            layer.bias = bias + shifts[child]
        setattr(parent, name, layer)
        if gelu:
            parent.intermediate_act_fn = nn.Identity()
    return len(plan)
