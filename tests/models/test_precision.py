"""int8 inference (`dclr.models.precision`): close to fp32, packed too, a fingerprint of its own,
inference only; SmoothQuant scaling alone leaves the vectors unchanged."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from helpers import SAMPLE_SENTENCES
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.errors import ConfigError
from dclr.indexing.fingerprint import model_fingerprint
from dclr.models.encoder import SentenceEncoder, model_limit
from dclr.models.precision import check_precision, load_inference_encoder, quantize_int8
from dclr.models.smoothing import SmoothedLinear, smooth_linears

SENTENCES = SAMPLE_SENTENCES


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def test_smoothing_alone_keeps_the_vectors(model_dir):
    plain = load_inference_encoder(model_dir, "mean", linear_kernel="aten")
    smoothed = smooth_linears(load_inference_encoder(model_dir, "mean", linear_kernel="aten"))
    assert any(isinstance(m, SmoothedLinear) for m in smoothed.backbone.modules())
    diff = np.abs(plain.encode(SENTENCES) - smoothed.encode(SENTENCES)).max()
    assert diff < 1e-5


@pytest.mark.parametrize("pooler", ["mean", "cls_before_pooler", "avg_first_last"])
def test_int8_is_close_to_fp32_packed_and_padded(model_dir, pooler):
    fp32 = load_inference_encoder(model_dir, pooler).encode(SENTENCES)
    padded = load_inference_encoder(model_dir, pooler, "int8")
    packed = load_inference_encoder(model_dir, pooler, "int8", packing=True)
    assert packed.packing and not padded.packing and packed.precision == "int8"
    assert cosines(fp32, padded.encode(SENTENCES)).min() >= 0.99
    assert cosines(fp32, packed.encode(SENTENCES)).min() >= 0.99
    assert cosines(padded.encode(SENTENCES), packed.encode(SENTENCES)).min() >= 0.99


@pytest.mark.slow
def test_int8_minilm_is_close_to_fp32(minilm_path):
    fp32 = load_inference_encoder(minilm_path, "mean", packing=True).encode(SENTENCES)
    int8 = load_inference_encoder(minilm_path, "mean", "int8", packing=True)
    assert int8.packing
    sims = cosines(fp32, int8.encode(SENTENCES))
    # Measured: mean 0.992 over 300 STS-B dev sentences, none below 0.985.
    assert sims.mean() >= 0.99 and sims.min() >= 0.98, sims


def _old_fingerprint(encoder: SentenceEncoder) -> str:
    """The fingerprint as written before precisions existed (fp32 ones must not change)."""
    digest = hashlib.sha256()
    tokenizer = encoder.tokenizer
    settings = {
        "backbone": type(encoder.backbone).__name__,
        "pooler": encoder.inference_pooler,
        "max_length": encoder.max_length or model_limit(tokenizer),
        "tokenizer": type(tokenizer).__name__,
        "lowercase": getattr(tokenizer, "do_lower_case", None),
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, tensor in sorted(encoder.backbone.state_dict().items()):
        data = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy())
    digest.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    return digest.hexdigest()


def test_fingerprint_tells_precisions_apart(model_dir):
    fp32 = load_inference_encoder(model_dir, "mean")
    int8 = load_inference_encoder(model_dir, "mean", "int8")
    assert model_fingerprint(fp32) == _old_fingerprint(fp32)
    assert model_fingerprint(int8) != model_fingerprint(fp32)
    again = load_inference_encoder(model_dir, "mean", "int8", packing=True)
    assert model_fingerprint(again) == model_fingerprint(int8)  # packing does not change it


def test_int8_is_for_inference_on_the_cpu_only(model_dir):
    int8 = load_inference_encoder(model_dir, "mean", "int8")
    with pytest.raises(ConfigError, match="cannot be trained"):
        int8.train()
    with pytest.raises(ConfigError, match="already int8"):
        quantize_int8(int8)
    with pytest.raises(ConfigError, match="CPU only"):
        load_inference_encoder(model_dir, "mean", "int8", device="cuda")
    with pytest.raises(ConfigError, match="unknown precision"):
        check_precision("int4")
    head = SentenceEncoder.build(str(model_dir), pooler="cls", mlp_head=True)
    with pytest.raises(ConfigError, match="MLP head"):
        quantize_int8(head)


def test_cli_encode_and_bulk_at_int8(model_dir, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    runner = CliRunner()
    out = tmp_path / "v.npy"
    result = runner.invoke(
        app,
        ["encode", str(model_dir), str(text), str(out), "--pooler", "mean", "--precision", "int8"],
    )
    assert result.exit_code == 0, result.output
    expected = load_inference_encoder(model_dir, "mean", "int8", packing=True).encode(SENTENCES)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)
    bulk = tmp_path / "bulk"
    args = ["encode-bulk", str(model_dir), str(text), str(bulk), "--pooler", "mean"]
    result = runner.invoke(app, [*args, "--precision", "int8"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((bulk / "manifest.json").read_text())
    assert manifest["precision"] == "int8"
    refused = runner.invoke(app, args)  # the fp32 model into the int8 job: another fingerprint
    assert refused.exit_code != 0 and "another model (weights, pooler" in refused.output
    bad = runner.invoke(app, [*args[:3], str(tmp_path / "b2"), "--precision", "int4"])
    assert bad.exit_code != 0 and "unknown precision" in bad.output


# ---- half precision (issue 44): GPU only, refused on the CPU by name -------------------------
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_is_refused_on_the_cpu_with_the_fix(model_dir, precision):
    with pytest.raises(ConfigError, match=f"precision {precision} runs on a GPU only.*fp32"):
        load_inference_encoder(model_dir, "mean", precision, device="cpu")
    encoder = load_inference_encoder(model_dir, "mean", device="cpu")
    from dclr.models.precision import cast_half

    with pytest.raises(ConfigError, match="GPU only"):
        cast_half(encoder, precision)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cli_encode_refuses_half_precision_on_the_cpu(model_dir, tmp_path, precision):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    result = CliRunner().invoke(
        app,
        ["encode", str(model_dir), str(text), str(tmp_path / "v.npy"), "--precision", precision],
    )
    assert result.exit_code != 0
    assert "GPU only" in result.output
    assert not (tmp_path / "v.npy").exists()


def test_half_precision_cast_is_inference_only_and_fingerprinted(model_dir, monkeypatch):
    """What `cast_half` does on a GPU, run on the CPU with the device check lifted: the backbone
    in half precision, float32 vectors out close to fp32's, no training, its own fingerprint."""
    import dclr.models.precision as precision_module

    monkeypatch.setattr(precision_module, "check_device_precision", lambda p, d: None)
    fp32 = load_inference_encoder(model_dir, "mean", device="cpu", linear_kernel="aten")
    half = precision_module.cast_half(
        load_inference_encoder(model_dir, "mean", device="cpu", linear_kernel="aten"), "bf16"
    )
    assert next(half.backbone.parameters()).dtype == torch.bfloat16
    vectors = half.encode(SENTENCES)
    assert vectors.dtype == np.float32
    assert cosines(vectors, fp32.encode(SENTENCES)).min() > 0.99
    assert model_fingerprint(half) != model_fingerprint(fp32)
    with pytest.raises(ConfigError, match="cast to bf16 for inference and cannot be trained"):
        half.train()


def test_cli_eval_and_encode_refuse_a_gpu_that_is_not_there(model_dir, tmp_path, data_dir):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    runner = CliRunner()
    encode = runner.invoke(
        app, ["encode", str(model_dir), str(text), str(tmp_path / "v.npy"), "--device", "cuda"]
    )
    assert encode.exit_code != 0 and "no GPU is visible" in encode.output
    evaluate = runner.invoke(
        app, ["eval", str(model_dir), "--data-dir", str(data_dir), "--device", "cuda"]
    )
    assert evaluate.exit_code != 0 and "no GPU is visible" in evaluate.output
    refused = runner.invoke(
        app, ["eval", str(model_dir), "--data-dir", str(data_dir), "--precision", "bf16"]
    )
    assert refused.exit_code != 0 and "GPU only" in refused.output
