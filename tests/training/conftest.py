"""Fixtures of the training tests: the tiny BERT with dropout and a 200-line pseudo corpus (a
test module may override either, as test_training.py does its corpus)."""

from __future__ import annotations

import pytest
from helpers import write_pseudo_corpus


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # tests/conftest.py: built once per session
    return tiny_dropout_model_dir


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_pseudo_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", 200)
