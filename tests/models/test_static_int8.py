"""Static int8 (`dclr.models.static_int8`): the quantiser and the layer against hand-written
formulas, one quantised copy for query, key and value, calibration without padding."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from helpers import SAMPLE_SENTENCES
from torch import nn

from dclr.errors import ConfigError
from dclr.indexing.fingerprint import model_fingerprint
from dclr.models import static_int8
from dclr.models.precision import load_inference_encoder, quantize_int8
from dclr.models.smoothing import smoothing_factors
from dclr.models.static_int8 import (
    SharedQuantizer,
    StaticQLinear,
    affine,
    input_ranges,
    quantize_static,
    quantize_uint8,
)

pytestmark = pytest.mark.skipif(not static_int8.available(), reason="no oneDNN int8 linear")


def static_encoder(model_dir, packing: bool = False):
    """The static engine by name, whatever this CPU kind's recorded int8 engine is."""
    encoder = load_inference_encoder(model_dir, "mean", "fp32", packing, linear_kernel="aten")
    return quantize_int8(encoder, engine="static")


def test_affine_and_quantize_follow_the_formulas():
    scale, zero = affine(-1.0, 3.0)
    assert scale == pytest.approx(4.0 / 255) and zero == round(1.0 / scale)
    assert affine(0.5, 2.0) == (pytest.approx(2.0 / 255), 0)  # widened to hold 0
    x = torch.tensor([-5.0, -1.0, 0.0, 0.01, 1.5, 3.0, 9.0])
    expected = [min(255, max(0, round(v / scale) + zero)) for v in x.tolist()]
    assert quantize_uint8(x, scale, zero).tolist() == expected
    assert quantize_uint8(x, scale, zero).dtype == torch.uint8


