"""Calibrated phi: quantile rules on hand-made similarities, and the training option."""

from __future__ import annotations

import numpy as np
import pytest

from dclr.errors import ConfigError
from dclr.losses.calibration import phi_from_paraphrases, phi_from_random_pairs
from dclr.methods.dclr_calibrate import calibrate_phi
from dclr.recipe import load_config


def test_random_pairs_quantile_hand_computed() -> None:
    # unit vectors at angles 0, 60, 90 degrees: pair cosines 0.5, 0, cos(30) = 0.866
    v = np.array([[1.0, 0.0], [0.5, np.sqrt(3) / 2], [0.0, 2.0]])  # scale is ignored
    cosines = np.array([0.5, 0.0, np.sqrt(3) / 2])
    for q in (0.1, 0.5, 0.9):
        assert phi_from_random_pairs(v, q) == pytest.approx(np.quantile(cosines, 1 - q))
    # dropping the top third of 3 pairs: the threshold sits at the largest cosine's quantile
    assert phi_from_random_pairs(v, 0.5) == pytest.approx(0.5)


def test_paraphrase_recall_quantile_hand_computed() -> None:
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]])  # cos 1, 0.6, 0, 0.8
    phi = phi_from_paraphrases(a, b, recall=0.5)
    assert phi == pytest.approx(np.quantile([1, 0.6, 0, 0.8], 0.5))  # 0.7
    assert ((np.array([1, 0.6, 0, 0.8]) >= phi).mean()) == 0.5  # half the pairs dropped
    # recall 0.5 is its own complement (the r and 1 - r quantiles coincide): a recall of 0.25
    # sits at the 0.75 quantile, 0.85, and drops only the pair at cosine 1 (a quarter)
    phi = phi_from_paraphrases(a, b, recall=0.25)
    assert phi == pytest.approx(0.85)
    assert ((np.array([1, 0.6, 0, 0.8]) >= phi).mean()) == 0.25


def test_target_outside_unit_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="phi_calibration_target"):
        phi_from_random_pairs(np.eye(3), 1.5)


class StubScorer:
    """Encodes sentence 'k' as a fixed vector (a frozen scorer without a model)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode(
        self, sentences: list[str], max_length: int | None = None, **progress: object
    ) -> np.ndarray:
        return np.array([self.table[s] for s in sentences], dtype=np.float32)


def test_calibrate_phi_uses_the_scorer() -> None:
    table = {"x": [1.0, 0.0], "y": [0.6, 0.8], "z": [0.0, 1.0], "w": [0.8, 0.6]}
    scorer = StubScorer(table)
    with pytest.warns(UserWarning, match="4 corpus sentences put 3 random pairs above it"):
        random = calibrate_phi("random_pairs", 0.5, scorer, list(table), seed=0)
    vectors = np.array(list(table.values()))
    assert random["phi"] == pytest.approx(phi_from_random_pairs(vectors, 0.5))
    with pytest.warns(UserWarning, match="rests on 2 known paraphrase pairs"):
        para = calibrate_phi("paraphrase_recall", 0.5, scorer, [], [("x", "y"), ("x", "w")])
    assert para["phi"] == pytest.approx(0.7) and para["pairs"] == 2


def test_a_calibration_on_enough_data_says_nothing(recwarn) -> None:
    rng = np.random.default_rng(0)
    table = {f"s{i}": list(rng.normal(size=4)) for i in range(200)}  # 19,900 pairs x 0.001 = 19.9
    calibrate_phi("random_pairs", 0.001, StubScorer(table), list(table), seed=0)
    assert not [w for w in recwarn if "calibrated phi" in str(w.message)]


def test_config_rules() -> None:
    base = dict(model="m", method="dclr", pooler="mean", mlp_head=False)
    load_config(None, dict(base, phi_calibration="random_pairs", phi_calibration_target=0.01))
    with pytest.raises(ConfigError, match="weighting: complementary"):
        load_config(None, dict(base, phi_calibration="random_pairs", weighting="self"))
    with pytest.raises(ConfigError, match="whole number"):
        load_config(None, dict(base, paraphrase_density=0.1))
    with pytest.raises(ConfigError, match="paraphrase_sources"):
        load_config(None, dict(base, paraphrase_density=0.25, paraphrase_sources="mrpc,quora"))
