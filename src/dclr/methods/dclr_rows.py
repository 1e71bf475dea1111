"""Which rows of the corpus DCLR's cached complementary model encodes (`complementary_rows`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dclr.contract import PreparedRun
    from dclr.options.dclr import DCLRSection

# auto: encode only the sampled rows when the run's steps x batch reach under this share of the
# corpus (above it most rows are encoded anyway, and a whole-corpus cache serves later runs too).
SAMPLED_ROWS_SHARE = 0.5


def sample_rows_only(
    run: PreparedRun, section: DCLRSection, cache: Path | None, pooler: str, spec: str
) -> bool:
    """Whether the cached complementary model encodes only the rows the run samples
    (`complementary_rows`; auto: a short run on a large corpus, and no whole-corpus cache yet).
    The run's steps, batch and examples are those its batch plan samples."""
    from dclr.losses.complementary import CachedComplementary  # torch: only when deciding

    if section.complementary_rows != "auto":
        return section.complementary_rows == "sampled"
    corpus = run.data
    if run.total_steps * run.batch_size >= SAMPLED_ROWS_SHARE * len(corpus):
        return False
    path, _ = CachedComplementary.locate(cache, pooler, corpus, spec, run.config.model.max_length)
    return not CachedComplementary.exists(path)