def _reference(linear: nn.Linear, x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Dequantised input times dequantised per-channel int8 weights, plus the bias."""
    scale, zero = affine(lo, hi)
    xq = (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale
    w = linear.weight.detach()
    w_scale = w.abs().amax(1) / 127
    wq = torch.clamp(torch.round(w / w_scale[:, None]), -128, 127) * w_scale[:, None]
    return xq @ wq.T + linear.bias.detach()


def test_the_layer_computes_dequantised_input_times_dequantised_weights():
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    x = torch.randn(2, 7, 64)
    layer = StaticQLinear(linear, SharedQuantizer(-2.5, 2.0))
    out = layer(x)
    assert out.shape == (2, 7, 48) and out.dtype == torch.float32
    torch.testing.assert_close(out, _reference(linear, x, -2.5, 2.0), atol=1e-4, rtol=1e-4)


def test_gelu_fused_with_uint8_out_is_the_next_layers_input():
    torch.manual_seed(1)
    linear = nn.Linear(32, 64)
    x = torch.randn(5, 32)
    out_range = (-0.2, 3.0)
    layer = StaticQLinear(linear, SharedQuantizer(-3.0, 3.0), gelu=True, out_range=out_range)
    q = layer(x)
    assert q.dtype == torch.uint8
    expected = quantize_uint8(
        nn.functional.gelu(_reference(linear, x, -3.0, 3.0)), *affine(*out_range)
    )
    assert (q.int() - expected.int()).abs().max() <= 1  # rounding at a step's edge


def test_one_quantised_copy_per_input_for_query_key_and_value(tiny_model_dir, monkeypatch):
    encoder = static_encoder(tiny_model_dir)
    layers = encoder.backbone.config.num_hidden_layers
    calls = []
    real = static_int8.quantize_uint8
    monkeypatch.setattr(static_int8, "quantize_uint8", lambda *a: calls.append(1) or real(*a))
    encoder.encode(["one sentence", "and another one here"], batch_size=2)
    # per layer: q/k/v's shared input, attention output's input, feed-forward input; the second
    # feed-forward layer reads the first's uint8 output (no quantising pass); one for the pooler
    # when the backbone has one
    pooler = getattr(encoder.backbone, "pooler", None)
    pooled = pooler is not None and any(isinstance(m, StaticQLinear) for m in pooler.modules())
    assert len(calls) == 3 * layers + pooled
    qkv = ("query", "key", "value")
    modules = encoder.backbone.named_modules()
    shared = {id(m.quantizer) for name, m in modules if name.endswith(qkv)}
    assert len(shared) == layers


def test_the_shared_copy_is_per_thread(monkeypatch):
    calls = []
    real = static_int8.quantize_uint8
    monkeypatch.setattr(static_int8, "quantize_uint8", lambda *a: calls.append(1) or real(*a))
    quantizer = SharedQuantizer(-1.0, 1.0, readers=3)
    a, b = torch.full((4,), 0.5), torch.full((4,), -0.5)
    first = quantizer(a)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(quantizer(b)))
    thread.start()
    thread.join()
    # the other thread's input neither replaced this thread's copy nor was given it
    assert torch.equal(quantizer(a), first) and len(calls) == 2
    assert not torch.equal(seen[0], first)


def test_calibration_sees_no_padding(tiny_model_dir):
    padded = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
    packed = load_inference_encoder(
        tiny_model_dir, "mean", "fp32", packing=True, linear_kernel="aten"
    )
    names = {m: n for n, m in padded.backbone.named_modules()}
    names.update({m: n for n, m in packed.backbone.named_modules()})
    a = {names[m]: r for m, r in input_ranges(padded, SAMPLE_SENTENCES).items()}
    b = {names[m]: r for m, r in input_ranges(packed, SAMPLE_SENTENCES).items()}
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)


def test_minmax_ranges_hold_every_value_and_the_mean_ranges_lie_inside(tiny_model_dir):
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
    wide = input_ranges(encoder, SAMPLE_SENTENCES, "minmax")
    mean = input_ranges(encoder, SAMPLE_SENTENCES, "mean_minmax")
    assert wide.keys() == mean.keys()
    assert all(wide[m][0] <= mean[m][0] <= mean[m][1] <= wide[m][1] for m in wide)
    assert any(wide[m] != mean[m] for m in wide)
    with pytest.raises(ValueError, match="mean_minmax, minmax"):
        input_ranges(encoder, SAMPLE_SENTENCES, "percentile")


def test_calibration_enters_the_fingerprint(tiny_model_dir):
    one = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    other = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    quantize_static(one, SAMPLE_SENTENCES[:4])
    quantize_static(other, SAMPLE_SENTENCES[4:])
    one.precision = other.precision = "int8"
    assert model_fingerprint(one) != model_fingerprint(other)


def test_every_linear_is_static_int8_and_an_outlier_text_still_encodes(tiny_model_dir):
    fp32 = load_inference_encoder(tiny_model_dir, "mean", "fp32", packing=True)
    expected = fp32.encode(SAMPLE_SENTENCES, normalize=True)
    encoder = static_encoder(tiny_model_dir, packing=True)
    modules = list(encoder.backbone.modules())
    assert not any(isinstance(m, nn.Linear) for m in modules)
    assert any(isinstance(m, StaticQLinear) for m in modules)
    got = encoder.encode([*SAMPLE_SENTENCES, "zzzz qqqq " * 40], normalize=True)
    assert (got[: len(SAMPLE_SENTENCES)] * expected).sum(1).min() > 0.95
    assert np.isfinite(got).all()  # outside the calibrated range: saturated, not broken


def test_the_dynamic_engine_stays_reachable_and_a_wrong_engine_is_named(tiny_model_dir):
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
    quantize_int8(encoder, engine="dynamic")
    assert encoder.precision == "int8"
    assert not any(isinstance(m, StaticQLinear) for m in encoder.backbone.modules())
    plain = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
    with pytest.raises(ConfigError, match="auto, static or dynamic"):
        quantize_int8(plain, engine="fast")


def test_two_threads_encoding_at_once_get_their_own_vectors(tiny_model_dir):
    # a server's encode workers share one encoder: each thread's query/key/value copy is its own
    encoder = static_encoder(tiny_model_dir)
    texts = [SAMPLE_SENTENCES[:4], SAMPLE_SENTENCES[4:9]]
    alone = [encoder.encode(t) for t in texts]
    results: dict[int, list[np.ndarray]] = {0: [], 1: []}

    def work(i: int) -> None:
        for _ in range(20):
            results[i].append(encoder.encode(texts[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in (0, 1):
        assert len(results[i]) == 20
        for got in results[i]:
            np.testing.assert_allclose(got, alone[i], rtol=0, atol=1e-6)


def test_bias_shift_is_the_mean_output_error_and_correcting_it_removes_it(monkeypatch):
    """`bias_shifts` against a hand computation on one layer (mean over tokens of fp32 output
    minus int8 output), and a layer whose bias took the shift has no mean error left."""
    torch.manual_seed(0)
    linear = nn.Linear(32, 16)
    tokens = torch.randn(40, 32) + 0.3  # an offset input: rounding errors do not average out
    lo, hi = float(tokens.min()), float(tokens.max())
    expected = (linear(tokens) - _reference(linear, tokens, lo, hi)).mean(0)

    class OneLayer:  # what each_linear_input gives bias_shifts: each sentence's input, one by one
        backbone = nn.Sequential(linear)

    def feed(encoder, sentences, observe):
        for chunk in tokens.split(8):
            observe("0", linear, chunk)

    monkeypatch.setattr(static_int8, "each_linear_input", feed)
    shift = static_int8.bias_shifts(OneLayer(), ["x"], {linear: (lo, hi)})[linear]
    torch.testing.assert_close(shift, expected, atol=1e-5, rtol=1e-4)
    assert shift.abs().max() > 1e-4  # there was a shift to remove
    corrected = StaticQLinear(linear, SharedQuantizer(lo, hi))
    corrected.bias = corrected.bias + shift
    residual = (linear(tokens) - corrected(tokens)).mean(0)
    assert residual.abs().max() < shift.abs().max() / 100


def test_bias_correction_changes_only_the_biases(tiny_model_dir):
    plain = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    fixed = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    assert quantize_static(plain, SAMPLE_SENTENCES) == quantize_static(
        fixed, SAMPLE_SENTENCES, bias_correction=True
    )
    a, b = plain.backbone.state_dict(), fixed.backbone.state_dict()
    differ = {k for k in a if not torch.equal(a[k], b[k])}
    assert differ and all(k.endswith(".bias") for k in differ)
    plain.precision = fixed.precision = "int8"
    assert model_fingerprint(plain) != model_fingerprint(fixed)  # an index knows which


def test_quantize_static_refuses_a_backbone_with_nothing_to_quantise(tiny_model_dir):
    """On oneDNN's packed fp32 layers it swapped nothing and the encoder stayed fp32, silently."""
    packed = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="onednn")
    with pytest.raises(ValueError, match="no nn.Linear layer to quantise"):
        quantize_static(packed, SAMPLE_SENTENCES)


