"""SentEval's transfer tasks with SentEval's procedure, as SimCSE's evaluation.py runs it.

A frozen encoder embeds every sentence; a logistic regression (SentEval's PyTorch `MLP` with
nhid = 0: one linear layer, cross-entropy, early stopping on a validation set) is trained on the
vectors. What SentEval does, and so what this does:

- MR, CR, SUBJ, MPQA: `InnerKFoldClassifier`. Stratified k-fold over the sorted rows; inside each
  training fold a second stratified k-fold picks the L2 weight decay from 1e-5, 1e-4, 1e-3, 1e-2
  (its grid with `usepytorch`); the chosen one is refit on the training fold with 5 % held out for
  early stopping, then scored on the test fold. Accuracy: mean over folds.
- SST-2: `SplitClassifier`. Each L2 value is fit on train with early stopping on dev; the best on
  dev is refit the same way and scored on test.
- TREC (6 classes) and MRPC: `KFoldClassifier`. The L2 value is chosen by k-fold accuracy on the
  train split (each fold early-stopped on its held-out part); the chosen one is refit on all of
  train with a 5 % validation split and scored on test. MRPC's features for a pair (u, v) are
  [|u - v|, u * v]; its F1 is reported too.

Settings (`ClassifierSettings`): SimCSE's `test` (10 folds, Adam, batch 64, tenacity 5, epoch
size 4) and `fasttest` (5 folds, RMSprop, batch 128, tenacity 3, epoch size 2). Every classifier
is seeded with SentEval's 1111 exactly as SentEval seeds it (numpy for the shuffles, torch for
the initial weights), so with the same vectors the same accuracies come out; here each classifier
owns its generators instead of reseeding the process-wide ones.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from dclr.data.paths import resolve_data_dir
from dclr.data.transfer import (
    BINARY_FILES,
    TRANSFER_TASKS,
    Split,
    load_binary,
    load_mrpc,
    load_sst2,
    load_trec,
)

TransferMode = Literal["test", "fasttest"]
EncodeFn = Callable[[list[str]], np.ndarray]
SEED = 1111  # SentEval's default seed (engine.py), used for every classifier and fold split
L2_GRID = tuple(10.0**t for t in range(-5, -1))  # SentEval's weight-decay grid with usepytorch
VALIDATION_SPLIT = 0.05  # SentEval holds out 5 % of train for early stopping in the final fits
MAX_EPOCH = 200  # SentEval's MLP default


@dataclass(frozen=True)
class ClassifierSettings:
    kfold: int
    batch_size: int
    tenacity: int  # validation checks without improvement tolerated (SentEval's counting)
    epoch_size: int  # passes over the training set between validation checks
    optim: Literal["adam", "rmsprop"]  # default learning rates: Adam 1e-3, RMSprop 1e-2


# SimCSE's evaluation.py: params for --mode test and --mode fasttest (SentEval's `classifier`).
SETTINGS: dict[str, ClassifierSettings] = {
    "test": ClassifierSettings(kfold=10, batch_size=64, tenacity=5, epoch_size=4, optim="adam"),
    "fasttest": ClassifierSettings(
        kfold=5, batch_size=128, tenacity=3, epoch_size=2, optim="rmsprop"
    ),
}


class LogisticRegression:
    """SentEval's `MLP` with nhid = 0, on CPU. X: (n, d) float32; y: (n,) int64 class ids."""

    def __init__(
        self, dim: int, nclasses: int, l2: float, settings: ClassifierSettings, seed: int = SEED
    ) -> None:
        self.settings = settings
        self.rng = np.random.RandomState(seed)  # SentEval: np.random.seed(seed) per classifier
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # SentEval: torch.manual_seed(seed) before building the layer
            self.model = nn.Linear(dim, nclasses)
        optimizer = torch.optim.Adam if settings.optim == "adam" else torch.optim.RMSprop
        self.optimizer = optimizer(self.model.parameters(), weight_decay=l2)
        self.loss_fn = nn.CrossEntropyLoss()

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        validation: tuple[np.ndarray, np.ndarray] | None = None,
        validation_split: float | None = None,
    ) -> float:
        """Train with early stopping on `validation` (or a held-out `validation_split`); the
        weights of the best validation accuracy are kept. Returns that accuracy."""
        if validation is None:
            assert validation_split
            order = self.rng.permutation(len(x))  # a numpy array; `perm` below is a tensor
            cut = int(validation_split * len(x))
            validation = (x[order[:cut]], y[order[:cut]])
            x, y = x[order[cut:]], y[order[cut:]]
        tx, ty = torch.from_numpy(x).float(), torch.from_numpy(y).long()
        s = self.settings
        epochs, best, best_state, misses, stop = 0, -1.0, None, 0, False
        while not stop and epochs <= MAX_EPOCH:
            self.model.train()
            for _ in range(s.epoch_size):
                perm = torch.from_numpy(self.rng.permutation(len(tx))).long()
                for start in range(0, len(tx), s.batch_size):
                    rows = perm[start : start + s.batch_size]
                    loss = self.loss_fn(self.model(tx[rows]), ty[rows])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            epochs += s.epoch_size
            accuracy = self.score(*validation)
            if accuracy > best:
                best, best_state = accuracy, copy.deepcopy(self.model.state_dict())
            else:  # SentEval's rule: stop after `tenacity` + 1 non-improving checks in all
                stop = misses >= s.tenacity
                misses += 1
        assert best_state is not None
        self.model.load_state_dict(best_state)
        return best

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        self.model.eval()
        tx = torch.from_numpy(x).float()
        out = [
            self.model(tx[i : i + self.settings.batch_size]).max(1)[1]
            for i in range(0, len(tx), self.settings.batch_size)
        ]
        return torch.cat(out).numpy()

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.predict(x) == y).sum()) / len(y)


