"""benchmarks/view_draws.py: the host time of drawing ConSERT's views, per batch and pair."""

import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import view_draws  # noqa: E402


def test_every_batch_and_pair_is_timed_and_rendered(data_dir):
    report = view_draws.measure(str(data_dir), [4, 8], reps=2)
    assert [(r["batch"], r["views"]) for r in report["rows"]] == [
        (b, name) for b in (4, 8) for name in view_draws.PAIRS
    ]
    assert all(r["ms"] > 0 for r in report["rows"])
    report.update(cpu="cpu", load_average={"start": [1.0, 1.0, 1.0], "end": [2.0, 1.0, 1.0]})
    text = view_draws.render(report)
    assert "| 8 | token_shuffle + feature_cutoff 0.2 |" in text and "end 2.0/1.0/1.0" in text
