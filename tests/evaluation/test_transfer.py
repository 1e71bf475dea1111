"""Transfer tasks: readers follow SentEval's files, and the classifiers give exactly what
SentEval's procedure (tests/senteval_transfer_reference.py) gives on the same vectors."""

from __future__ import annotations

import numpy as np
import pytest
import senteval_transfer_reference as ref  # noqa: E402

from dclr.data.transfer import TRANSFER_TASKS, load_binary, load_mrpc, load_sst2, load_trec
from dclr.evaluation.transfer import (
    SETTINGS,
    ClassifierSettings,
    TransferEvaluator,
    inner_kfold,
    kfold,
    l2_scores,
    single_thread,
    split_classifier,
)

# Small and quick, but every mechanism used: folds, early stopping, the 5 % validation split.
TINY = ClassifierSettings(kfold=3, batch_size=16, tenacity=1, epoch_size=1, optim="rmsprop")


def as_params(s: ClassifierSettings) -> dict:
    return {"nhid": 0, "optim": s.optim, "batch_size": s.batch_size, "tenacity": s.tenacity,
            "epoch_size": s.epoch_size}  # fmt: skip


def blobs(n: int, nclasses: int, seed: int, dim: int = 6):
    """Overlapping Gaussian classes: accuracies well away from 0 and 100."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, nclasses, n)
    centers = rng.normal(size=(nclasses, dim))
    return (centers[y] + 1.5 * rng.normal(size=(n, dim))).astype(np.float32), y.astype(np.int64)


# On these small blobs SentEval's grid (1e-5 ... 1e-2) scores the same at every value, so argmax
# always took the first and a selection that took the worst, or a weight decay never applied,
# gave the same numbers. With decays this large the grid's scores differ and the choice decides.
DECIDING_GRID = (100.0, 1e-5, 1000.0, 1e-4)


@pytest.fixture(params=["senteval", "deciding"])  # a test may name one (indirect)
def grid_l2s(request, monkeypatch):
    """Each side's classifiers record the weight decay they are built with, in order: (dclr's,
    the reference's); with the "deciding" grid in both."""
    import dclr.evaluation.transfer as transfer

    ours: list[float] = []
    theirs: list[float] = []
    if request.param == "deciding":
        monkeypatch.setattr(transfer, "L2_GRID", DECIDING_GRID)
        monkeypatch.setattr(ref, "REGS", list(DECIDING_GRID))
    mine, reference = transfer.LogisticRegression.__init__, ref.ReferenceMLP.__init__

    def built(self, dim, nclasses, l2, *args, **kwargs):
        ours.append(l2)
        mine(self, dim, nclasses, l2, *args, **kwargs)

    def built_reference(self, params, dim, nclasses, l2reg=0.0, seed=1111):
        theirs.append(l2reg)
        reference(self, params, dim, nclasses, l2reg, seed)

    monkeypatch.setattr(transfer.LogisticRegression, "__init__", built)
    monkeypatch.setattr(ref.ReferenceMLP, "__init__", built_reference)
    return request.param, ours, theirs


def test_senteval_grid_is_the_default():
    import dclr.evaluation.transfer as transfer

    assert list(transfer.L2_GRID) == ref.REGS == [1e-5, 1e-4, 1e-3, 1e-2]


@pytest.mark.parametrize(
    ("settings", "grid_l2s"),
    [(TINY, "senteval"), (SETTINGS["fasttest"], "senteval"), (TINY, "deciding")],
    indirect=["grid_l2s"],  # the deciding grid once, on the quick settings
)
def test_inner_kfold_equals_senteval(settings, grid_l2s):
    grid, ours, theirs = grid_l2s
    x, y = blobs(150, 2, 0)
    want = ref.inner_kfold(x, y, 2, as_params(settings), settings.kfold)
    assert inner_kfold(x, y, 2, settings) == want
    assert 50 < want[1] < 100
    assert ours == theirs  # every fit with the same decay, the chosen ones too


def test_kfold_equals_senteval(grid_l2s):
    grid, ours, theirs = grid_l2s
    (x, y), (tx, ty) = blobs(120, 3, 1), blobs(60, 3, 2)
    dev, acc, yhat = kfold((x, y), (tx, ty), 3, TINY)
    want = ref.kfold({"X": x, "y": y}, {"X": tx, "y": ty}, 3, as_params(TINY), TINY.kfold)
    assert (dev, acc) == want
    assert yhat.shape == ty.shape
    assert ours == theirs
    if grid == "deciding":  # the grid's scores differ and the best is not the first value
        chosen = ours[-1]
        assert chosen != DECIDING_GRID[0] and len(set(l2_scores(x, y, 3, TINY))) > 1


