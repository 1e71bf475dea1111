"""A run's retrieval test scores: the starting model ("before") and the trained one ("after").

`run.test_retrieval` names a built-in task (`paraphrase` | `inli`, its test split built from the
data folder) or a BEIR folder (its `test` qrels). Scores are x 100 like the STS table beside them.
The starting model's scores are cached like its STS scores (`dclr.evaluation.scores`), keyed also
by the task, so the runs of an experiment evaluate it once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dclr import atomic
from dclr.data.retrieval_tasks import BUILTIN, TEST_SPLIT


def retrieval_test_scores(
    model: str, pooler: str, target: str, data_dir: str | None, label: str
) -> dict[str, float]:
    """nDCG@10, MRR@10, MAP@100, Recall@{1,10,100} x 100 of the model at `model` on `target`."""
    from dclr.evaluation.retrieval import METRICS
    from dclr.evaluation.retrieval_eval import evaluate_target
    from dclr.evaluation.scores import evaluation_encoder

    encoder = evaluation_encoder(model, pooler)

    def encode(texts: list[str]) -> np.ndarray:
        return encoder.encode(texts, normalize=False, show_progress=True, progress_label=label)

    builtin = target in BUILTIN
    scores = evaluate_target(
        encode, None if builtin else target, target if builtin else None, TEST_SPLIT, data_dir
    )
    out = {name: 100 * scores[name] for name in METRICS}
    out["n_queries"] = scores.get("n_queries", 0.0)
    out["n_passages"] = scores["n_passages"]
    return out


def _cache_file(model: str, pooler: str, target: str, data_dir: str | None) -> Path:
    from dclr.data.paths import default_cache_dir, resolve_data_dir
    from dclr.evaluation.scores import folder_stats, scores_key

    if target in BUILTIN:  # built from the data folder's test splits
        data = [target, str(resolve_data_dir(data_dir).resolve())]
    else:  # a BEIR folder: its path and files
        data = [str(Path(target).resolve()), *folder_stats(Path(target))]
    key = scores_key(model, pooler, *data)
    return default_cache_dir().parent / "starting-retrieval" / f"{key}.json"


def starting_retrieval(
    model: str, pooler: str, target: str, data_dir: str | None
) -> dict[str, float]:
    """The starting model's retrieval test scores, cached per (model, pooler, data, task)."""
    cache = _cache_file(model, pooler, target, data_dir)
    if cache.is_file():
        return json.loads(cache.read_text())
    scores = retrieval_test_scores(
        model, pooler, target, data_dir, f"encode {target} (before: starting model)"
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(cache, json.dumps(scores, indent=2) + "\n")
    return scores
