"""Under torchrun the ranks share the complementary model's pass (gloo, 2 processes on the CPU).

Rank 0 built the whole-corpus cache alone while the other ranks waited (~3 min of one GPU for
1M BERT-base sentences, an estimate). Now the ranks deal out the batches of one process's pass and
gather the vectors: each rank encodes about 1/W of the rows, and the cache, the planned rows and
every rank's copy hold the single process's bits.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import pseudo_sentence, spawn_gloo_ranks

from dclr.data.corpus import TextFileCorpus
from dclr.losses.complementary import CachedComplementary, PlannedComplementary, encode_rows
from dclr.models.encoder import SentenceEncoder

PLAN = [4, 250, 17, 4, 99, 3, 180, 181, 182, 7]  # a run's planned rows (one repeated)


def _encoder(model_dir: str) -> SentenceEncoder:
    enc = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    enc.enable_packing()  # the training loop's CPU default
    return enc


def _sentences(corpus_file: str) -> list[str]:
    lines = list(TextFileCorpus(corpus_file))
    return lines + lines[:10]  # repeated sentences are encoded once, given to each of their rows


def _rank_worker(rank: int, world: int, init_file: str, model_dir: str, corpus: str, out: str):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    enc = _encoder(model_dir)
    encoded: list[int] = []  # rows each forward pass of this rank got
    real = enc.encode_ids_poolers

    def counting(ids, *args, **kwargs):
        encoded.append(len(ids))
        return real(ids, *args, **kwargs)

    enc.encode_ids_poolers = counting  # type: ignore[method-assign]
    rows = encode_rows(enc, _sentences(corpus), 32, False, "test", shared=True)
    after_rows = sum(encoded)
    cache = CachedComplementary.build_or_load(
        Path(out) / "cache.npy", enc, TextFileCorpus(corpus), "tiny", 32, show_progress=False
    )
    after_cache = sum(encoded)
    again = CachedComplementary.build_or_load(  # there now: loaded, not encoded again
        Path(out) / "cache.npy", enc, TextFileCorpus(corpus), "tiny", 32, show_progress=False
    )
    planned = PlannedComplementary(enc, TextFileCorpus(corpus), 32)
    planned.prefill(PLAN, show_progress=False)
    ids = torch.tensor(PLAN)
    np.savez(
        Path(out) / f"rank{rank}.npz",
        rows=rows,
        cache=np.asarray(cache.vectors),
        again=np.asarray(again.vectors),
        planned=planned.anchor_vectors(ids, []).numpy(),
        encoded=np.array([after_rows, after_cache - after_rows, sum(encoded) - after_cache]),
    )
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_ranks_share_the_pass_and_hold_the_single_process_bits(tiny_model_dir, tmp_path):
    gen = torch.Generator().manual_seed(7)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{pseudo_sentence(gen, 2, 20)} {i}" for i in range(300)) + "\n")
    world = 2
    spawn_gloo_ranks(_rank_worker, world, tmp_path, str(tiny_model_dir), str(corpus), str(tmp_path))

    enc = _encoder(str(tiny_model_dir))
    sentences = _sentences(str(corpus))
    single_rows = encode_rows(enc, sentences, 32, False, "test")
    single_cache = CachedComplementary.build_or_load(
        tmp_path / "single.npy", enc, TextFileCorpus(corpus), "tiny", 32, show_progress=False
    )
    planned = PlannedComplementary(enc, TextFileCorpus(corpus), 32)
    planned.prefill(PLAN, show_progress=False)
    single_planned = planned.anchor_vectors(torch.tensor(PLAN), []).numpy()
    assert np.array_equal(np.load(tmp_path / "cache.npy"), np.asarray(single_cache.vectors))

    got = [np.load(tmp_path / f"rank{r}.npz") for r in range(world)]
    for rank in got:
        assert np.array_equal(rank["rows"], single_rows)
        assert np.array_equal(rank["cache"], np.asarray(single_cache.vectors))
        assert np.array_equal(rank["again"], rank["cache"])
        assert np.array_equal(rank["planned"], single_planned)
    shares = np.stack([rank["encoded"] for rank in got])  # (rank, [rows, cache, planned])
    distinct = 300
    assert shares[:, 0].sum() == distinct and shares[:, 1].sum() == distinct
    assert shares[:, 2].sum() == len(set(PLAN))
    assert (shares[:, :2] > 0).all() and (shares[:, :2] < distinct * 0.75).all()  # both worked
    assert (shares[:, 0] == shares[:, 1]).all()  # the same deal each time
