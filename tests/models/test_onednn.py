"""oneDNN linear layers for fp32 CPU inference (`dclr.models.onednn`): the same outputs as
`nn.Linear` (and its GELU) to float32 rounding, the same state dict to the bit (so the same
fingerprint), the same vectors padded and packed, inference only, and the ways to opt out."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import SAMPLE_SENTENCES as SENTENCES
from torch import nn
from transformers.activations import GELUActivation

from dclr.errors import ConfigError
from dclr.indexing.fingerprint import model_fingerprint
from dclr.models import onednn, onednn_env
from dclr.models.onednn import PackedLinear, choose_kernel, pack_linears, unpack_linears
from dclr.models.precision import load_inference_encoder, quantize_int8

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN")


@pytest.mark.parametrize("shape", [(1, 24), (13, 24), (3, 5, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_computes_x_wt_plus_b(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    expected = x @ linear.weight.T + (linear.bias if bias else 0)  # the formula, by hand
    with torch.inference_mode():
        got = PackedLinear(linear)(x)
    assert got.shape == (*shape[:-1], 40)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_packed_linear_with_gelu_is_the_erf_gelu_of_the_linear():
    torch.manual_seed(1)
    linear, x = nn.Linear(16, 32), torch.randn(2, 7, 16)
    y = x @ linear.weight.T + linear.bias
    expected = 0.5 * y * (1 + torch.erf(y / 2**0.5))  # GELU, exact form
    with torch.inference_mode():
        got = PackedLinear(linear, "gelu")(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_state_dict_keeps_the_plain_weights_bit_for_bit():
    linear = nn.Linear(24, 40)
    packed = PackedLinear(linear)
    state = packed.state_dict()
    assert set(state) == {"weight", "bias"}
    assert torch.equal(state["weight"], linear.weight) and torch.equal(state["bias"], linear.bias)


def test_pack_linears_fuses_only_an_exact_gelu_after_dense():
    block = nn.Module()
    block.dense = nn.Linear(8, 8)
    block.intermediate_act_fn = GELUActivation()
    tanh_block = nn.Module()
    tanh_block.dense = nn.Linear(8, 8)
    tanh_block.intermediate_act_fn = nn.GELU(approximate="tanh")
    root = nn.Sequential(block, tanh_block, nn.Linear(8, 8))
    assert pack_linears(root) == 3
    assert block.dense.activation == "gelu" and isinstance(block.intermediate_act_fn, nn.Identity)
    assert tanh_block.dense.activation == "none"
    assert isinstance(tanh_block.intermediate_act_fn, nn.GELU)


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("pooler", ["mean", "cls_before_pooler"])
def test_encoder_vectors_and_fingerprint_match_pytorchs_kernel(tiny_model_dir, packing, pooler):
    aten = load_inference_encoder(tiny_model_dir, pooler, packing=packing, linear_kernel="aten")
    fast = load_inference_encoder(tiny_model_dir, pooler, packing=packing, linear_kernel="onednn")
    assert aten.linear_kernel == "aten" and fast.linear_kernel == "onednn"
    assert not any(isinstance(m, nn.Linear) for m in fast.backbone.modules())
    assert np.abs(aten.encode(SENTENCES) - fast.encode(SENTENCES)).max() < 1e-5
    assert model_fingerprint(aten) == model_fingerprint(fast)


def test_an_encoder_on_onednn_refuses_training(tiny_model_dir):
    encoder = load_inference_encoder(tiny_model_dir, "mean", linear_kernel="onednn")
    with pytest.raises(ConfigError, match="cannot be trained"):
        encoder.train()


def test_int8_keeps_its_own_kernels(tiny_model_dir):
    encoder = load_inference_encoder(tiny_model_dir, "mean", "int8", linear_kernel="onednn")
    assert encoder.precision == "int8" and encoder.linear_kernel == "aten"


def test_unpack_linears_gives_back_the_same_linears_and_gelu():
    torch.manual_seed(0)
    block = nn.Module()
    block.dense = nn.Linear(8, 8)
    block.intermediate_act_fn = GELUActivation()
    root = nn.Sequential(block, nn.Linear(8, 6, bias=False))
    x = torch.randn(5, 8)
    before = root[1](block.intermediate_act_fn(block.dense(x)))
    weights = {k: v.clone() for k, v in root.state_dict().items()}
    assert pack_linears(root) == 2 and unpack_linears(root) == 2
    assert isinstance(block.dense, nn.Linear) and isinstance(root[1], nn.Linear)
    assert isinstance(block.intermediate_act_fn, nn.GELU)  # the erf GELU it had fused
    assert all(torch.equal(weights[k], v) for k, v in root.state_dict().items())
    torch.testing.assert_close(root[1](block.intermediate_act_fn(block.dense(x))), before)


@pytest.mark.parametrize("engine", ["static", "dynamic"])
def test_quantize_int8_of_an_encoder_on_onednn_is_the_int8_encoder(tiny_model_dir, engine):
    """An fp32 CPU encoder from load_inference_encoder runs on oneDNN's packed layers, which are
    not nn.Linear: quantize_int8 marked it int8 and quantised nothing (its vectors stayed fp32)."""
    packed = load_inference_encoder(tiny_model_dir, "mean", linear_kernel="onednn")
    plain = load_inference_encoder(tiny_model_dir, "mean", linear_kernel="aten")
    quantize_int8(packed, engine=engine)
    quantize_int8(plain, engine=engine)
    assert packed.linear_kernel == "aten"
    assert not any(isinstance(m, PackedLinear | nn.Linear) for m in packed.backbone.modules())
    assert model_fingerprint(packed) == model_fingerprint(plain)
    assert np.array_equal(packed.encode(SENTENCES), plain.encode(SENTENCES))


def test_the_kernel_choice(monkeypatch):
    from dclr.models.cpu_kind import cpu_policy

    monkeypatch.delenv(onednn.KERNEL_ENV, raising=False)
    assert choose_kernel() == cpu_policy().linear_kernel  # auto: this CPU kind's, on this build
    monkeypatch.setenv(onednn.KERNEL_ENV, "aten")
    assert choose_kernel() == "aten"
    assert choose_kernel("onednn") == "onednn"  # the argument wins over the environment
    monkeypatch.setenv(onednn.KERNEL_ENV, "mkl")
    with pytest.raises(ConfigError, match="DCLR_LINEAR_KERNEL='mkl'"):
        choose_kernel()
    monkeypatch.delenv(onednn.KERNEL_ENV)
    monkeypatch.setattr(onednn, "available", lambda: False)
    assert choose_kernel() == "aten"  # auto falls back
    with pytest.raises(ConfigError, match="no oneDNN"):
        choose_kernel("onednn")


def test_the_environment_opts_an_inference_encoder_out(tiny_model_dir, monkeypatch):
    monkeypatch.setenv(onednn.KERNEL_ENV, "aten")
    encoder = load_inference_encoder(tiny_model_dir, "mean")
    assert encoder.linear_kernel == "aten"
    assert any(isinstance(m, nn.Linear) for m in encoder.backbone.modules())


@pytest.mark.parametrize("preset", [None, "64"])
def test_importing_dclr_bounds_onednns_caches_unless_the_user_did(preset):
    """The capacities are set before torch loads (it reads them then); a user's value stays."""
    env = {k: v for k, v in os.environ.items() if k not in onednn_env.CACHE_CAPACITY}
    if preset:
        env["LRU_CACHE_CAPACITY"] = preset
    code = "import os, dclr, torch; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], " \
           "os.environ['LRU_CACHE_CAPACITY'], 'torch' in __import__('sys').modules)"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["16", preset or "16", "True"]
