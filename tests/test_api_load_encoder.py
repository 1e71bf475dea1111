"""`dclr.load_encoder` loads as `dclr encode` and `dclr eval` do: the CPU kind's measured linear
kernel and packing on a CPU, a GPU when there is one, and the precision options. It loaded a plain
encoder before, so the Python API encoded 13-15 % slower than the CLI on a CPU (and on the CPU
on a GPU machine)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dclr
from dclr.errors import ConfigError
from dclr.models import cpu_kind, onednn
from dclr.models.encoder import SentenceEncoder
from dclr.models.onednn import choose_kernel
from dclr.models.precision import load_inference_encoder

SENTENCES = ["A man plays a guitar.", "Someone is making music on a stage tonight.", "Rain."]


def test_the_api_encoder_is_the_clis(tiny_model_dir):
    encoder = dclr.load_encoder(tiny_model_dir, "mean")
    cli = load_inference_encoder(tiny_model_dir, "mean", "fp32", True, "auto")  # `dclr encode`'s
    assert (encoder.device, encoder.linear_kernel, encoder.packing) == (
        cli.device,
        cli.linear_kernel,
        cli.packing,
    )
    assert encoder.linear_kernel == choose_kernel(None)  # this CPU kind's measured kernel
    assert encoder.packing  # the tiny BERT packs (checked on a probe)
    np.testing.assert_array_equal(encoder.encode(SENTENCES), cli.encode(SENTENCES))
    plain = SentenceEncoder.from_pretrained(
        tiny_model_dir, pooler="mean"
    ).eval()  # what load_encoder gave before
    np.testing.assert_allclose(encoder.encode(SENTENCES), plain.encode(SENTENCES), atol=1e-5)


def test_the_api_takes_the_clis_precision_and_device_options(tiny_model_dir):
    assert dclr.load_encoder(tiny_model_dir, "mean", precision="int8").precision == "int8"
    assert dclr.load_encoder(tiny_model_dir, "mean", packing=False).packing is False
    assert dclr.load_encoder(tiny_model_dir, "mean", device="cpu").device.type == "cpu"
    with pytest.raises(ConfigError, match="runs on a GPU only"):
        dclr.load_encoder(tiny_model_dir, "mean", precision="bf16", device="cpu")


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")
def test_the_api_encoder_follows_a_cpu_kinds_recorded_kernel(tiny_model_dir, tmp_path, monkeypatch):
    """On this machine the recorded kernel is the default one, so the test above cannot tell
    the API follows the recording: a CPU kind recorded with PyTorch's kernel can."""
    monkeypatch.setattr(cpu_kind, "POLICIES", tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no measurement of the user's
    monkeypatch.setattr(cpu_kind, "hardware_key", lambda: "TestVendor-AVX2")
    monkeypatch.delenv(onednn.KERNEL_ENV, raising=False)
    (tmp_path / "TestVendor-AVX2.json").write_text(json.dumps({"linear_kernel": "aten"}))
    cpu_kind.cpu_policy.cache_clear()
    try:
        assert dclr.load_encoder(tiny_model_dir, "mean").linear_kernel == "aten"
        cli = load_inference_encoder(tiny_model_dir, "mean", "fp32", True, "auto")
        assert cli.linear_kernel == "aten"
    finally:
        cpu_kind.cpu_policy.cache_clear()


def test_an_inference_encoder_refuses_training_and_names_the_loader(tiny_model_dir):
    encoder = dclr.load_encoder(tiny_model_dir, "mean", device="cpu")
    if encoder.linear_kernel == "aten":
        pytest.skip("this CPU kind's kernel is PyTorch's own: nothing to refuse")
    with pytest.raises(ConfigError, match=r"SentenceEncoder\.from_pretrained\(model\)"):
        encoder.train()


def test_encode_takes_the_loading_options_and_one_string(tiny_model_dir):
    """`dclr.encode` loads as `dclr encode` (pooler, precision, device, packing), and one string
    gives its vector, as sentence-transformers' `encode` does; a string was encoded character by
    character (15 rows for "a single string") and a pooler could not be given."""
    from dclr.errors import InputError

    many = dclr.encode(tiny_model_dir, SENTENCES, pooler="mean")
    cli = load_inference_encoder(tiny_model_dir, "mean", "fp32", True, "auto")
    np.testing.assert_array_equal(many, cli.encode(SENTENCES))
    one = dclr.encode(tiny_model_dir, SENTENCES[0], pooler="mean")
    assert one.shape == (many.shape[1],)
    np.testing.assert_allclose(one, many[0], atol=1e-6)
    assert cli.encode(SENTENCES[1]).shape == (many.shape[1],)
    with pytest.raises(InputError, match="one string"):
        cli.encode_poolers(SENTENCES[0], ("mean",))
    int8 = dclr.encode(tiny_model_dir, SENTENCES, pooler="mean", precision="int8", packing=False)
    assert int8.shape == many.shape and not np.array_equal(int8, many)
    np.testing.assert_array_equal(dclr.encode(cli, SENTENCES), many)  # an encoder, as it is


def test_an_unknown_device_or_mode_is_a_named_error(tiny_model_dir, tmp_path):
    """torch's RuntimeError (a traceback under `dclr encode --device tpu`) and a KeyError after
    the model loaded (`evaluate_sts(mode="x")`) were what these gave."""
    from typer.testing import CliRunner

    from dclr.cli.main import app

    with pytest.raises(ConfigError, match="unknown device 'tpu'.*auto, cpu, cuda or cuda:N"):
        dclr.load_encoder(tiny_model_dir, "mean", device="tpu")
    with pytest.raises(ConfigError, match="mode must be test or dev"):
        dclr.evaluate_sts(tiny_model_dir, mode="x", pooler="mean")
    src = tmp_path / "s.txt"
    src.write_text("a b\n")
    args = ["encode", str(tiny_model_dir), str(src), str(src.with_suffix(".npy")), "--pooler"]
    result = CliRunner().invoke(app, [*args, "mean", "--device", "cuda:x"])
    assert result.exit_code == 2 and "unknown device 'cuda:x'" in result.output, result.output
