"""RTE and EIS: known answers on stub embedders, the threshold search, single-embedding baselines."""

from __future__ import annotations

import numpy as np
import pytest
from inli_data import write_inli_dir

from dclr.data.inli import InliExample
from dclr.dualcse.evaluate import (
    EisEvaluator,
    RteEvaluator,
    SingleEmbedding,
    eis_accuracy,
    load_embedder,
    rte_accuracy,
    rte_scores,
    tune_threshold,
)
from dclr.dualcse.model import DualEncoder
from dclr.errors import InputError
from dclr.models.export import save_encoder


class TableEmbedder:
    """A stub dual embedder: looks each sentence's r and u up in a dict of 2-d vectors."""

    def __init__(self, r: dict[str, list[float]], u: dict[str, list[float]]) -> None:
        self.vectors = {"explicit": r, "implicit": u}

    def encode(self, sentences, semantics="explicit", batch_size=128, normalize=False, show_progress=False):  # fmt: skip
        out = np.array([self.vectors[semantics][s] for s in sentences], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True) if normalize else out

    def implicitness(self, sentences, **_):
        r = self.encode(sentences, "explicit", normalize=True)
        u = self.encode(sentences, "implicit", normalize=True)
        return 1 - (r * u).sum(1)


def angle(degrees: float) -> list[float]:
    return [float(np.cos(np.radians(degrees))), float(np.sin(np.radians(degrees)))]


def example(k: int) -> InliExample:
    return InliExample(f"p{k}", f"e{k}", f"i{k}", f"n{k}", f"c{k}")


def geometric_embedder(n: int) -> TableEmbedder:
    """Premise r at 0 deg, u at 90 deg; explicit hypothesis r at 10 deg (near r), implied at 80 (near
    u), neutral at 45 (cos 0.71 to both), contradiction at 180. Threshold in (0.71, 0.98) separates.

    Example k is turned by 40k deg as a whole (its own cosines unchanged), so a premise scored
    against another example's hypothesis gets another score; a hypothesis's u is opposite its r,
    so a score that read the hypothesis's u instead of its r would change too."""
    r, u = {}, {}
    for k in range(n):
        turn = 40 * k
        r[f"p{k}"], u[f"p{k}"] = angle(turn), angle(turn + 90)
        for name, deg in (("e", 10), ("i", 80), ("n", 45), ("c", 180)):
            r[f"{name}{k}"], u[f"{name}{k}"] = angle(turn + deg), angle(turn + deg + 180)
    return TableEmbedder(r, u)


def test_scores_are_the_larger_of_the_premise_r_and_u_similarities():
    scores = rte_scores(geometric_embedder(3), [example(k) for k in range(3)])
    assert np.allclose(scores["explicit"], np.cos(np.radians(10)))
    assert np.allclose(scores["implied"], np.cos(np.radians(10)))  # via u: 90 - 80
    assert np.allclose(scores["neutral"], np.cos(np.radians(45)))
    assert np.allclose(scores["contradiction"], 0.0, atol=1e-6)  # via u: cos 90


def test_separable_scores_give_100_and_the_one_embedding_view_does_not():
    examples = [example(k) for k in range(4)]
    results = RteEvaluator(examples, examples)(geometric_embedder(4))
    assert results["avg"] == 100.0 and results["val_accuracy"] == 100.0
    assert np.cos(np.radians(45)) < results["threshold"] < np.cos(np.radians(10))
    # Without u (r = u = the explicit vector) the implied hypothesis (cos 80 deg = 0.17) falls below
    # the neutral one (0.71): no threshold gets both right.
    flat = geometric_embedder(4)
    flat.vectors["implicit"] = flat.vectors["explicit"]
    assert RteEvaluator(examples, examples)(flat)["avg"] < 100.0


def test_the_threshold_is_tuned_on_val_and_applied_to_test():
    """Test's neutral hypotheses sit at 20 deg (cos 0.94), above val's threshold (midway between
    cos 45 and cos 10): called entailed. A threshold tuned on test would separate test."""
    model = geometric_embedder(4)
    for k in (2, 3):
        model.vectors["explicit"][f"n{k}"] = angle(40 * k + 20)
    val, test = [example(0), example(1)], [example(2), example(3)]
    results = RteEvaluator(val, test)(model)
    cos10, cos45 = np.cos(np.radians(10)), np.cos(np.radians(45))
    assert results["threshold"] == pytest.approx((cos10 + cos45) / 2, abs=1e-6)
    assert results["val_accuracy"] == 100.0 and results["neutral"] == 0.0
    assert results["explicit"] == results["implied"] == results["contradiction"] == 100.0


