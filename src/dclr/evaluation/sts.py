"""STS evaluation with SentEval's procedure, each distinct sentence encoded once.

Numbers are Spearman x 100 of cosine similarity against gold scores:
- STS12..STS16: SentEval's "all" setting, one Spearman over the concatenation of every subset's
  scored pairs (SimCSE's `results[task]["all"]["spearman"]["all"]`);
- STSBenchmark, SICKRelatedness: the test split (`--mode test`) or dev split (`--mode dev`).
Also reported: alignment (STS-B dev pairs with gold > 4) and uniformity (all STS-B dev sentences);
with `released_geometry`, also DCLR's released estimator of both (`alignment_released`,
`uniformity_released`: per batch of 128 STS-B train then dev pairs, `geometry.released_geometry`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import numpy as np
import torch
from scipy.stats import spearmanr

from dclr.data.paths import resolve_data_dir
from dclr.data.senteval_text import StsText, as_text, check_sts_text, moses_lower
from dclr.data.sts import STS_SUBSETS, STS_TASKS, StsPairs, load_task, read_stsb
from dclr.errors import ConfigError
from dclr.evaluation.geometry import alignment, released_geometry, uniformity

Mode = Literal["test", "dev"]
EncodeFn = Callable[[list[str]], np.ndarray]
ALIGN_MIN_SCORE = 4.0  # SimCSE: positive pairs are STS-B pairs with gold score > 4
DEV_TASKS = ("STSBenchmark", "SICKRelatedness")


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine, with SentEval's nan_to_num (a zero vector scores 0)."""
    a, b = np.nan_to_num(a.astype(np.float64)), np.nan_to_num(b.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.nan_to_num(sims)


def spearman100(sys_scores: np.ndarray, gold: np.ndarray) -> float:
    return float(spearmanr(sys_scores, gold).correlation * 100)


@dataclass
class StsEvaluator:
    """Evaluate an encoder on the STS tasks; `encode` maps sentences to an (n, d) array.

    `tasks` defaults to the 7 tasks in test mode and to STS-B + SICK dev in dev mode.
    The primary metric is `avg` (mean of the task scores). `released_geometry` adds DCLR's
    released alignment / uniformity estimator (it encodes STS-B train too: ~10k more sentences).
    `text`: the sentences as the files hold them (raw), or as SentEval's download script
    leaves STS12-16 and STS-B, Moses-tokenised and lower-cased (senteval;
    `dclr.data.senteval_text`).
    """

    data_dir: str | Path | None = None
    mode: Mode = "test"
    tasks: Sequence[str] | None = None
    geometry: bool = True
    released_geometry: bool = False
    text: StsText = "raw"
    pairs: dict[str, list[StsPairs]] = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in ("test", "dev"):
            raise ConfigError(f"mode must be test or dev (--mode), got {self.mode!r}")
        root = resolve_data_dir(self.data_dir)
        if self.tasks is None:
            self.tasks = STS_TASKS if self.mode == "test" else DEV_TASKS
        unknown = [t for t in self.tasks if t not in STS_TASKS]
        if unknown:
            raise ConfigError(f"unknown STS tasks {unknown}; choose from {', '.join(STS_TASKS)}")
        no_dev = [t for t in self.tasks if t in STS_SUBSETS]
        if self.mode == "dev" and no_dev:
            raise ConfigError(
                f"{', '.join(no_dev)} have no dev split (SemEval released test sets only); "
                f"use --mode test, or --tasks {','.join(DEV_TASKS)} for the dev splits"
            )
        check_sts_text(self.text)
        transform = moses_lower() if self.text == "senteval" else str

        def read(groups: list[StsPairs]) -> list[StsPairs]:
            return as_text(groups, self.text, transform)

        self.pairs = {t: read(load_task(root, t, self.mode)) for t in self.tasks}
        self._stsb_dev = read([read_stsb(root, "dev")])[0] if self.geometry else None
        self._released = (
            read([read_stsb(root, "train"), read_stsb(root, "dev")])
            if self.released_geometry
            else []
        )

    def sentences(self) -> list[str]:
        """Every distinct sentence needed, in first-seen order."""
        seen: dict[str, None] = {}
        groups = [p for ps in self.pairs.values() for p in ps]
        if self._stsb_dev is not None:
            groups.append(self._stsb_dev)
        groups += self._released
        for p in groups:
            for s in (*p.sentences1, *p.sentences2):
                seen.setdefault(s, None)
        return list(seen)

    def __call__(self, encode: EncodeFn) -> dict[str, float]:
        start = time.perf_counter()
        sentences = self.sentences()
        vectors = np.asarray(encode(sentences))
        if vectors.shape[0] != len(sentences):
            raise ValueError(
                f"encode returned {vectors.shape[0]} rows for {len(sentences)} sentences"
            )
        index = {s: i for i, s in enumerate(sentences)}
        results: dict[str, float] = {}
        for task, groups in self.pairs.items():
            sys_all, gold_all = [], []
            for p in groups:
                sims = cosine_rows(
                    vectors[[index[s] for s in p.sentences1]],
                    vectors[[index[s] for s in p.sentences2]],
                )
                sys_all.append(sims)
                gold_all.append(p.scores)
                if len(groups) > 1:
                    results[f"{task}/{p.subset}"] = spearman100(sims, p.scores)
            results[task] = spearman100(np.concatenate(sys_all), np.concatenate(gold_all))
        tasks = cast(Sequence[str], self.tasks)  # never None after __post_init__
        results["avg"] = float(np.mean([results[t] for t in tasks]))
        if self._stsb_dev is not None:
            results.update(self._geometry(vectors, index))
        if self._released:
            splits = [
                (
                    torch.from_numpy(vectors[[index[s] for s in p.sentences1]]),
                    torch.from_numpy(vectors[[index[s] for s in p.sentences2]]),
                    p.scores,
                )
                for p in self._released
            ]
            released = released_geometry(splits)
            results.update({f"{name}_released": value for name, value in released.items()})
        results["n_sentences"] = float(len(sentences))
        results["seconds"] = time.perf_counter() - start
        return results

    def _geometry(self, vectors: np.ndarray, index: dict[str, int]) -> dict[str, float]:
        p = self._stsb_dev
        assert p is not None
        keep = p.scores > ALIGN_MIN_SCORE
        x = torch.from_numpy(
            vectors[[index[s] for s, k in zip(p.sentences1, keep, strict=True) if k]]
        )
        y = torch.from_numpy(
            vectors[[index[s] for s, k in zip(p.sentences2, keep, strict=True) if k]]
        )
        distinct = list(dict.fromkeys((*p.sentences1, *p.sentences2)))
        all_x = torch.from_numpy(vectors[[index[s] for s in distinct]])
        return {"alignment": alignment(x, y), "uniformity": uniformity(all_x)}


def main_scores(results: dict[str, float], tasks: Sequence[str]) -> dict[str, float]:
    """The per-task numbers and their average, in task order."""
    return {t: results[t] for t in (*tasks, "avg")}
