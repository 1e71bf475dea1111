"""best/ and final/ hold one copy of the weights when they are the same model (issue 47 point 9):
best/'s files are hard links to final/'s, its card names best, and both load as models."""

from __future__ import annotations

import os

import numpy as np
from helpers import tiny_run_overrides, write_pseudo_corpus

from dclr.driver import trainer_for
from dclr.models.export import link_export
from dclr.recipe import load_config


def test_a_run_never_evaluated_writes_its_weights_once(tiny_dropout_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 64)
    run = tmp_path / "run"
    options = tiny_run_overrides(tiny_dropout_model_dir, corpus, run, max_steps=2, save_steps=2)
    trainer_for(load_config(None, options)).train()
    best, final = run / "best", run / "final"
    assert best.is_dir() and not best.is_symlink()
    assert os.path.samefile(best / "model.safetensors", final / "model.safetensors")
    assert sorted(p.name for p in best.rglob("*")) == sorted(p.name for p in final.rglob("*"))
    assert "path/to/best" in (best / "README.md").read_text()
    assert "path/to/final" in (final / "README.md").read_text()
    texts = ["a man plays a guitar", "the cat sleeps"]
    vectors = [SentenceTransformer(str(p), device="cpu").encode(texts) for p in (best, final)]
    np.testing.assert_array_equal(*vectors)
    leftovers = [p.name for p in run.iterdir() if p.name.startswith(".")]
    assert not leftovers  # staged atomically, nothing left beside


def test_without_hard_links_best_is_a_copy(tmp_path, monkeypatch):
    final = tmp_path / "final"
    (final / "1_Pooling").mkdir(parents=True)
    (final / "model.safetensors").write_bytes(b"weights")
    (final / "1_Pooling" / "config.json").write_text("{}")
    (final / "README.md").write_text('SentenceTransformer("path/to/final")')

    def refuse(*args):
        raise OSError("hard links not supported")

    monkeypatch.setattr(os, "link", refuse)
    link_export(final, tmp_path / "best")
    best = tmp_path / "best"
    assert (best / "model.safetensors").read_bytes() == b"weights"
    assert not os.path.samefile(best / "model.safetensors", final / "model.safetensors")
    assert (best / "1_Pooling" / "config.json").read_text() == "{}"
    assert (best / "README.md").read_text() == 'SentenceTransformer("path/to/best")'
