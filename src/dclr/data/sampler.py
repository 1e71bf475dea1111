"""Batch samplers: which corpus indices form the global batch of each step.

Batches are a pure function of (seed, step), so a resumed run sees exactly the sentences the
uninterrupted run would have.

* `EpochSampler` (the default): epoch e uses the permutation of a generator seeded with seed + e.
* `ParaphraseDenseSampler` (issue 12): a controlled fraction rho of every batch is made of gold
  paraphrase pairs, both sentences of a pair in the same batch as separate lines, the way
  near-duplicates sit in web corpora. rho = 0 is `EpochSampler` itself (`build_sampler`).
* `NoDuplicatesSampler` (issue 23, `data.no_duplicates`): wraps either, so that no two lines of
  a batch are equal after `normalize_text` (sentence-transformers' NO_DUPLICATES batch sampler).
  A batch without duplicates is the wrapped sampler's batch, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from dclr.data.corpus import ListCorpus
from dclr.data.paraphrases import ParaphrasePair, normalize_text
from dclr.errors import ConfigError

# Seeds of the pair stream and of the in-batch placement, kept apart from the single-sentence
# stream (seed + epoch): a large odd stride so (seed, epoch/step) never collide across streams.
PAIR_STREAM = 7_919
PLACEMENT_STREAM = 104_729
REPLACEMENT_STREAM = 1_299_709  # the lines that take a duplicate's place (NoDuplicatesSampler)


class BatchSampler(Protocol):
    steps_per_epoch: int

    def global_batch(self, step: int) -> torch.Tensor:
        """Corpus indices (batch_size,) of the global batch of 0-based `step`."""
        ...


class EpochSampler:
    """Today's sampler: consecutive slices of a per-epoch seeded permutation of the corpus."""

    def __init__(self, size: int, batch_size: int, seed: int) -> None:
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.steps_per_epoch = size // batch_size
        self._epoch, self._perm = -1, torch.empty(0)

    def global_batch(self, step: int) -> torch.Tensor:
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            self._perm, self._epoch = torch.randperm(self.size, generator=gen), epoch
        size = self.batch_size
        return self._perm[index * size : (index + 1) * size]


def pairs_per_batch(density: float, batch_size: int) -> int:
    """Gold pairs per batch for density rho: rho * batch / 2, which must be a whole number."""
    pairs = density * batch_size / 2
    if abs(pairs - round(pairs)) > 1e-9:
        raise ConfigError(
            f"paraphrase_density {density} with batch_size {batch_size} gives {pairs:g} pairs "
            "per batch; choose rho so that rho * batch_size / 2 is a whole number "
            f"(e.g. {2 * max(1, round(pairs)) / batch_size:g})"
        )
    return round(pairs)


def with_paraphrases(
    corpus: Sequence[str], pairs: Sequence[ParaphrasePair]
) -> tuple[ListCorpus, list[tuple[int, int]]]:
    """The corpus plus every pair sentence it lacks (appended), and each pair's two indices.

    A pair sentence already in the corpus (same normalised text) reuses that line, so the corpus
    holds each sentence once; pairs whose two sentences share an index are skipped."""
    lines = list(corpus)
    index: dict[str, int] = {}
    for i, s in enumerate(lines):
        index.setdefault(normalize_text(s), i)
    out_pairs = []
    for pair in pairs:
        ids = []
        for s in (pair.first, pair.second):
            key = normalize_text(s)
            if key not in index:
                index[key] = len(lines)
                lines.append(s)
            ids.append(index[key])
        if ids[0] != ids[1]:
            out_pairs.append((ids[0], ids[1]))
    return ListCorpus(lines, name=f"{getattr(corpus, 'name', 'corpus')}+paraphrases"), out_pairs


class ParaphraseDenseSampler:
    """Batches where 2 * round(rho * B / 2) = rho * B slots hold gold paraphrase pairs.

    Singles come from a per-epoch permutation of the sentences in no pair (so a pair member
    never also appears as a single); pairs from their own per-cycle permutation; the B slots are
    then shuffled so pairs are spread over the batch (and over DDP ranks). An epoch is one pass
    over the singles."""

    def __init__(
        self,
        size: int,
        pairs: Sequence[tuple[int, int]],
        batch_size: int,
        density: float,
        seed: int,
    ) -> None:
        if not 0 < density <= 1:
            raise ConfigError(f"paraphrase_density must be in [0, 1], got {density}")
        self.n_pairs = pairs_per_batch(density, batch_size)
        if self.n_pairs > len(pairs):
            raise ConfigError(
                f"paraphrase_density {density} needs {self.n_pairs} pairs per batch; "
                f"only {len(pairs)} gold pairs are available"
            )
        self.pairs = torch.tensor(list(pairs), dtype=torch.long).reshape(-1, 2)  # (P, 2)
        in_pair = torch.zeros(size, dtype=torch.bool)
        in_pair[self.pairs.flatten()] = True
        self.singles = torch.nonzero(~in_pair).flatten()  # (S,)
        self.n_singles = batch_size - 2 * self.n_pairs
        self.batch_size, self.seed = batch_size, seed
        if self.n_singles and len(self.singles) < self.n_singles:
            raise ConfigError("the corpus has too few sentences outside the paraphrase pairs")
        self.steps_per_epoch = (
            len(self.singles) // self.n_singles
            if self.n_singles
            else len(self.pairs) // self.n_pairs
        )

    def _slice(self, stream: torch.Tensor, per_step: int, step: int, offset: int) -> torch.Tensor:
        if per_step == 0:
            return stream[:0]
        cycle_len = len(stream) // per_step
        cycle, index = divmod(step, cycle_len)
        gen = torch.Generator().manual_seed(self.seed + offset + cycle)
        perm = torch.randperm(len(stream), generator=gen)
        return stream[perm[index * per_step : (index + 1) * per_step]]

    def global_batch(self, step: int) -> torch.Tensor:
        singles = self._slice(self.singles, self.n_singles, step, 0)
        pairs = self._slice(self.pairs, self.n_pairs, step, PAIR_STREAM).flatten()
        batch = torch.cat([pairs, singles])
        gen = torch.Generator().manual_seed(self.seed * PLACEMENT_STREAM + step)
        return batch[torch.randperm(len(batch), generator=gen)]

    def placed_pairs(self, step: int) -> torch.Tensor:
        """The gold pairs (n_pairs, 2) placed in the batch of `step` (corpus indices)."""
        return self._slice(self.pairs, self.n_pairs, step, PAIR_STREAM)