def test_smoothing_factors_follow_the_formula_and_nncfs_clipping():
    act = torch.tensor([28.0, 1.8, 0.0, 4.0])
    weight = torch.tensor([0.5, 0.2, 0.3, 0.0])
    floor = 1e-5  # smoothing.MIN_STAT: a statistic never seen non-zero
    expected = [
        max(a, floor) ** 0.95 / max(w, floor) ** 0.05
        for a, w in zip(act.tolist(), weight.tolist(), strict=True)
    ]
    s = smoothing_factors(act, weight, 0.95)
    torch.testing.assert_close(s, torch.tensor(expected))
    low = float(np.quantile(expected, 0.5))  # torch.quantile and numpy both interpolate linearly
    clipped = smoothing_factors(act, weight, 0.95, floor_quantile=0.5, ceiling=20.0)
    torch.testing.assert_close(clipped, torch.tensor([min(max(e, low), 20.0) for e in expected]))


def test_a_channel_factor_in_the_quantiser_divides_that_channel_first():
    x = torch.tensor([[3.3, -0.7, 0.21], [-6.1, 0.9, 0.05]])  # none at a step's edge
    s = torch.tensor([4.0, 1.0, 0.5])
    scale, zero = affine(-2.0, 2.0)
    expected = quantize_uint8(x / s, scale, zero)  # the formula: round((x / s) / scale) + zero
    assert torch.equal(quantize_uint8(x, scale, zero, 1.0 / (s * scale)), expected)
    # s = 1 everywhere is the plain quantiser, to the bit
    plain = SharedQuantizer(-2.0, 2.0)
    ones = SharedQuantizer(-2.0, 2.0, smooth=torch.ones(3))
    assert torch.equal(plain(x), ones(x))


@torch.no_grad()
def test_a_smoothed_layer_computes_the_same_function_with_less_error_on_an_outlier_channel():
    """y = (x / s)(W diag(s))^T + b is the layer itself; rounded, it keeps the small channels."""
    torch.manual_seed(2)
    linear = nn.Linear(16, 8)
    x = torch.randn(64, 16) * 0.5
    x[:, 3] *= 40.0  # one outlier channel, as MiniLM's
    s = smoothing_factors(x.abs().amax(0), linear.weight.abs().amax(0), 0.95)
    lo, hi = float(x.min()), float(x.max())
    plain = StaticQLinear(linear, SharedQuantizer(lo, hi))
    smoothed_x = x / s
    smoothed = StaticQLinear(
        linear, SharedQuantizer(float(smoothed_x.min()), float(smoothed_x.max()), smooth=s)
    )
    exact = linear(x)
    scaled = nn.functional.linear(smoothed_x, linear.weight * s, linear.bias)
    torch.testing.assert_close(scaled, exact, atol=1e-4, rtol=1e-4)
    error = {
        name: (layer(x) - exact).abs().mean()
        for name, layer in (("plain", plain), ("smoothed", smoothed))
    }
    assert error["smoothed"] < error["plain"] / 2


