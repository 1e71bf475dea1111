"""The one few-shot sampler: which corpus rows a run trains on, from (size, count or fraction, seed).

`TrainConfig.data.few_shot_*` (ConSERT's N sentences, DCLR's fractions) and the experiments'
`corpus_fraction` subsets both call `few_shot_indices`, so the same fraction and seed always select
the same sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from dclr.errors import ConfigError

FewShotSampling = Literal["first", "random"]
MIN_CONTRASTIVE = 2  # a contrastive batch needs at least two sentences


def few_shot_count(size: int, fraction: float, minimum: int = MIN_CONTRASTIVE) -> int:
    """max(minimum, round(fraction * size)): the number of rows a fraction keeps."""
    return max(minimum, round(fraction * size))


def few_shot_indices(
    size: int,
    count: int | None = None,
    fraction: float | None = None,
    sampling: FewShotSampling = "first",
    seed: int = 0,
    minimum: int = MIN_CONTRASTIVE,
) -> list[int] | None:
    """Sorted row indices of the subset (first or seeded-random `count`, or a `fraction`).

    None when neither `count` nor `fraction` is given (train on everything). A fraction keeps
    `few_shot_count(size, fraction, minimum)` rows.
    """
    if count is None and fraction is None:
        return None
    if count is None:
        assert fraction is not None
        count = few_shot_count(size, fraction, minimum)
    if count > size:
        raise ConfigError(f"few_shot_sentences {count} is more than the corpus's {size} sentences")
    if sampling == "first":
        return list(range(count))
    import torch  # here: the config imports this module's names, and must stay torch-free

    gen = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(size, generator=gen)[:count].tolist())


def take(data: Sequence[Any], indices: list[int]) -> Sequence[Any]:
    """The rows `indices` of `data`: a ListCorpus for sentences, a list for other examples."""
    from dclr.data.corpus import ListCorpus

    rows = [data[i] for i in indices]
    if rows and isinstance(rows[0], str):  # ConSERT's few-shot study starts at 1 text
        return ListCorpus(rows, name="few-shot", minimum=1)
    return rows


def repeat_to(data: Sequence[Any], size: int) -> Sequence[Any]:
    """`data` repeated whole (in order) until it has at least `size` rows."""
    from dclr.data.corpus import ListCorpus

    copies = -(-size // len(data))  # ceil
    rows = [data[i] for i in range(len(data))] * copies
    if rows and isinstance(rows[0], str):
        return ListCorpus(rows, name=f"{getattr(data, 'name', 'data')}-x{copies}", minimum=1)
    return rows
