"""benchmarks/int8_calibration_spread.py: its paired interval against a hand computation, and
its calibration draws (distinct train sentences, fixed by the seed, different across seeds)."""

import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import int8_calibration_spread as spread  # noqa: E402


def test_paired_difference_and_its_95_percent_interval():
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2 df) = 4.3027 -> half width 4.3027 / sqrt(3)
    result = spread.paired([10.0, 20.0, 30.0], [11.0, 22.0, 33.0])
    assert result["mean"] == pytest.approx(2.0)
    assert result["high"] - result["mean"] == pytest.approx(4.302653 / 3**0.5, rel=1e-5)
    assert result["mean"] - result["low"] == pytest.approx(result["high"] - result["mean"])
    assert result["n"] == 3


def test_draws_are_distinct_seeded_train_sentences(data_dir):
    first, again, other = (spread.calibration_draw(str(data_dir), 50, s) for s in (0, 0, 1))
    assert first == again and first != other
    assert len(set(first)) == 50
