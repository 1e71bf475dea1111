"""Static int8 (`dclr.models.static_int8`): the quantiser and the layer against hand-written
formulas, one quantised copy for query, key and value, calibration without padding, and the
weight roundings a CPU without VNNI computes exactly."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
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
    WEIGHT_MODES,
    SharedQuantizer,
    StaticQLinear,
    affine,
    clip_pairs,
    input_ranges,
    quantize_static,
    quantize_uint8,
    round_weights,
)

pytestmark = pytest.mark.skipif(not static_int8.available(), reason="no oneDNN int8 linear")
# What these tests' exact comparisons build layers with: full-range weights where this CPU's
# kernel computes them exactly (VNNI), else the rounding it computes exactly; the saturation
# itself is tested under an AVX2 limit (`test_without_vnni_...`), on every x86 machine.
EXACT_HERE = "exact_pairs" if static_int8.pairs_saturate() else "full"


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


def _reference(
    linear: nn.Linear, x: torch.Tensor, lo: float, hi: float, weights: str = EXACT_HERE
) -> torch.Tensor:
    """Dequantised input times dequantised per-channel int8 weights (7-bit for "int7", pairs
    clipped for "exact_pairs"), plus the bias."""
    scale, zero = affine(lo, hi)
    xq = (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale
    w = linear.weight.detach()
    top = 63 if weights == "int7" else 127
    w_scale = w.abs().amax(1) / top
    wq = torch.clamp(torch.round(w / w_scale[:, None]), -top - 1, top)
    if weights == "exact_pairs":
        wq = clip_pairs(wq)
    return xq @ (wq * w_scale[:, None]).T + linear.bias.detach()


@pytest.mark.parametrize("weights", WEIGHT_MODES)
def test_the_layer_computes_dequantised_input_times_dequantised_weights(weights):
    if weights == "full" and EXACT_HERE != "full":
        pytest.skip("this CPU's int8 kernel saturates full-range weights (no VNNI)")
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    x = torch.randn(2, 7, 64)
    layer = StaticQLinear(linear, SharedQuantizer(-2.5, 2.0), weights=weights)
    out = layer(x)
    assert out.shape == (2, 7, 48) and out.dtype == torch.float32
    expected = _reference(linear, x, -2.5, 2.0, weights)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_round_weights_scales_each_row_to_its_range_and_refuses_an_unknown_mode():
    torch.manual_seed(0)
    w = torch.randn(6, 10)
    for mode, top in (("full", 127), ("int7", 63)):
        q, scale = round_weights(w, mode)
        assert q.dtype == torch.int8
        torch.testing.assert_close(scale, w.abs().amax(1) / top)
        assert q.abs().amax(1).tolist() == [top] * 6  # each row's largest weight at the top
        assert torch.equal(q, torch.round(w / scale[:, None]).to(torch.int8))
    full, _ = round_weights(w, "full")
    assert torch.equal(round_weights(w, "exact_pairs")[0], clip_pairs(full))
    with pytest.raises(ValueError, match="'int6'.*full, exact_pairs, int7"):
        round_weights(w, "int6")


def test_clip_pairs_brings_same_sign_pairs_to_128_and_leaves_the_rest():
    q = torch.tensor(
        [[127, 127, -128, -1, 100, -100, 64, 64, 65, 64, 0, 127, -3, -127, 9]], dtype=torch.int8
    )
    expected = [[64, 64, -127, -1, 100, -100, 64, 64, 64, 64, 0, 127, -2, -126, 9]]
    # 254 -> 128: 63 off each; 129: the larger gives the 1; opposite signs, 128 exactly and a
    # zero stay; 130: 1 off each; the odd last column has no partner
    assert clip_pairs(q).tolist() == expected
    torch.manual_seed(1)
    q = torch.randint(-128, 128, (64, 384), dtype=torch.int8)
    clipped = clip_pairs(q).int().reshape(64, -1, 2)
    same = clipped[..., 0] * clipped[..., 1] > 0
    assert (clipped.abs().sum(-1)[same] <= 128).all()
    before = q.int().reshape(64, -1, 2)
    kept = (before[..., 0] * before[..., 1] <= 0) | (before.abs().sum(-1) <= 128)
    assert torch.equal(clipped[kept], before[kept])  # only offending pairs move
    assert ((clipped.sign() == before.sign()) | (clipped == 0)).all()  # and none changes sign


KERNEL_PROBE = """
import json, torch
from dclr.models import static_int8 as s
torch.manual_seed(0)
w, x = torch.randn(96, 384), torch.randint(0, 256, (37, 384), dtype=torch.uint8)
exact = {}
for mode in s.WEIGHT_MODES:
    q, _ = s.round_weights(w, mode)
    y = torch.ops.onednn.qlinear_pointwise(
        x, 1.0, 0, torch.ops.onednn.qlinear_prepack(q, None), torch.ones(96),
        torch.zeros(96, dtype=torch.int64), None, 1.0, 0, torch.float32, "none", [], "")
    exact[mode] = torch.equal(y, (x.double() @ q.double().T).float())