def test_threshold_search_on_a_hand_worked_example():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    entailed = np.array([0, 0, 1, 0, 1, 1], dtype=bool)
    threshold, accuracy = tune_threshold(scores, entailed)
    # Cut after 0.2: 5/6 right (0.4 wrong); after 0.4: 5/6 (0.3 wrong); the lower cut wins.
    assert threshold == pytest.approx(0.25) and accuracy == pytest.approx(500 / 6)
    assert tune_threshold(np.array([0.5, 0.7]), np.array([True, True])) == (pytest.approx(-0.5), 100.0)  # fmt: skip
    assert tune_threshold(np.array([0.5, 0.7]), np.array([False, False])) == (0.7, 100.0)


def test_ties_cannot_be_split_by_a_threshold():
    # In either order: a cut between the tied scores would get [False, True] 100 % right.
    for entailed in ([True, False], [False, True]):
        threshold, accuracy = tune_threshold(np.array([0.5, 0.5]), np.array(entailed))
        assert accuracy == 50.0 and threshold != 0.5
    assert rte_accuracy({k: np.array([0.5]) for k in ("explicit", "implied", "neutral", "contradiction")}, threshold)["avg"] == 50.0  # fmt: skip


def test_accuracy_per_type_and_average():
    scores = {
        "explicit": np.array([0.9, 0.8]),
        "implied": np.array([0.9, 0.1]),
        "neutral": np.array([0.1, 0.2]),
        "contradiction": np.array([0.9, 0.9]),
    }
    results = rte_accuracy(scores, 0.5)
    assert results == {
        "explicit": 100.0,
        "implied": 50.0,
        "neutral": 100.0,
        "contradiction": 0.0,
        "avg": 62.5,
    }
    at = rte_accuracy({k: np.array([0.5]) for k in scores}, 0.5)  # equal is not above
    assert (at["explicit"], at["implied"], at["neutral"], at["contradiction"]) == (0, 0, 100, 100)


def test_eis_counts_correct_orderings_and_half_ties(tmp_path):
    r = {"a": angle(0), "b": angle(0), "c": angle(0), "d": angle(0)}
    u = {"a": angle(60), "b": angle(10), "c": angle(30), "d": angle(30)}  # a > c = d > b
    model = TableEmbedder(r, u)
    result = eis_accuracy(model, [("a", "b"), ("b", "a"), ("c", "d"), ("a", "c")])
    assert result == {"accuracy": 62.5, "ties": 1, "n_pairs": 4}
    path = tmp_path / "eis.tsv"
    path.write_text("implicit\texplicit\na\tb\nb\ta\nc\td\na\tc\n")
    assert EisEvaluator(path)(model) == result


def test_single_embedding_models_go_through_the_same_code(tiny_encoder, tmp_path):
    encoder = tiny_encoder("mean")
    single = load_embedder(save_encoder(encoder, tmp_path / "single"))
    assert isinstance(single, SingleEmbedding)
    sentences = ["It's a bit chilly in here.", "Please close the window."]
    assert np.array_equal(
        single.encode(sentences, "implicit"), single.encode(sentences, "explicit")
    )
    assert np.array_equal(single.implicitness(sentences), np.zeros(2, dtype=np.float32))
    assert eis_accuracy(single, [tuple(sentences)])["accuracy"] == 50.0  # a tie: a coin flip
    with pytest.raises(InputError, match="unknown semantics"):
        single.encode(sentences, "hidden")
    dual = DualEncoder("cross", {"cross": tiny_encoder("mean")}).save(tmp_path / "dual")
    assert isinstance(load_embedder(dual), DualEncoder)


def test_rte_on_inli_files_with_a_tiny_model(tiny_encoder, tmp_path):
    root = write_inli_dir(tmp_path / "data", n_train=8, n_eval=6)
    model = DualEncoder("cross", {"cross": tiny_encoder("mean")})
    results = RteEvaluator.from_data_dir(root)(model)
    assert set(results) == {"explicit", "implied", "neutral", "contradiction", "avg", "threshold", "val_accuracy"}  # fmt: skip
    assert all(0 <= results[k] <= 100 for k in ("explicit", "implied", "neutral", "contradiction"))
    assert results["val_accuracy"] >= 50.0  # the best threshold is never worse than all-one-way
