"""metrics.jsonl: a line cut off by a full disk or a power loss is skipped, never a traceback."""

import json

import pytest

from dclr.training.tracking import METRICS_FILE, MetricsLog, read_metrics


def test_a_cut_off_last_line_is_skipped_on_read_and_dropped_on_resume(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.log(step, "train", {"loss": 1.0 / step})
    log.close()
    path = tmp_path / METRICS_FILE
    with path.open("a") as f:
        f.write('{"step": 4, "kind": "tr')  # what a write stopped mid-line leaves
    with pytest.warns(UserWarning, match=rf"{METRICS_FILE}:4: not a metrics record"):
        assert [r["step"] for r in read_metrics(tmp_path, "train")] == [1, 2, 3]
    with pytest.warns(UserWarning, match="cut off"):
        MetricsLog(tmp_path, resume_step=2, tensorboard=False).close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]  # the resumed run redoes 3