print(json.dumps({"saturate": s.pairs_saturate(), "exact": exact}))
"""


def _probe_kernel(**env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_PROBE], env={**os.environ, **env}, capture_output=True,
        text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA limit")
def test_without_vnni_the_kernel_saturates_and_the_exact_roundings_do_not():
    """oneDNN limited to AVX2 (no VNNI, as on an AVX2-only EPYC) sums pairs of u8 x s8 products
    in int16: `pairs_saturate` says so, full-range weights come back wrong, and the two roundings
    made for it come back exact, integer for integer."""
    seen = _probe_kernel(ONEDNN_MAX_CPU_ISA="AVX2")
    assert seen == {"saturate": True, "exact": {"full": False, "exact_pairs": True, "int7": True}}


def test_this_cpus_kernel_is_exact_for_what_pairs_saturate_says_it_is():
    seen = _probe_kernel()
    assert seen["exact"] == {"full": not seen["saturate"], "exact_pairs": True, "int7": True}


def test_quantize_static_refuses_an_unknown_weight_rounding_before_calibrating(tiny_model_dir):
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
    with pytest.raises(ValueError, match="'int4'.*full, exact_pairs, int7"):
        quantize_static(encoder.eval(), [], weights="int4")  # no sentences: it never got there


def test_gelu_fused_with_uint8_out_is_the_next_layers_input():
    torch.manual_seed(1)
    linear = nn.Linear(32, 64)
    x = torch.randn(5, 32)
    out_range = (-0.2, 3.0)
    layer = StaticQLinear(
        linear, SharedQuantizer(-3.0, 3.0), gelu=True, out_range=out_range, weights=EXACT_HERE
    )
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
    # the mean, sentence by sentence, of each one's own min and max (not their median)
    each = [input_ranges(encoder, [s], "minmax") for s in SAMPLE_SENTENCES]
    for m in mean:
        lows, highs = zip(*(ranges[m] for ranges in each), strict=True)
        assert mean[m] == pytest.approx((sum(lows) / len(lows), sum(highs) / len(highs)))
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
    ranges = {linear: (lo, hi)}
    shift = static_int8.bias_shifts(OneLayer(), ["x"], ranges, weights={linear: EXACT_HERE})[linear]
    torch.testing.assert_close(shift, expected, atol=1e-5, rtol=1e-4)
    assert shift.abs().max() > 1e-4  # there was a shift to remove
    corrected = StaticQLinear(linear, SharedQuantizer(lo, hi), weights=EXACT_HERE)
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


def test_auto_rounding_is_full_where_the_kernel_is_exact_and_least_error_where_not(
    tiny_model_dir, monkeypatch
):
    """`quantize_static(weights="auto")`: bit-identical to "full" on a kernel that does not
    saturate (no extra calibration pass), and each layer the rounding `least_error_weights`
    names where it does."""

    def quantized(weights: str) -> dict[str, torch.Tensor]:
        encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten")
        quantize_static(encoder.eval(), SAMPLE_SENTENCES, weights=weights)
        return encoder.backbone.state_dict()

    def never(*args, **kwargs):
        raise AssertionError("least_error_weights ran on an exact kernel")

    monkeypatch.setattr(static_int8, "pairs_saturate", lambda: False)
    monkeypatch.setattr(static_int8, "least_error_weights", never)
    auto, full = quantized("auto"), quantized("full")
    assert auto.keys() == full.keys() and all(torch.equal(auto[k], full[k]) for k in auto)

    chosen: dict[nn.Module, str] = {}

    def choose(encoder, sentences, ranges, smooth):  # a fixed choice, one per layer in turn
        chosen.update({m: WEIGHT_MODES[i % len(WEIGHT_MODES)] for i, m in enumerate(ranges)})
        return dict(chosen)

    monkeypatch.setattr(static_int8, "pairs_saturate", lambda: True)
    monkeypatch.setattr(static_int8, "least_error_weights", choose)
    encoder = load_inference_encoder(tiny_model_dir, "mean", "fp32", linear_kernel="aten").eval()
    named = {n: m for n, m in encoder.backbone.named_modules() if isinstance(m, nn.Linear)}
    quantize_static(encoder, SAMPLE_SENTENCES)
    assert set(chosen.values()) == set(WEIGHT_MODES) and set(chosen) == set(named.values())
    for name, linear in named.items():  # each layer rounded as named
        layer = encoder.backbone.get_submodule(name)
        assert isinstance(layer, StaticQLinear)
        weight = linear.weight.detach() * getattr(layer, "smooth", 1.0)
        assert torch.equal(layer.qweight, round_weights(weight, chosen[linear])[0]), name


@pytest.mark.skipif(static_int8.pairs_saturate(), reason="the hand reference is this CPU's kernel")
def test_least_error_weights_names_the_rounding_closest_to_fp32(monkeypatch):
    torch.manual_seed(3)
    layers = [nn.Linear(32, 16) for _ in range(2)]
    with torch.no_grad():
        layers[1].weight[:, ::2] = layers[1].weight[:, ::2].abs()  # pairs of one sign, large
        layers[1].weight[:, 1::2] = layers[1].weight[:, ::2]
    tokens = torch.randn(40, 32) * 2 + 1.0
    lo, hi = float(tokens.min()), float(tokens.max())

    class TwoLayers:
        backbone = nn.Sequential(*layers)

    def feed(encoder, sentences, observe):
        for linear in layers:
            for chunk in tokens.split(8):
                observe("0", linear, chunk)

    monkeypatch.setattr(static_int8, "each_linear_input", feed)
    ranges = {m: (lo, hi) for m in layers}
    chosen = static_int8.least_error_weights(TwoLayers(), ["x"], ranges)
    for linear in layers:
        linear.requires_grad_(False)
        error = {
            w: float((linear(tokens) - _reference(linear, tokens, lo, hi, w)).square().sum())
            for w in WEIGHT_MODES
        }
        assert chosen[linear] == min(error, key=error.__getitem__)
    assert chosen[layers[0]] == "full"  # exact here, on the finest grid


AUTO_PROBE = """
import json, sys, numpy as np
from dclr.models.precision import load_inference_encoder
from dclr.models.static_int8 import quantize_static, pairs_saturate
sentences = json.loads(sys.argv[2])
def unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True)
fp32 = unit(load_inference_encoder(sys.argv[1], "cls_before_pooler").encode(sentences))
worst = {}
for weights in ("full", "auto"):
    e = load_inference_encoder(sys.argv[1], "cls_before_pooler", linear_kernel="aten").eval()
    quantize_static(e, sentences, weights=weights)
    e.precision = "int8"
    worst[weights] = float((fp32 * unit(e.encode(sentences))).sum(1).min())
print(json.dumps({"saturate": pairs_saturate(), "worst": worst}))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA limit")
def test_without_vnni_auto_rounding_keeps_a_random_model_close_to_fp32(tiny_model_dir):
    """A random model (uniform weights: many large pairs) under an AVX2 limit: full-range weights
    saturate its vectors away from fp32; the per-layer rounding keeps them within 0.99."""
    done = subprocess.run(
        [sys.executable, "-c", AUTO_PROBE, str(tiny_model_dir), json.dumps(SAMPLE_SENTENCES)],
        env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}, capture_output=True, text=True,
        timeout=300, check=True,
    )  # fmt: skip
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["saturate"] is True
    assert seen["worst"]["auto"] >= 0.99 > seen["worst"]["full"], seen
