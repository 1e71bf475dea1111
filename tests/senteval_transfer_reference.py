"""SentEval's transfer-task classifiers, re-implemented on their own code path: the reference that
`dclr.evaluation.transfer` is checked against.

It follows SentEval's `tools/classifier.py` (PyTorchClassifier / MLP with nhid = 0) and
`tools/validation.py` (InnerKFoldClassifier, KFoldClassifier, SplitClassifier) step by step,
including their use of the process-wide RNGs: every classifier calls `np.random.seed(seed)` and
`torch.manual_seed(seed)` when built, the validation split and every epoch's shuffle draw from
`np.random`, the best model is kept with `copy.deepcopy`, and the early-stopping counter is
SentEval's (it is never reset). Differences: CPU instead of `.cuda()`, and the optimizer is built
from a name with default arguments instead of SentEval's string parser (same result for "adam" and
"rmsprop"). Nothing is shared with dclr.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from torch import nn


class ReferenceMLP:
    def __init__(self, params, inputdim, nclasses, l2reg=0.0, seed=1111):
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.tenacity = params.get("tenacity", 5)
        self.epoch_size = params.get("epoch_size", 4)
        self.max_epoch = params.get("max_epoch", 200)
        self.batch_size = params.get("batch_size", 64)
        self.model = nn.Sequential(nn.Linear(inputdim, nclasses))
        self.loss_fn = nn.CrossEntropyLoss()
        optim = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}[params["optim"]]
        self.optimizer = optim(self.model.parameters())
        self.optimizer.param_groups[0]["weight_decay"] = l2reg

    def prepare_split(self, X, y, validation_data=None, validation_split=None):
        if validation_data is not None:
            trainX, trainy, (devX, devy) = X, y, validation_data
        else:
            permutation = np.random.permutation(len(X))
            trainidx = permutation[int(validation_split * len(X)) :]
            devidx = permutation[0 : int(validation_split * len(X))]
            trainX, trainy, devX, devy = X[trainidx], y[trainidx], X[devidx], y[devidx]
        as_x = lambda a: torch.from_numpy(a).to(dtype=torch.float32)  # noqa: E731
        as_y = lambda a: torch.from_numpy(a).to(dtype=torch.int64)  # noqa: E731
        return as_x(trainX), as_y(trainy), as_x(devX), as_y(devy)

    def fit(self, X, y, validation_data=None, validation_split=None):
        self.nepoch = 0
        bestaccuracy = -1
        stop_train = False
        early_stop_count = 0
        trainX, trainy, devX, devy = self.prepare_split(X, y, validation_data, validation_split)
        while not stop_train and self.nepoch <= self.max_epoch:
            self.trainepoch(trainX, trainy, epoch_size=self.epoch_size)
            accuracy = self.score(devX, devy)
            if accuracy > bestaccuracy:
                bestaccuracy = accuracy
                bestmodel = copy.deepcopy(self.model)
            else:
                if early_stop_count >= self.tenacity:
                    stop_train = True
                early_stop_count += 1
        self.model = bestmodel
        return bestaccuracy

    def trainepoch(self, X, y, epoch_size=1):
        self.model.train()
        for _ in range(self.nepoch, self.nepoch + epoch_size):
            permutation = np.random.permutation(len(X))
            for i in range(0, len(X), self.batch_size):
                idx = torch.from_numpy(permutation[i : i + self.batch_size]).long()
                loss = self.loss_fn(self.model(X[idx]), y[idx])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.nepoch += epoch_size

    def score(self, devX, devy):
        self.model.eval()
        if isinstance(devX, np.ndarray):
            devX, devy = torch.FloatTensor(devX), torch.LongTensor(devy)
        correct = 0
        with torch.no_grad():
            for i in range(0, len(devX), self.batch_size):
                output = self.model(devX[i : i + self.batch_size])
                pred = output.data.max(1)[1]
                correct += pred.long().eq(devy[i : i + self.batch_size].long()).sum().item()
        return 1.0 * correct / len(devX)


REGS = [10**t for t in range(-5, -1)]


def inner_kfold(X, y, nclasses, params, k, seed=1111):
    devresults, testresults = [], []
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)
    innerskf = StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)
    for train_idx, test_idx in skf.split(X, y):
        X_train, X_test, y_train, y_test = X[train_idx], X[test_idx], y[train_idx], y[test_idx]
        scores = []
        for reg in REGS:
            regscores = []
            for itr, ite in innerskf.split(X_train, y_train):
                clf = ReferenceMLP(params, X.shape[1], nclasses, l2reg=reg, seed=seed)
                clf.fit(X_train[itr], y_train[itr], validation_data=(X_train[ite], y_train[ite]))
                regscores.append(clf.score(X_train[ite], y_train[ite]))
            scores.append(round(100 * np.mean(regscores), 2))
        optreg = REGS[np.argmax(scores)]
        devresults.append(np.max(scores))
        clf = ReferenceMLP(params, X.shape[1], nclasses, l2reg=optreg, seed=seed)
        clf.fit(X_train, y_train, validation_split=0.05)
        testresults.append(round(100 * clf.score(X_test, y_test), 2))
    return round(np.mean(devresults), 2), round(np.mean(testresults), 2)


def kfold(train, test, nclasses, params, k, seed=1111):
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    scores = []
    for reg in REGS:
        scanscores = []
        for tr, te in skf.split(train["X"], train["y"]):
            clf = ReferenceMLP(params, train["X"].shape[1], nclasses, l2reg=reg, seed=seed)
            clf.fit(
                train["X"][tr], train["y"][tr], validation_data=(train["X"][te], train["y"][te])
            )
            scanscores.append(clf.score(train["X"][te], train["y"][te]))
        scores.append(round(100 * np.mean(scanscores), 2))
    optreg = REGS[np.argmax(scores)]
    clf = ReferenceMLP(params, train["X"].shape[1], nclasses, l2reg=optreg, seed=seed)
    clf.fit(train["X"], train["y"], validation_split=0.05)
    return np.max(scores), round(100 * clf.score(test["X"], test["y"]), 2)


def split_classifier(X, y, nclasses, params, seed=1111):
    scores = []
    for reg in REGS:
        clf = ReferenceMLP(params, X["train"].shape[1], nclasses, l2reg=reg, seed=seed)
        clf.fit(X["train"], y["train"], validation_data=(X["valid"], y["valid"]))
        scores.append(round(100 * clf.score(X["valid"], y["valid"]), 2))
    optreg = REGS[np.argmax(scores)]
    clf = ReferenceMLP(params, X["train"].shape[1], nclasses, l2reg=optreg, seed=seed)
    clf.fit(X["train"], y["train"], validation_data=(X["valid"], y["valid"]))
    return np.max(scores), round(100 * clf.score(X["test"], y["test"]), 2)
