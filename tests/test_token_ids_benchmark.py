"""benchmarks/token_ids.py runs, finds the two paths' ids and scores equal, and writes both rows."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO_ROOT


def test_the_benchmark_compares_both_paths_on_equal_ids(tmp_path, data_dir):
    out = tmp_path / "token_ids.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "token_ids.py"), "--data-dir",
         str(data_dir), "--repeats", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["ids_equal"] and report["padded_batch_equal"]
    assert report["evaluation_sts_avg_equal"]
    assert report["sentences"] > 20_000
    assert set(report["median_seconds"]) == {
        "dclr batch_token_ids",
        "transformers call",
        "padded batch of 512, dclr batch_features",
        "padded batch of 512, transformers call",
        "evaluation, dclr batch_token_ids",
        "evaluation, transformers call",
    }
    assert "| transformers call |" in out.with_suffix(".md").read_text()