def test_split_classifier_equals_senteval(grid_l2s):
    grid, ours, theirs = grid_l2s
    parts = {
        k: blobs(n, 2, s) for k, n, s in (("train", 120, 3), ("valid", 40, 4), ("test", 50, 5))
    }
    got = split_classifier(parts["train"], parts["valid"], parts["test"], 2, TINY)
    want = ref.split_classifier(
        {k: v[0] for k, v in parts.items()}, {k: v[1] for k, v in parts.items()}, 2,
        as_params(TINY),
    )  # fmt: skip
    assert got == want
    assert ours == theirs
    if grid == "deciding":
        assert ours[-1] != DECIDING_GRID[0]  # the validation score chose another decay


def test_simcse_settings():
    assert SETTINGS["test"] == ClassifierSettings(10, 64, 5, 4, "adam")
    assert SETTINGS["fasttest"] == ClassifierSettings(5, 128, 3, 2, "rmsprop")


# ---- the data, as SentEval reads it -------------------------------------------------------------
def test_readers_give_senteval_sizes_and_order(data_dir):
    root = data_dir / "senteval"
    sizes = {"MR": 10662, "CR": 3775, "SUBJ": 10000, "MPQA": 10606}
    for task, n in sizes.items():
        split = load_binary(root, task)
        assert len(split.first) == n and set(split.labels.tolist()) == {0, 1}
        keys = [(len(t), int(lab)) for t, lab in zip(split.first, split.labels, strict=True)]
        assert keys == sorted(keys)  # SentEval's (length, label) order
    sst = load_sst2(root)
    assert [len(sst[k].first) for k in ("train", "dev", "test")] == [67349, 872, 1821]
    trec = load_trec(root)
    assert [len(trec[k].first) for k in ("train", "test")] == [5452, 500]
    assert set(trec["train"].labels.tolist()) == set(range(6))
    mrpc = load_mrpc(root)
    assert [len(mrpc[k].first) for k in ("train", "test")] == [4076, 1725]
    assert mrpc["test"].second is not None and len(mrpc["test"].second) == 1725


def test_evaluator_runs_every_task_on_a_stub_encoder(data_dir, monkeypatch):
    """A stub encoder whose vectors carry MR's label: MR is learnt; the others run end to end."""
    import dclr.evaluation.transfer as transfer

    small = ClassifierSettings(kfold=2, batch_size=512, tenacity=0, epoch_size=1, optim="rmsprop")
    monkeypatch.setitem(transfer.SETTINGS, "fasttest", small)
    monkeypatch.setattr(transfer, "L2_GRID", (1e-5,))
    evaluator = TransferEvaluator(data_dir, mode="fasttest", tasks=["MR", "TREC", "MRPC"])
    pos_file = data_dir / "senteval" / "MR" / "rt-polarity.pos"
    positive = {" ".join(line.split()) for line in pos_file.read_text("latin-1").splitlines()}

    def encode(sentences):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(len(sentences), 4)).astype(np.float32)
        x[:, 0] = [5.0 if s in positive else -5.0 for s in sentences]
        return x

    results = evaluator(encode)
    assert results["MR"] > 95
    assert {"TREC", "MRPC", "MRPC/f1", "avg", "MR/devacc"} <= set(results)
    # MRPC classifies a pair (u, v) by [|u - v|, u * v], written out here from the same vectors.
    sentences = evaluator.sentences()
    index = {s: i for i, s in enumerate(sentences)}
    vectors = encode(sentences)

    def features(split):
        u = vectors[[index[" ".join(t)] for t in split.first]]
        v = vectors[[index[" ".join(t)] for t in split.second]]
        return np.c_[np.abs(u - v), u * v], split.labels

    mrpc = evaluator.data["MRPC"]
    with single_thread():  # as the evaluator trains: the same bits
        dev, acc, _ = kfold(features(mrpc["train"]), features(mrpc["test"]), 2, small)
    assert (results["MRPC/devacc"], results["MRPC"]) == (dev, acc)
    # avg: the plain mean of the three tasks' accuracies
    assert results["avg"] == pytest.approx(np.mean([results[t] for t in ("MR", "TREC", "MRPC")]))


def test_unknown_task_is_refused(data_dir):
    with pytest.raises(ValueError, match="unknown transfer tasks"):
        TransferEvaluator(data_dir, tasks=["SST5"])
    assert TRANSFER_TASKS == ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
