"""scripts/host_syncs.py: any recipe's host syncs per ordinary step, from the command line (issue
44); with --as-gpu, SimCSE makes none of dclr's own, and the JSON holds what it printed."""

import json
import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import host_syncs  # noqa: E402


def test_simcse_as_a_gpu_runs_it_reads_nothing_of_dclrs_own(
    model_dir, corpus_file, tmp_path, capsys
):
    out = tmp_path / "syncs.json"
    sets = ["--set", f"model={model_dir}", "--set", f"corpus={corpus_file}",
            "--set", "batch_size=8"]  # fmt: skip
    assert host_syncs.main([*sets, "--steps", "7", "--log-steps", "3", "--as-gpu",
                            "--json", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert (report["method"], report["device"], report["as_gpu"]) == ("simcse", "cpu", True)
    assert report["ordinary_steps"] == 4 and report["ours_in_ordinary_steps"] == 0
    assert "simcse on cpu (cpu-calls):" in capsys.readouterr().out
    # the CPU path as it is reads the loss every step (its NaN stop): counted without --as-gpu
    assert host_syncs.main([*sets, "--steps", "7", "--log-steps", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["ours_in_ordinary_steps"] >= 4
    import dclr.training.loop as loop
    from dclr.training.finite import FiniteGuard

    assert loop.FiniteGuard is FiniteGuard  # --as-gpu put the loop's guard back


def test_bad_step_counts_and_options_are_refused(capsys):
    with pytest.raises(SystemExit):
        host_syncs.main(["--set", "model=m", "--steps", "2"])
    assert "--steps must be >= 3" in capsys.readouterr().err
    assert host_syncs.main(["--set", "nonsense_option=1"]) == 2
    assert "error:" in capsys.readouterr().err
