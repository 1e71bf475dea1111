"""benchmarks/step_ops.py: per-step aten calls through dclr's loop; the ascent's calls are
counted apart, SimCSE has none, and the closed-form ascent makes fewer than autograd's."""

import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import step_ops  # noqa: E402


def test_the_ascent_is_counted_apart_and_the_closed_form_makes_fewer_calls():
    rows = step_ops.measure(layers=1)
    assert rows["simcse"]["ascent"] == 0
    auto, closed = rows["dclr autograd"], rows["dclr closed_form"]
    assert 0 < closed["ascent"] < auto["ascent"]
    # the rest of the DCLR step is the same either way
    assert auto["total"] - auto["ascent"] == closed["total"] - closed["ascent"]
    assert rows["simcse"]["total"] < closed["total"]
    text = step_ops.markdown({"layers": 1, "torch": "x", "rows": rows})
    assert "| dclr closed_form |" in text
