"""One forward for the before-eval and the complementary cache of a DCLR run.

With empty caches, `dclr train` on a DCLR recipe whose complementary model is the starting model
(the README's main job) encodes the STS test sentences with the starting model for the "before"
table, then the whole training corpus with the same model for the complementary cache. On the
built-in STS corpus the test sentences are part of the corpus, so half of that work is repeated.

`shared_start_scores` makes one pass instead: the cache's own batches (`CACHE_BATCH_SIZE`, one
token length per batch, its `max_length`, its device and layout) through
`SentenceEncoder.encode_poolers`, which returns the
complementary pooler's vectors exactly as `CachedComplementary.build_or_load` computes them (the
same batches and operations, so the cache file is bit-identical; tested) and, from the same
forwards, the before-eval pooler's vectors. Test sentences that are not in the corpus, or longer
than the cache's `max_length` (the before-eval does not truncate them), are encoded separately at
full length. The before scores then differ from a separate evaluation only by float rounding of
padded vs packed batches (~1e-6 on the vectors). Both results are written where the separate
paths would write them (the complementary cache and the starting-scores cache), so the run then
loads them as usual. It steps aside (returns None) whenever the two do not coincide: another
complementary model, a mode other than `cached`, either result already cached, no test eval, or a
run whose cache holds only the rows it samples (`complementary_rows`; then the before-eval is
`dclr eval`'s own and the cache a few thousand rows). The corpus is the prepared run's
(`dclr.contract.PreparedRun.data`: the examples its batch plan indexes, so the cache written
here is the one the run looks up).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dclr.methods.dclr_rows import sample_rows_only
from dclr.models.token_ids import batch_token_ids

if TYPE_CHECKING:
    from dclr.contract import PreparedRun


def shared_start_scores(run: PreparedRun, pooler: str) -> dict[str, float] | None:
    """The starting model's STS test scores with `pooler`, computed in the pass that builds the
    complementary cache of the DCLR `run`; None when the two do not coincide (module docstring)."""
    from dclr.data.text import clip_all
    from dclr.evaluation.scores import cached_starting_scores, save_starting_scores
    from dclr.evaluation.sts import StsEvaluator
    from dclr.losses.complementary import CACHE_BATCH_SIZE, CachedComplementary, freeze
    from dclr.models.encoder import SentenceEncoder, model_limit

    config = run.config
    if not config.run.test_eval:
        return None
    section = config.section(run.method.name)
    spec = section.complementary_model or config.model.name
    if (
        not section.needs_complementary
        or section.complementary_mode != "cached"
        or spec != config.model.name
    ):
        return None
    data_dir = config.data.data_dir
    if cached_starting_scores(config.model.name, pooler, data_dir) is not None:
        return None
    corpus = run.data
    encoder = SentenceEncoder.from_pretrained(spec, pooler=section.complementary_pooler)
    if pooler == "cls" and encoder.packing:
        return None
    cache_arg = Path(section.complementary_cache) if section.complementary_cache else None
    if sample_rows_only(run, section, cache_arg, encoder.pooler, spec):
        return None  # the run encodes only the rows it samples: no corpus pass to share
    limit = config.model.max_length
    cache, expected = CachedComplementary.locate(cache_arg, encoder.pooler, corpus, spec, limit)
    if CachedComplementary.exists(cache):
        return None
    encoder = freeze(encoder.to(run.device))  # as build_complementary leaves it
    evaluator = StsEvaluator(data_dir, mode="test")
    wanted = evaluator.sentences()
    full = encoder.max_length or model_limit(encoder.tokenizer)  # what the evaluator truncates at
    clipped = clip_all(wanted, full)  # bounded work per text
    lengths = batch_token_ids(encoder.tokenizer, clipped, full)
    in_corpus = set(corpus)
    shared = {
        s for s, ids in zip(wanted, lengths, strict=True) if s in in_corpus and len(ids) <= limit
    }
    vectors = encoder.encode_poolers(
        list(corpus),
        (encoder.pooler, pooler),
        batch_size=CACHE_BATCH_SIZE,
        max_length=limit,
        normalize=True,
        show_progress=True,
        progress_label="encode corpus once (before-eval + complementary cache)",
        by_length=True,  # the cache's batches (`dclr.losses.complementary.encode_rows`)
    )
    CachedComplementary.save(cache, vectors[encoder.pooler], expected)
    before = dict(zip(corpus, vectors[pooler], strict=True))
    rest = [s for s in wanted if s not in shared]  # longer than `limit`, or not in the corpus
    if rest:
        extra = encoder.encode_poolers(rest, (pooler,), normalize=True, max_length=full)[pooler]
        before.update(zip(rest, extra, strict=True))
    scores = evaluator(lambda s: np.stack([before[x] for x in s]))
    save_starting_scores(config.model.name, pooler, data_dir, scores)
    return scores
