"""benchmarks/thread_threshold_repeats.py: the per-size spread across runs and the sizes whose
runs fall on both sides of the criterion."""

import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import thread_threshold_repeats as repeats  # noqa: E402


def run(*speedups: float) -> list[dict]:
    return [{"texts": 2**i, "tokens": 12 * 2**i, "speedup_2t": s} for i, s in enumerate(speedups)]


def test_the_spread_and_the_sizes_on_both_sides():
    runs = [run(1.31, 1.43, 1.5), run(1.35, 1.30, 1.6), run(1.29, 1.40, 1.55)]
    sizes = repeats.summary(runs)
    assert [s["speedups"] for s in sizes] == [
        [1.31, 1.35, 1.29],
        [1.43, 1.3, 1.4],
        [1.5, 1.6, 1.55],
    ]
    assert [s["range"] for s in sizes] == [0.06, 0.13, 0.1]
    assert sizes[2]["mean"] == 1.55
    assert sizes[0]["mean"] == 1.317  # the mean of 1.31, 1.35, 1.29 (their median is 1.31)
    report = {"cpu": "AMD EPYC", "cpu_model": "family 25 model 17", "torch": "2.13.0",
              "kernel": "onednn", "dclr": "src @ abc", "load_start": [0.1], "load_end": [0.2],
              "seconds": 10.0, "thresholds": [24, 48, 24], "sizes": sizes}  # fmt: skip
    text = repeats.markdown(report)
    assert "Thresholds (tokens; two threads from there): [24, 48, 24]." in text
    assert "both sides of 1.33×: 12, 24." in text
