"""The sampled-rows complementary cache: the same bits as the whole-corpus cache, the same run.

`PlannedComplementary` encodes only the rows a run's batches hold (up front from the batch plan,
or when a step first needs a row). It may do so only because a vector encoded in batches of one
token length does not depend on the other sentences of its batch; these tests check that
property on this machine's kernels, the caches' equality, and that a DCLR run trains the same
trajectory, bit for bit, with the whole-corpus cache, the planned fill and the lazy fill.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import pseudo_sentence

from dclr.data.corpus import ListCorpus, TextFileCorpus
from dclr.driver import trainer_for
from dclr.losses.complementary import CachedComplementary, PlannedComplementary
from dclr.methods.dclr import DCLR_METHOD
from dclr.methods.dclr_rows import sample_rows_only
from dclr.models.encoder import SentenceEncoder, length_batches
from dclr.recipe import load_config
from dclr.training.prepare import prepare_run
from dclr.training.tracking import read_metrics

CORPUS_LINES = 300  # several lengths, several batches of the cache's 256 per length at most


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gen = torch.Generator().manual_seed(7)
    lines = [f"{pseudo_sentence(gen, 2, 20)} {i}" for i in range(CORPUS_LINES)]
    path = tmp_path_factory.mktemp("planned") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def encoder(model_dir: Path) -> SentenceEncoder:
    enc = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    enc.enable_packing()  # the training loop's CPU default: the cache must hold either way
    return enc


def test_default_batches_keep_the_historical_order_and_by_length_never_mixes_lengths():
    ids = [[0] * n for n in (3, 5, 3, 7, 5, 5, 1, 3)]
    old_order = np.argsort([len(x) for x in ids], kind="stable")[::-1]  # the order before
    batches = length_batches(ids, 3, by_length=False)
    assert [b.tolist() for b in batches] == [old_order[i : i + 3].tolist() for i in (0, 3, 6)]
    by_length = [b.tolist() for b in length_batches(ids, 2, by_length=True)]
    # longest first, then by position; every batch has 2 slots, -1 = filler
    assert by_length == [[3, -1], [1, 4], [5, -1], [0, 2], [7, -1], [6, -1]]
    assert sorted(i for b in by_length for i in b if i >= 0) == list(range(len(ids)))


def test_a_vector_does_not_depend_on_the_rest_of_its_by_length_batch(
    tiny_model_dir: Path, corpus_file: Path
):
    enc = encoder(tiny_model_dir)
    corpus = list(TextFileCorpus(corpus_file))
    whole = enc.encode(corpus, max_length=32, by_length=True)
    some = corpus[5::7]
    alone = enc.encode(some, max_length=32, by_length=True)
    assert np.array_equal(whole[5::7], alone)
    one = enc.encode(corpus[11:12], max_length=32, by_length=True)
    assert np.array_equal(whole[11:12], one)


@pytest.mark.parametrize("reloadable", [False, True])
def test_planned_rows_equal_the_whole_corpus_cache_bit_for_bit(
    tiny_model_dir: Path, corpus_file: Path, tmp_path: Path, reloadable: bool
):
    corpus = TextFileCorpus(corpus_file)
    cached = CachedComplementary.build_or_load(
        tmp_path / "c.npy", encoder(tiny_model_dir), corpus, "tiny", 32, show_progress=False
    )
    reload = (lambda: encoder(tiny_model_dir)) if reloadable else None
    planned = PlannedComplementary(encoder(tiny_model_dir), corpus, 32, reload=reload)
    planned.prefill([4, 250, 17, 4, 99], show_progress=False)
    assert planned.filled == 4
    # a reloadable encoder is not held once the plan's rows are in; a row the plan missed
    # (123 below) reloads it and still gets the whole-corpus cache's bits
    assert (planned.encoder is None) == reloadable
    ids = torch.tensor([17, 4, 123, 250])  # 123: not in the plan, encoded when first asked for
    texts = [corpus[int(i)] for i in ids]
    assert torch.equal(planned.anchor_vectors(ids, texts), cached.anchor_vectors(ids, texts))
    assert torch.equal(planned.similarities(ids, texts), cached.similarities(ids, texts))
    assert planned.filled == 5


def run_config(model_dir: Path, corpus: Path, out: Path, rows: str) -> object:
    return load_config(
        None,
        {
            "model": str(model_dir),
            "method": "dclr",
            "corpus": str(corpus),
            "batch_size": 16,
            "max_steps": 5,
            "eval_steps": 0,
            "log_steps": 1,
            "test_eval": False,
            "output_dir": str(out),
            "complementary_pooler": "mean",
            "complementary_cache": str(out.parent / f"cache-{out.name}" / "comp.npy"),
            "complementary_rows": rows,
            # about the median cosine of the tiny model's pairs here (0.46-0.99): the cache's
            # vectors decide half of each batch (at 0.3 every negative was dropped, whatever
            # the vectors)
            "false_negative_threshold": 0.9,
        },
    )


def test_a_run_trains_the_same_trajectory_with_the_whole_planned_or_lazy_cache(
    tiny_dropout_model_dir: Path, corpus_file: Path, tmp_path: Path, monkeypatch
):
    model = tiny_dropout_model_dir
    trainer_for(run_config(model, corpus_file, tmp_path / "all", "all")).train()
    trainer_for(run_config(model, corpus_file, tmp_path / "planned", "sampled")).train()
    monkeypatch.setattr(PlannedComplementary, "prefill", lambda self, rows, **_: None)
    trainer_for(run_config(model, corpus_file, tmp_path / "lazy", "sampled")).train()

    def trajectory(name: str) -> list[tuple[float, float, float]]:
        rows = read_metrics(tmp_path / name, "train")
        return [(r["loss"], r["contrastive"], r["dropped_fraction"]) for r in rows]

    whole = trajectory("all")
    assert len(whole) == 5 and all(0 < r[2] < 1 for r in whole)  # the vectors decide
    assert trajectory("planned") == whole
    assert trajectory("lazy") == whole
    assert (tmp_path / "cache-all" / "comp.npy").exists()
    assert not (tmp_path / "cache-planned").exists()  # sampled rows stay in memory


def test_auto_samples_rows_only_for_a_short_run_on_a_large_corpus_without_a_cache(
    tiny_model_dir: Path, corpus_file: Path, tmp_path: Path
):
    corpus = ListCorpus(list(TextFileCorpus(corpus_file)))

    def decide(rows: str, steps: int) -> bool:
        config = run_config(tiny_model_dir, corpus_file, tmp_path / "run", rows)
        config.optimisation.max_steps = steps
        run = prepare_run(config, DCLR_METHOD, data=corpus)
        cache = tmp_path / "auto" / "comp.npy"
        return sample_rows_only(run, config.section("dclr"), cache, "mean", "tiny")

    assert decide("auto", 5)  # 5 x 16 = 80 rows of 300
    assert not decide("auto", 10)  # 160 rows: over half the corpus
    assert decide("sampled", 100) and not decide("all", 1)
    CachedComplementary.build_or_load(
        tmp_path / "auto" / "comp.npy",
        encoder(tiny_model_dir),
        corpus,
        "tiny",
        32,
        show_progress=False,
    )
    assert not decide("auto", 5)  # a whole-corpus cache exists: use it
