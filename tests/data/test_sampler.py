"""Batch samplers: today's epoch permutation, paraphrase-dense batches (issue 12) and the
duplicate-free wrapper (issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dclr.data.paraphrases import (
    ParaphrasePair,
    evaluation_pair_keys,
    gold_paraphrase_pairs,
    pair_key,
)
from dclr.data.sampler import (
    EpochSampler,
    NoDuplicatesSampler,
    ParaphraseDenseSampler,
    build_sampler,
    pairs_per_batch,
    training_batches,
    with_paraphrases,
)
from dclr.errors import ConfigError


def reference_batch(size: int, batch: int, seed: int, step: int) -> list[int]:
    """The pre-issue-12 trainer's batch, written out: slice `step` of randperm(seed + epoch)."""
    per_epoch = size // batch
    epoch, index = divmod(step, per_epoch)
    perm = torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))
    return perm[index * batch : (index + 1) * batch].tolist()


def test_density_zero_is_todays_sampler() -> None:
    corpus = [f"s{i}" for i in range(100)]
    sampler = build_sampler(corpus, 8, seed=3, density=0.0)
    assert isinstance(sampler, EpochSampler)
    for step in range(40):  # over three epochs (12 steps each)
        assert sampler.global_batch(step).tolist() == reference_batch(100, 8, 3, step)


def make_dense(density: float, batch: int = 16) -> tuple[ParaphraseDenseSampler, list]:
    pairs = [(i, i + 1) for i in range(0, 40, 2)]  # 20 pairs over sentences 0..39
    return ParaphraseDenseSampler(200, pairs, batch, density, seed=1), pairs


@pytest.mark.parametrize("density", [0.25, 0.5, 1.0])
def test_density_is_exact(density: float) -> None:
    sampler, pairs = make_dense(density)
    members = {i for p in pairs for i in p}
    for step in range(30):
        batch = sampler.global_batch(step).tolist()
        assert len(batch) == 16 and len(set(batch)) == 16  # no sentence twice
        in_pairs = [i for i in batch if i in members]
        assert len(in_pairs) == density * 16  # exactly rho * B slots hold pair sentences
        placed = sampler.placed_pairs(step).tolist()
        assert len(placed) == density * 16 / 2
        for a, b in placed:  # both sentences of every placed pair are in the batch
            assert a in batch and b in batch and (a, b) in pairs


def test_dense_batches_are_reproducible_and_pairs_spread() -> None:
    a, _ = make_dense(0.5)
    b, _ = make_dense(0.5)
    firsts = []
    for step in range(10):
        assert a.global_batch(step).tolist() == b.global_batch(step).tolist()
        placed = a.placed_pairs(step)[:, 0].tolist()
        firsts.append(min(a.global_batch(step).tolist().index(i) for i in placed))
    assert max(firsts) > 0  # pairs are not always at the front of the batch


def test_density_that_splits_a_pair_is_refused() -> None:
    assert pairs_per_batch(0.25, 64) == 8
    with pytest.raises(ConfigError, match="whole number"):
        pairs_per_batch(0.1, 64)


def test_with_paraphrases_reuses_lines_and_appends_missing() -> None:
    corpus = ["A cat sits.", "Dogs run."]
    pairs = [ParaphrasePair("a  cat sits.", "A cat is sitting.", "x")]
    extended, idx = with_paraphrases(corpus, pairs)
    assert list(extended) == ["A cat sits.", "Dogs run.", "A cat is sitting."]
    assert idx == [(0, 2)]


def test_no_evaluation_pair_is_placed(data_dir: Path) -> None:
    gold = gold_paraphrase_pairs(data_dir)
    banned = evaluation_pair_keys(data_dir)
    assert len(gold) > 1000 and not any(pair_key(p.first, p.second) in banned for p in gold)
    from dclr.data.corpus import load_corpus

    lines, sampler = training_batches(
        load_corpus("sts", data_dir), 64, 42, 0.5, data_dir=str(data_dir)
    )
    assert isinstance(sampler, ParaphraseDenseSampler)
    for step in range(50):
        for a, b in sampler.placed_pairs(step).tolist():
            assert pair_key(lines[a], lines[b]) not in banned


def duplicated_corpus(n: int = 200, copies: int = 60, seed: int = 0) -> list[str]:
    """n distinct lines, then `copies` exact or case / whitespace variants of some of them."""
    lines = [f"sentence number {i} about topic {i % 7}" for i in range(n)]
    gen = torch.Generator().manual_seed(seed)
    for j, i in enumerate(torch.randint(0, n, (copies,), generator=gen).tolist()):
        variant = lines[i].upper() if j % 3 == 0 else "  " + lines[i].replace(" ", "  ")
        lines.append(variant if j % 2 else lines[i])
    return lines


def keys(lines: list[str], batch: torch.Tensor) -> list[str]:
    return [" ".join(lines[i].lower().split()) for i in batch.tolist()]


def test_no_duplicates_never_puts_two_equal_lines_in_a_batch() -> None:
    lines = duplicated_corpus()
    base = EpochSampler(len(lines), 32, seed=3)
    sampler = NoDuplicatesSampler(EpochSampler(len(lines), 32, seed=3), lines, 32, seed=3)
    had_duplicates = 0
    for step in range(3 * sampler.steps_per_epoch):  # three epochs
        batch = sampler.global_batch(step)
        assert len(batch) == 32 and len(set(keys(lines, batch))) == 32, step
        had_duplicates += len(set(keys(lines, base.global_batch(step)))) < 32
        assert torch.equal(batch, sampler.global_batch(step))  # a pure function of the step
    assert had_duplicates > 0  # the corpus did put copies in random batches
    assert sampler.replaced > 0


def test_no_duplicates_without_duplicates_is_todays_batches() -> None:
    lines = [f"line {i}" for i in range(100)]
    sampler = NoDuplicatesSampler(EpochSampler(100, 16, seed=5), lines, 16, seed=5)
    for step in range(2 * sampler.steps_per_epoch):
        assert sampler.global_batch(step).tolist() == reference_batch(100, 16, 5, step)
    assert sampler.replaced == 0


def test_no_duplicates_keeps_paraphrase_pairs_and_dense_batches() -> None:
    dense, pairs = make_dense(0.5)
    lines = [f"line {i}" for i in range(200)]  # make_dense: a corpus of 200 lines
    wrapped = NoDuplicatesSampler(dense, lines, 16, seed=0)
    for step in range(5):  # paraphrases are different texts: the dense batches stay as they are
        assert torch.equal(wrapped.global_batch(step), dense.global_batch(step))
        assert torch.equal(wrapped.placed_pairs(step), dense.placed_pairs(step))


def test_no_duplicates_needs_a_batch_of_distinct_lines() -> None:
    lines = ["same", "Same", " same ", "other"] * 8
    with pytest.raises(ConfigError, match="2 distinct lines"):
        NoDuplicatesSampler(EpochSampler(len(lines), 4, seed=0), lines, 4, seed=0)


def test_training_batches_wraps_when_asked() -> None:
    lines = duplicated_corpus()
    _, plain = training_batches(lines, 32, 1)
    _, wrapped = training_batches(lines, 32, 1, no_duplicates=True)
    assert isinstance(plain, EpochSampler) and isinstance(wrapped, NoDuplicatesSampler)
