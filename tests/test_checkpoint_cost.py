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
