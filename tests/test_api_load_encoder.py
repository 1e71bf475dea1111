"""`dclr.load_encoder` loads as `dclr encode` and `dclr eval` do: the CPU kind's measured linear
kernel and packing on a CPU, a GPU when there is one, and the precision options. It loaded a plain
encoder before, so the Python API encoded 13-15 % slower than the CLI on a CPU (and on the CPU
on a GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest

import dclr
from dclr.errors import ConfigError
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


def test_an_inference_encoder_refuses_training_and_names_the_loader(tiny_model_dir):
    encoder = dclr.load_encoder(tiny_model_dir, "mean", device="cpu")
    if encoder.linear_kernel == "aten":
        pytest.skip("this CPU kind's kernel is PyTorch's own: nothing to refuse")
    with pytest.raises(ConfigError, match=r"SentenceEncoder\.from_pretrained\(model\)"):
        encoder.train()
