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


def test_the_report_pairs_every_row_by_draw_and_names_each_difference():
    def row(seed: int, ours: float, peer: float) -> dict:
        cells = {key: {"avg": ours + i * 0.1} for i, (key, *_) in enumerate(spread.VARIANTS)}
        return {"seed": seed, **cells, "st_openvino_int8": {"avg": peer}}

    rows = [row(0, 78.0, 78.5), row(1, 79.0, 79.25)]
    found = spread.differences(rows, peer=True)
    shipped = spread.SHIPPED
    # paired by draw: the variants differ by 0.1 in each draw, so the interval has no width
    # (row 0 against row 1 would give differences 1.1 and -0.9: the same mean, a wide interval)
    unsmoothed = found[f"dclr_int8_unsmoothed - {shipped}"]
    assert unsmoothed["mean"] == unsmoothed["low"] == unsmoothed["high"] == pytest.approx(0.1)
    # the peer's differences 0.5 and 0.25: sd 0.25 / sqrt(2), t(0.975, 1 df) = 12.7062,
    # half width 12.7062 x 0.25 / 2 = 1.5883
    peer = found[f"st_openvino_int8 - {shipped}"]
    assert peer["mean"] == pytest.approx((0.5 + 0.25) / 2)
    assert peer["high"] - peer["mean"] == pytest.approx(12.7062047 * 0.25 / 2, rel=1e-6)
    assert peer["mean"] - peer["low"] == pytest.approx(peer["high"] - peer["mean"])
    report = {
        "hardware_key": "K", "cpu_model": "M", "load_start": [1.0], "load_end": [1.0],
        "calibration_n": 300, "command": "python x", "dclr_fp32": {"avg": 78.87},
        "dclr_int8_builtin_calibration": {"avg": 78.9}, "draws": rows, "peer_skipped": None,
        "differences": found,
    }  # fmt: skip
    text = spread.markdown(report)
    assert "| 0 | 78.00 | 78.10 | 78.20 | 78.30 | 78.50 |" in text  # each variant, then the peer
    assert "- st_openvino_int8 - dclr_int8: **+0.38**" in text
    without_peer = {**report, "peer_skipped": "ImportError: x"}
    without_peer["differences"] = spread.differences(rows, peer=False)
    assert "ST OpenVINO" not in spread.markdown(without_peer).split("peer skipped")[0]
