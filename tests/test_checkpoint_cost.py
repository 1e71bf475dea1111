"""benchmarks/checkpoint_cost.py on a tiny BERT: both modes and the interpreter's share are
measured, and the table reads them."""

import json
import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import checkpoint_cost  # noqa: E402


def test_the_benchmark_measures_both_modes_and_writes_its_table(tmp_path, capsys):
    out = tmp_path / "cost.json"
    checkpoint_cost.main(["--tiny", "--rounds", "2", "--steps", "1", "--out", str(out),
                          "--dir", str(tmp_path)])  # fmt: skip
    report = json.loads(out.read_text())
    loop, background = report["summary"]["in the loop"], report["summary"]["in the background"]
    assert loop["blocked"] == loop["write"] > 0  # the loop waits for the whole write
    for run in report["runs"]["in the background"]:  # blocked: the copy, then what is left
        assert run["blocked"] == run["copy"] + run["left_wait"]
    assert background["write"] > 0 and loop["step"] > 0 and background["step"] > 0
    assert report["summary"]["interpreter"]["share"] > 0
    assert len(report["runs"]["in the loop"]) == 2 and report["model"].endswith("(--tiny)")
    table = out.with_suffix(".md").read_text()
    assert "| in the background |" in table and "a 2-layer BERT (--tiny)" in table
    assert table in capsys.readouterr().out
    assert {"git_commit", "loadavg_start", "loadavg_end"} <= set(report["provenance"])
    assert not list(tmp_path.glob("dclr-ckpt-*"))  # the checkpoints' folder is removed


def test_the_table_is_the_hand_arithmetic():
    """In the loop a 4 s write blocks; in the background 0.5 s (copy 0.3, wait 0.2) plus 6 steps
    each 0.05 s slower (0.25 s against 0.2 s alone): 0.5 + 0.3 = 0.80 s, 0.20x of 4 s."""
    loop = {"blocked": 4.0, "write": 4.0, "step": 0.2}
    back = {"blocked": 0.5, "write": 4.4, "copy": 0.3, "left_wait": 0.2, "step": 0.25}
    report = {"model": "BERT-base shape", "gigabytes": 1.3, "cpu": "c", "torch": "t",
              "load_start": [1.0], "load_end": [1.0], "rounds": 3, "steps": 6, "folder": "/tmp",
              "command": "python x",
              "summary": {"in the loop": loop, "in the background": back,
                          "interpreter": {"share": 0.9, "longest_pause": 0.002,
                                          "longest_pause_alone": 0.001}}}  # fmt: skip
    table = checkpoint_cost.markdown(report)
    assert "| in the loop | 4.00 | 4.00 | 0.00 | 0.00 | 0.200 | 1.00 |" in table
    assert "| in the background | 0.50 | 4.40 | 0.30 | 0.20 | 0.250 | 1.25 |" in table
    assert "6 steps' slow-down (+0.30 s) = 0.80 s (0.20x)" in table
    assert "keeps 90 % of its rate alone; its longest pause 2.0 ms (alone 1.0 ms)" in table