@contextmanager
def single_thread() -> Iterator[None]:
    """One torch thread while the classifiers train: a (d -> classes) linear layer on batches of
    64-128 rows gains nothing from more, and extra threads only spin-wait on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _folds(x: np.ndarray, y: np.ndarray, k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits=k, shuffle=True, random_state=SEED).split(x, y)


def l2_scores(x: np.ndarray, y: np.ndarray, nclasses: int, s: ClassifierSettings) -> list[float]:
    """Mean k-fold validation accuracy (x100, SentEval's rounding) of each L2 value in L2_GRID:
    how SentEval's KFold and InnerKFold classifiers choose the weight decay."""
    scores = []
    for l2 in L2_GRID:
        accs = []
        for tr, te in _folds(x, y, s.kfold):
            clf = LogisticRegression(x.shape[1], nclasses, l2, s)
            clf.fit(x[tr], y[tr], (x[te], y[te]))
            accs.append(clf.score(x[te], y[te]))
        scores.append(round(100 * float(np.mean(accs)), 2))
    return scores


def inner_kfold(
    x: np.ndarray, y: np.ndarray, nclasses: int, s: ClassifierSettings
) -> tuple[float, float]:
    """SentEval's InnerKFoldClassifier -> (dev accuracy, test accuracy), x100."""
    dev_results, test_results = [], []
    for train_idx, test_idx in _folds(x, y, s.kfold):
        x_train, x_test, y_train, y_test = x[train_idx], x[test_idx], y[train_idx], y[test_idx]
        scores = l2_scores(x_train, y_train, nclasses, s)
        dev_results.append(max(scores))
        clf = LogisticRegression(x.shape[1], nclasses, L2_GRID[int(np.argmax(scores))], s)
        clf.fit(x_train, y_train, validation_split=VALIDATION_SPLIT)
        test_results.append(round(100 * clf.score(x_test, y_test), 2))
    return round(float(np.mean(dev_results)), 2), round(float(np.mean(test_results)), 2)


def kfold(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    nclasses: int,
    s: ClassifierSettings,
) -> tuple[float, float, np.ndarray]:
    """SentEval's KFoldClassifier -> (dev accuracy, test accuracy x100, test predictions)."""
    x, y = train
    scores = l2_scores(x, y, nclasses, s)
    clf = LogisticRegression(x.shape[1], nclasses, L2_GRID[int(np.argmax(scores))], s)
    clf.fit(x, y, validation_split=VALIDATION_SPLIT)
    return max(scores), round(100 * clf.score(*test), 2), clf.predict(test[0])


def split_classifier(
    train: tuple[np.ndarray, np.ndarray],
    valid: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    nclasses: int,
    s: ClassifierSettings,
) -> tuple[float, float]:
    """SentEval's SplitClassifier -> (dev accuracy, test accuracy), x100."""
    dim = train[0].shape[1]
    scores = []
    for l2 in L2_GRID:
        clf = LogisticRegression(dim, nclasses, l2, s)
        clf.fit(*train, valid)
        scores.append(round(100 * clf.score(*valid), 2))
    clf = LogisticRegression(dim, nclasses, L2_GRID[int(np.argmax(scores))], s)
    clf.fit(*train, valid)
    return max(scores), round(100 * clf.score(*test), 2)


def _text(tokens: list[str]) -> str:
    return " ".join(tokens)  # SimCSE's batcher: " ".join(tokens)


@dataclass
class TransferEvaluator:
    """Accuracy x100 on SentEval's transfer tasks; `encode` maps sentences to an (n, d) array.

    `mode`: 'fasttest' or 'test' (SimCSE's classifier settings). The primary metric is `avg` (mean
    accuracy over the tasks). Also returned: `<task>/devacc`, `MRPC/f1`, `<task>/seconds`.
    """

    data_dir: str | Path | None = None
    mode: TransferMode = "fasttest"
    tasks: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.mode not in SETTINGS:
            raise ValueError(f"mode must be one of {tuple(SETTINGS)}, got {self.mode!r}")
        self.tasks = tuple(self.tasks or TRANSFER_TASKS)
        unknown = [t for t in self.tasks if t not in TRANSFER_TASKS]
        if unknown:
            raise ValueError(f"unknown transfer tasks {unknown}; choose from {TRANSFER_TASKS}")
        root = resolve_data_dir(self.data_dir) / "senteval"
        self.data: dict[str, dict[str, Split]] = {}
        for task in self.tasks:
            if task in BINARY_FILES:
                self.data[task] = {"all": load_binary(root, task)}
            elif task == "SST2":
                self.data[task] = load_sst2(root)
            elif task == "TREC":
                self.data[task] = load_trec(root)
            else:
                self.data[task] = load_mrpc(root)

    def sentences(self) -> list[str]:
        seen: dict[str, None] = {}
        for splits in self.data.values():
            for split in splits.values():
                for tokens in (*split.first, *(split.second or [])):
                    seen.setdefault(_text(tokens), None)
        return list(seen)

    def __call__(self, encode: EncodeFn) -> dict[str, float]:
        start = time.perf_counter()
        sentences = self.sentences()
        vectors = np.asarray(encode(sentences), dtype=np.float32)
        if vectors.shape[0] != len(sentences):
            raise ValueError(
                f"encode returned {vectors.shape[0]} rows for {len(sentences)} sentences"
            )
        index = {s: i for i, s in enumerate(sentences)}
        encoded = time.perf_counter()

        def rows(tokens: list[list[str]]) -> np.ndarray:
            return vectors[[index[_text(t)] for t in tokens]]

        with single_thread():
            results = self._classify(rows)
        results["avg"] = float(np.mean([results[t] for t in self.tasks]))  # type: ignore[union-attr]
        results["n_sentences"] = float(len(sentences))
        results["encode_seconds"] = encoded - start
        results["seconds"] = time.perf_counter() - start
        return results

    def _classify(self, rows: Callable[[list[list[str]]], np.ndarray]) -> dict[str, float]:
        s = SETTINGS[self.mode]
        results: dict[str, float] = {}
        for task, splits in self.data.items():
            tic = time.perf_counter()
            if task in BINARY_FILES:
                split = splits["all"]
                dev, acc = inner_kfold(rows(split.first), split.labels, 2, s)
            elif task == "SST2":
                xy = {k: (rows(v.first), v.labels) for k, v in splits.items()}
                dev, acc = split_classifier(xy["train"], xy["dev"], xy["test"], 2, s)
            elif task == "TREC":
                xy = {k: (rows(v.first), v.labels) for k, v in splits.items()}
                dev, acc, _ = kfold(xy["train"], xy["test"], 6, s)
            else:  # MRPC: [|u - v|, u * v]
                xy = {}
                for k, v in splits.items():
                    a, b = rows(v.first), rows(v.second or [])
                    xy[k] = (np.c_[np.abs(a - b), a * b], v.labels)
                dev, acc, yhat = kfold(xy["train"], xy["test"], 2, s)
                results["MRPC/f1"] = _f1(xy["test"][1], yhat)
            results[task] = float(acc)
            results[f"{task}/devacc"] = float(dev)
            results[f"{task}/seconds"] = time.perf_counter() - tic
        return results


def _f1(y: np.ndarray, yhat: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return round(100 * float(f1_score(y, yhat)), 2)