def test_query_key_and_value_share_one_smoothing_and_the_second_feed_forward_has_none(
    tiny_model_dir,
):
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    named = dict(encoder.backbone.named_modules())
    scales = static_int8.smoothing_scales(encoder, SAMPLE_SENTENCES)
    layer = "encoder.layer.0."
    q, k, v = (named[f"{layer}attention.self.{n}"] for n in ("query", "key", "value"))
    assert torch.equal(scales[q], scales[k]) and torch.equal(scales[q], scales[v])
    attention_out = named[f"{layer}attention.output.dense"]
    first, second = named[f"{layer}intermediate.dense"], named[f"{layer}output.dense"]
    assert attention_out in scales and first in scales and second not in scales
    # the shared s uses the three weights' column maxima together
    peak = static_int8.input_channel_max(encoder, tuple(SAMPLE_SENTENCES))
    together = torch.stack([m.weight.detach().abs().amax(0) for m in (q, k, v)]).amax(0)
    expected = smoothing_factors(
        peak[f"{layer}attention.self.query"], together, static_int8.SMOOTH_ALPHA,
        *static_int8.SMOOTH_CLIP,
    )  # fmt: skip
    torch.testing.assert_close(scales[q], expected)


def test_smoothing_is_on_by_default_and_enters_the_fingerprint(tiny_model_dir):
    fp32 = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    expected = fp32.encode(SAMPLE_SENTENCES, normalize=True)
    plain = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    smooth = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    quantize_static(plain, SAMPLE_SENTENCES, smooth_alpha=None)
    quantize_static(smooth, SAMPLE_SENTENCES)
    assert not any(
        hasattr(m, "smooth") for m in plain.backbone.modules() if isinstance(m, StaticQLinear)
    )
    assert any(
        hasattr(m, "smooth") for m in smooth.backbone.modules() if isinstance(m, StaticQLinear)
    )
    plain.precision = smooth.precision = "int8"
    assert model_fingerprint(plain) != model_fingerprint(smooth)
    for encoder in (plain, smooth):
        got = encoder.encode(SAMPLE_SENTENCES, normalize=True)
        assert (got * expected).sum(1).min() > 0.95


def test_a_second_feed_forward_layer_that_quantises_its_own_input_is_smoothed(tiny_model_dir):
    """Without an exact GELU the first layer cannot write the second's uint8 input, so the second
    quantises its own input and takes its own s."""
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    for layer in encoder.backbone.encoder.layer:
        layer.intermediate.intermediate_act_fn = nn.ReLU()
    scales = static_int8.smoothing_scales(encoder, SAMPLE_SENTENCES)
    second = encoder.backbone.encoder.layer[0].output.dense
    assert second in scales
    assert quantize_static(encoder, SAMPLE_SENTENCES) > 0
    assert hasattr(encoder.backbone.encoder.layer[0].output.dense, "smooth")
    assert np.isfinite(encoder.encode(SAMPLE_SENTENCES)).all()


def test_unfused_the_first_feed_forward_writes_float_and_the_second_is_smoothed(tiny_model_dir):
    """The ablation `fuse_feed_forward=False` (NNCF's layout): the first layer keeps its exact
    GELU but writes float32, the second smooths and quantises its own input; still the same
    function to int8 error."""
    fp32 = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    expected = fp32.encode(SAMPLE_SENTENCES, normalize=True)
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    quantize_static(encoder, SAMPLE_SENTENCES, fuse_feed_forward=False)
    layer = encoder.backbone.encoder.layer[0]
    first, second = layer.intermediate.dense, layer.output.dense
    assert first.post_op == "gelu" and first.out_dtype == torch.float32
    assert hasattr(second, "smooth") and second.quantizer is not first.quantizer
    fused = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    quantize_static(fused, SAMPLE_SENTENCES)
    assert fused.backbone.encoder.layer[0].intermediate.dense.out_dtype == torch.uint8
    got = encoder.encode(SAMPLE_SENTENCES, normalize=True)
    assert (got * expected).sum(1).min() > 0.95