class NoDuplicatesSampler:
    """`base`'s batches with no two lines equal after normalisation (case, whitespace).

    Each later copy of a line already in the batch gives its slot to the next line of a
    permutation of the corpus seeded by (seed, step) whose text is not in the batch yet. So a
    batch stays a pure function of (seed, step), resumes exactly, keeps its size and its
    paraphrase pairs (which are different texts), and a batch with no duplicate is `base`'s own.
    sentence-transformers' NoDuplicatesBatchSampler defers the copy to a later batch instead;
    an exact copy carries no new sentence, so we drop it from this step rather than keep a queue
    (which would make batch k depend on every batch before it)."""

    def __init__(self, base: BatchSampler, lines: Sequence[str], batch_size: int, seed: int):
        ids: dict[str, int] = {}
        self.keys = torch.tensor([ids.setdefault(normalize_text(s), len(ids)) for s in lines])
        if len(ids) < batch_size:
            raise ConfigError(
                f"data.no_duplicates: the corpus has {len(ids)} distinct lines (after lower-"
                f"casing and collapsing whitespace), fewer than one batch of {batch_size}"
            )
        self.base, self.seed = base, seed
        self.steps_per_epoch = base.steps_per_epoch
        self.replaced = 0  # lines replaced so far (this process), for the data report

    def global_batch(self, step: int) -> torch.Tensor:
        batch = self.base.global_batch(step)
        keys = self.keys[batch].tolist()
        if len(set(keys)) == len(keys):
            return batch
        seen: set[int] = set()
        repeats = []
        for position, key in enumerate(keys):
            if key in seen:
                repeats.append(position)
            seen.add(key)
        gen = torch.Generator().manual_seed(self.seed * REPLACEMENT_STREAM + step)
        candidates = iter(torch.randperm(len(self.keys), generator=gen).tolist())
        batch = batch.clone()
        for position in repeats:
            for candidate in candidates:  # distinct lines >= batch size: never exhausted
                key = int(self.keys[candidate])
                if key not in seen:
                    seen.add(key)
                    batch[position] = candidate
                    break
        self.replaced += len(repeats)
        return batch

    def __getattr__(self, name: str) -> object:  # e.g. ParaphraseDenseSampler.placed_pairs
        return getattr(self.__dict__["base"], name)


def build_sampler(
    corpus: Sequence[str],
    batch_size: int,
    seed: int,
    density: float = 0.0,
    pairs: Sequence[tuple[int, int]] = (),
) -> BatchSampler:
    """`EpochSampler` for density 0 (today's batches, exactly), else `ParaphraseDenseSampler`."""
    if density == 0:
        return EpochSampler(len(corpus), batch_size, seed)
    return ParaphraseDenseSampler(len(corpus), pairs, batch_size, density, seed)


def training_batches(
    corpus: Sequence[str],
    batch_size: int,
    seed: int,
    density: float = 0.0,
    sources: str = "mrpc,stsb,sick",
    data_dir: str | None = None,
    no_duplicates: bool = False,
) -> tuple[Sequence[str], BatchSampler]:
    """The corpus a run trains on and its sampler; with density > 0 the corpus gains the gold
    pairs' sentences (`with_paraphrases`); `no_duplicates` wraps the sampler in
    `NoDuplicatesSampler`. The trainer and `dclr audit` both call this, so an audit sees exactly
    the batches a run with the same settings trains on."""
    if density == 0:
        lines: Sequence[str] = corpus
        sampler = build_sampler(corpus, batch_size, seed)
    else:
        from dclr.data.paraphrases import gold_paraphrase_pairs, parse_sources
        from dclr.data.paths import resolve_data_dir

        gold = gold_paraphrase_pairs(resolve_data_dir(data_dir), parse_sources(sources))
        lines, pairs = with_paraphrases(corpus, gold)
        sampler = build_sampler(lines, batch_size, seed, density, pairs)
    if no_duplicates:
        sampler = NoDuplicatesSampler(sampler, lines, batch_size, seed)
    return lines, sampler
