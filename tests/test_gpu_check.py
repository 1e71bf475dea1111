"""benchmarks/gpu_check.sh: the GPU benchmark and readiness check runs end to end on a CPU
(`--device cpu --tiny`), and its trajectory check passes CPU against CPU and goes red on a planted
one-element bug (issues 27, 44)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import paper_run_cost  # noqa: E402


def test_the_trajectory_check_fails_outside_its_tolerance():
    cpu = [0.5, 0.25, 0.125]
    assert gpu_check.compare(cpu, cpu)["passed"]
    near = [x * (1 + 0.5 * gpu_check.RTOL) for x in cpu]
    assert gpu_check.compare(near, cpu)["passed"]
    off = [0.5, 0.25, 0.125 * (1 + 2 * gpu_check.RTOL) + gpu_check.ATOL]
    result = gpu_check.compare(off, cpu)
    assert not result["passed"] and result["worst_step"] == 3
    assert not gpu_check.compare(cpu[:2], cpu)["passed"]  # a step missing is a failure


def test_what_is_left_to_run_is_what_failed_was_cut_or_not_reached():
    report = {"parts_seconds": {"steps": 10.0, "objective": 2.0, "encode": 3.0},
              "failed": {"objective": "ValueError: x", "encode": "cut short (SIGTERM)"}}  # fmt: skip
    parts = ["steps", "objective", "encode", "evaluation"]
    assert gpu_check.unfinished(report, parts) == ["objective", "encode", "evaluation"]
    assert gpu_check.unfinished({"parts_seconds": {"steps": 1.0}}, ["steps"]) == []


def test_the_paper_runs_cost_is_the_hand_arithmetic():
    """DCLR's BERT-base recipe: 3 epochs of 1M sentences at batch 128 (the sampler drops the
    last partial batch), a dev evaluation every 150 steps and one at the end."""
    cell = {"batch": 128, "epochs": 3, "eval_steps": 150, "seconds_per_step": 0.05,
            "dev_eval_seconds": 0.4, "cache_seconds": 2.0, "cache_sentences": 4096}  # fmt: skip
    cost = paper_run_cost.paper_cost(cell)
    assert cost["steps"] == 3 * 7812 == 23436
    assert cost["evaluations"] == 156 + 1
    minutes = cost["minutes"]
    assert minutes["steps"] == round(23436 * 0.05 / 60, 1) == 19.5
    assert minutes["dev_eval"] == round(157 * 0.4 / 60, 1) == 1.0
    assert minutes["complementary_cache"] == round(2.0 * 1_000_000 / 4096 / 60, 1) == 8.1
    assert cost["total_minutes"] == round(23436 * 0.05 / 60 + 157 * 0.4 / 60 + 2e6 / 4096 / 60, 1)
    simcse = paper_run_cost.paper_cost({**cell, "batch": 64, "epochs": 1, "cache_seconds": 0.0})
    assert (simcse["steps"], simcse["evaluations"]) == (15625, 105)  # 15,625 = 104 x 150 + 25
    assert "checkpoints" not in minutes  # a report from before checkpoints were timed apart


def test_the_paper_runs_checkpoints_are_one_per_save_steps_and_one_at_the_end():
    """The recipes checkpoint at every dev evaluation (save_steps unset: eval_steps, 150): 156
    checkpoints in DCLR's 23,436 steps and one after the last; none with save_steps 0."""
    assert paper_run_cost.checkpoints_written(23436, 150) == 157
    assert paper_run_cost.checkpoints_written(30, 10) == 3  # the short run: steps 10, 20, 30
    assert paper_run_cost.checkpoints_written(31, 10) == 4
    assert paper_run_cost.checkpoints_written(30, 0) == 0
    cell = {"batch": 128, "epochs": 3, "eval_steps": 150, "checkpoint_every": 300,
            "seconds_per_step": 0.05, "dev_eval_seconds": 0.4, "cache_seconds": 0.0,
            "cache_sentences": 4096, "checkpoint_seconds": 2.5}  # fmt: skip
    cost = paper_run_cost.paper_cost(cell)
    assert cost["checkpoints"] == 79  # 78 x 300 = 23,400, then one after step 23,436
    assert cost["minutes"]["checkpoints"] == round(79 * 2.5 / 60, 1) == 3.3
    assert cost["total_minutes"] == round(23436 * 0.05 / 60 + 157 * 0.4 / 60 + 79 * 2.5 / 60, 1)


def test_checkpoints_in_the_background_cost_the_loop_their_copy_and_the_last_write():
    """Hand arithmetic: 157 checkpoints of a 4 s write, 150 steps of 65 ms (9.75 s) apart: the
    steps cover every write but the last; with a 12 s write, 2.25 s of each is waited for."""
    cost = paper_run_cost.checkpoint_cost
    assert cost(157, 4.0, 0.3, 9.75, background=False) == 157 * 4.0
    assert cost(157, 4.0, 0.3, 9.75, background=True) == pytest.approx(157 * 0.3 + 4.0)
    assert cost(157, 12.0, 0.3, 9.75, background=True) == pytest.approx(
        157 * 0.3 + 156 * 2.25 + 12.0
    )
    assert cost(0, 4.0, 0.3, 9.75, background=True) == 0.0
    cell = {"batch": 128, "epochs": 3, "eval_steps": 150, "checkpoint_every": 150,
            "seconds_per_step": 0.065, "dev_eval_seconds": 0.0, "cache_seconds": 0.0,
            "cache_sentences": 4096, "checkpoint_seconds": 4.0,
            "checkpoint_capture_seconds": 0.3, "checkpoint_background": True}  # fmt: skip
    projected = paper_run_cost.paper_cost(cell)
    assert projected["minutes"]["checkpoints"] == round((157 * 0.3 + 4.0) / 60, 1) == 0.9
    in_loop = paper_run_cost.paper_cost({**cell, "checkpoint_background": False})
    assert in_loop["minutes"]["checkpoints"] == round(157 * 4.0 / 60, 1) == 10.5


def test_a_part_that_fails_is_reported_the_rest_run_and_each_is_saved(tmp_path):
    """A run cut short by the time limit keeps what it measured: the report is on disk after
    every part, and one part's exception does not stop the others."""
    path = tmp_path / "check.json"
    seen_on_disk = {}

    def second(saved):
        seen_on_disk.update(json.loads(path.read_text()))
        raise RuntimeError("no kernel image")

    report = {"device": "cuda", "tiny": False, "torch": "x", "gpu": "g", "matmul_tflops": None}
    parts = {"encode": lambda saved: [{"engine": "dclr", "precision": "fp32", "status": "ok",
                                 "sentences_per_s": 10.0}],
             "evaluation": second,
             "trajectory": lambda saved: gpu_check.compare([0.5], [0.5])}  # fmt: skip
    gpu_check.run_parts(parts, report, path, start=0.0)
    assert seen_on_disk["encode"][0]["sentences_per_s"] == 10.0  # saved before part 2 ran
    assert seen_on_disk["parts_seconds"]["evaluation"] is None  # started, not finished
    assert report["failed"] == {"evaluation": "RuntimeError: no kernel image"}
    assert report["trajectory"]["passed"] and "evaluation" not in report
    saved = json.loads(path.read_text())
    assert saved["failed"] == report["failed"] and set(saved["parts_seconds"]) == set(parts)
    shown = path.with_suffix(".md").read_text()
    assert "**evaluation failed**: RuntimeError: no kernel image" in shown
    assert "## Training steps" in shown and "not measured (not reached)." in shown
    assert "| 7-task STS evaluation <= 2 s | — s |" in shown
    assert "| trajectory against the CPU | passed |" in shown


@pytest.mark.parametrize("inside_training", [False, True], ids=["between", "in-training"])
def test_sigterm_ends_the_run_at_the_part_it_cuts_keeping_what_was_measured(
    tmp_path, monkeypatch, inside_training
):
    """The time limit's SIGTERM (gpu_check.sh's `timeout`, the device's) stops the check: the part
    it cuts is recorded as cut short with the cells it finished, later parts are not started, and
    the report is saved. In a training run the loop turns SIGTERM into `TrainingStopped`, which
    the step cells used to record as one cell's failure and go on, past the limit."""
    from dclr.training.runfolder import TrainingStopped

    path = tmp_path / "check.json"
    report = {"device": "cuda", "tiny": False, "torch": "x", "gpu": "g", "matmul_tflops": None}
    cells = report.setdefault("steps", [])

    on_disk_at_the_cut = {}

    def cell(model, method, batch, precision, out, timing):
        if method == "dclr":  # the second cell
            on_disk_at_the_cut.update(json.loads(path.read_text()))  # what a SIGKILL would leave
            if inside_training:
                raise TrainingStopped(3, "ckpt", "run")
            os.kill(os.getpid(), signal.SIGTERM)
        return {"seconds_per_step": 0.01}

    monkeypatch.setattr(gpu_check, "step_cell", cell)
    previous = signal.signal(signal.SIGTERM, gpu_check.on_sigterm)
    try:
        parts = {"steps": lambda saved: gpu_check.steps({"m": "m"}, tmp_path, True, None, cells,
                                                        saved),
                 "trajectory": lambda saved: pytest.fail("a part after the cut ran")}  # fmt: skip
        gpu_check.run_parts(parts, report, path, start=0.0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [r["method"] for r in on_disk_at_the_cut["steps"]] == ["simcse"]  # saved per cell
    saved = json.loads(path.read_text())
    assert saved["failed"] == {"steps": "cut short (SIGTERM: the time limit?)"}
    assert [(r["method"], r["status"]) for r in saved["steps"]] == [("simcse", "ok")]
    assert "trajectory" not in saved["parts_seconds"]
    assert "**steps failed**: cut short" in path.with_suffix(".md").read_text()


def test_the_time_limit_cuts_the_run_and_the_report_says_where(tmp_path, data_dir):
    """gpu_check.sh's `timeout` sends SIGTERM at the limit: the check stops there (not at the end
    of every later part, past the device's limit), with the finished parts and the cut one in
    its report."""
    out = tmp_path / "check"
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny",
         "--out", str(out), "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "DCLR_PYTHON": sys.executable, "DCLR_GPU_CHECK_LIMIT": "25"},
    )  # fmt: skip
    assert done.returncode == 124, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )  # timeout's "timed out"
    assert "cut short" in done.stdout  # the report printed on the way out
    report = json.loads((tmp_path / "check-tiny-cpu.json").read_text())
    (cut,) = report["failed"]  # the one part running at the limit
    assert report["failed"][cut] == "cut short (SIGTERM: the time limit?)"
    assert list(report["parts_seconds"])[-1] == cut  # nothing started after it
    assert "compiled_steps" not in report["parts_seconds"]
    left = gpu_check.PARTS[gpu_check.PARTS.index(cut) :]  # the cut part and every later one
    assert f"bash scripts/device_gpu_check.sh --only {','.join(left)}" in done.stdout


@pytest.fixture(scope="module")
def tiny_check_model(tmp_path_factory):
    return gpu_check.tiny_model(tmp_path_factory.mktemp("gpu-check-model"))


def test_the_trajectory_passes_cpu_against_cpu_and_is_not_degenerate(
    tiny_check_model, tmp_path, data_dir
):
    """Issue 44: with both views equal the loss fell to ~1e-6 and its relative difference was
    rounding. The check's run has views that differ (a seeded token cutoff): the losses stay far
    from 0, and two runs of the same code agree within the bound."""
    first = gpu_check.trajectory(tiny_check_model, tmp_path / "a")
    second = gpu_check.trajectory(tiny_check_model, tmp_path / "b")
    assert len(first) == gpu_check.TRAJECTORY_STEPS
    assert min(first) > 0.1  # not degenerate: 1e5 x the tolerance's absolute floor
    assert gpu_check.compare(second, first)["passed"]


def test_the_trajectory_is_red_on_a_planted_one_element_bug(
    tiny_check_model, tmp_path, monkeypatch, data_dir
):
    """The bug a wrong CUDA kernel or index could make: one entry of the batch's cosine matrix
    off by 0.1 (2 in logits at tau 0.05). CPU against CPU-with-the-bug: red, by > 10x."""
    import dclr.losses.infonce as infonce

    clean = gpu_check.trajectory(tiny_check_model, tmp_path / "clean")
    real = infonce.cosine_matrix

    def planted(a, b):
        out = real(a, b)
        bump = torch.zeros_like(out)
        bump[0, 1] = 0.1
        return out + bump

    monkeypatch.setattr(infonce, "cosine_matrix", planted)  # what info_nce calls
    buggy = gpu_check.trajectory(tiny_check_model, tmp_path / "buggy")
    result = gpu_check.compare(buggy, clean)
    assert not result["passed"], result
    assert result["worst_share_of_bound"] > 10


def test_the_script_runs_the_python_it_is_given_not_the_one_on_path(tmp_path):
    """Issue 38 item 5: the script ran `python` from PATH, so its test failed unless the venv
    was activated. A `python` and `python3` that fail come first on PATH here; $DCLR_PYTHON
    (this interpreter) is the one run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "python3"):
        shim = bin_dir / name
        shim.write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 3\n")
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "DCLR_PYTHON": sys.executable, "DCLR_VENV": str(tmp_path / "no-venv")}  # fmt: skip
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--help"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--tiny" in done.stdout and "the wrong python" not in done.stderr


def test_a_python_without_the_serve_extra_is_named_before_the_run(tmp_path):
    """The quickstart's venv has no serve extra: the script says so first, with the install
    command, instead of the serving part failing minutes later. Here: this interpreter with its
    site-packages off (-S), so httpx, uvicorn and fastapi are not found."""
    shim = tmp_path / "python-without-site"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "DCLR_PYTHON": str(shim)}
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--help"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert f"note: {shim} lacks the serving part's packages" in done.stderr
    assert f"{shim} -m pip install -e '.[serve]' httpx" in done.stderr
    fine = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--help"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "DCLR_PYTHON": sys.executable},
    )  # fmt: skip
    assert fine.returncode == 0 and "lacks the serving part's packages" not in fine.stderr


def test_the_encode_rows_time_distinct_sentences(data_dir, monkeypatch):
    """dclr's encode encodes each distinct sentence once and sentence-transformers' every one, so
    the rate of both is counted on distinct sentences (the first GPU run cycled the 29,511 STS
    sentences to 100,000 and credited dclr 3.39x the work it did)."""
    monkeypatch.setenv("DCLR_DATA_DIR", str(data_dir))
    from dclr.data.corpus import load_corpus

    every = gpu_check.corpus_sentences(10**9)
    assert len(every) == len(set(every)) == len(set(load_corpus("sts", None)))
    assert gpu_check.corpus_sentences(100) == every[:100]


def test_the_harness_runs_on_a_cpu_with_a_tiny_model(tmp_path, data_dir):
    out = tmp_path / "check"
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny",
         "--out", str(out), "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "DCLR_PYTHON": sys.executable},  # the tests' own interpreter
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "check-tiny-cpu.json").read_text())
    cells = {(r["method"], r["batch"], r["precision"]): r for r in report["steps"]}
    assert len(cells) == 12  # simcse, dclr, st-mnrl x batch 64, 512 x fp32, bf16
    assert report["timing"] == list(gpu_check.TINY_TIMING)  # fewer steps than a GPU's (10, 20)
    assert "steady state: 6 steps after 3" in (tmp_path / "check-tiny-cpu.md").read_text()
    for method in ("simcse", "dclr", "st-mnrl"):
        for batch in (64, 512):
            assert cells[(method, batch, "fp32")]["status"] == "ok"
            assert cells[(method, batch, "fp32")]["ms_per_step"] > 0
            assert cells[(method, batch, "bf16")]["status"] == "not run (CPU runs fp32)"
    assert cells[("dclr", 64, "fp32")]["model_tflops"] > 0
    encode = {(r["engine"], r["precision"]): r for r in report["encode"]}
    assert encode[("dclr", "fp32")]["sentences_per_s"] > 0
    assert (
        encode[("dclr", "fp32")]["sentences"]
        == encode[("sentence-transformers", "fp32")]["sentences"]
        == 2000
    )
    assert encode[("sentence-transformers", "fp32")]["min_cosine_to_dclr_fp32"] > 0.9999
    assert report["evaluation"][0]["seconds"] > 0
    objective = {r["piece"]: r["ms"] for r in report["objective"]}
    assert set(objective) == set(gpu_check.OBJECTIVE_PIECES) and min(objective.values()) > 0
    fused = next(r for r in report["objective"] if "compiled" in r["piece"])
    assert fused["max_abs_diff_to_eager"] < 1e-5  # torch.compile computed the same ascent
    serving = {r["scenario"]: r for r in report["serving"]}
    assert set(serving) == {"32x1", "8x64"}
    assert all(r["errors"] == 0 and r["share_of_bulk"] > 0 for r in serving.values())
    assert set(report["long_run"]["after"]) >= {"STS12", "SICKRelatedness", "avg"}
    assert report["trajectory"]["passed"] and report["trajectory"]["steps"] == 20
    assert "failed" not in report and all(v is not None for v in report["parts_seconds"].values())
    # the parts a target reads first (the compiled step among them), then the rest
    assert list(report["parts_seconds"]) == [
        "steps",
        "objective",
        "encode",
        "evaluation",
        "trajectory",
        "host_syncs",
        "compiled_steps",
        "paper_runs",
        "serving",
        "resume",
        "long_run",
    ]
    assert report["resume"]["passed"] and report["resume"]["max_abs_difference"] == 0.0
    syncs = {r["method"]: r for r in report["host_syncs"]}
    assert set(syncs) == {"simcse", "dclr", gpu_check.TRANSFORMERS_MASK}
    # with transformers' own mask its check reads once per forward (on a GPU the prepared mask
    # takes that read away; on a CPU `prepared_mask: auto` leaves it to transformers)
    mask_check = syncs[gpu_check.TRANSFORMERS_MASK]["where"]
    assert any(place.startswith("transformers/") for place in mask_check)
    assert all(r["detector"] == "cpu-calls" and r["ordinary_steps"] == 10 for r in syncs.values())
    # the CPU path reads the loss every step (its NaN stop): seen, and the table says why
    assert all(r["ours_in_ordinary_steps"] >= 10 for r in syncs.values())
    assert "On a CPU nothing waits" in (tmp_path / "check-tiny-cpu.md").read_text()
    compiled = {(r["method"], r["batch"]): r for r in report["compiled_steps"]}
    assert list(compiled) == [("simcse", 64), ("dclr", 64), ("simcse", 512), ("dclr", 512)]
    assert all(r["status"] == "ok" and r["ms_per_step"] > 0 for r in compiled.values())
    assert all(r["compile"] == "reduce-overhead" for r in compiled.values())
    # compiled for real: the backbone as one graph per shape, no graph break
    assert compiled[("dclr", 512)]["graphs_compiled"] >= 2
    assert all(r["graph_breaks"] == 0 for r in compiled.values())
    assert "graph breaks." in (tmp_path / "check-tiny-cpu.md").read_text()
    paper = {r["method"]: r for r in report["paper_runs"]}
    assert (paper["simcse"]["batch"], paper["dclr"]["batch"]) == (64, 128)  # the recipes'
    assert paper["dclr"]["projection"]["steps"] == 23436 and paper["dclr"]["evaluations"] == 3
    assert paper["dclr"]["cache_seconds"] > 0 and paper["simcse"]["cache_seconds"] == 0
    assert paper["dclr"]["checkpoint_seconds"] > 0 and paper["dclr"]["checkpoint_every"] == 150
    assert paper["dclr"]["checkpoint_background"] is True  # as a GPU writes them by default
    assert paper["dclr"]["checkpoint_capture_seconds"] > 0
    assert paper["dclr"]["projection"]["checkpoints"] == 157  # the recipe's, every dev eval
    assert paper["simcse"]["projection"]["total_minutes"] > 0
    assert "SimCSE then DCLR, one device:" in (tmp_path / "check-tiny-cpu.md").read_text()
    assert "## Trajectory against the CPU" in (tmp_path / "check-tiny-cpu.md").read_text()


def test_only_the_named_parts_run_and_the_report_says_so(tmp_path, data_dir):
    """`--only`: a later GPU runs what a run cut at the time limit did not reach."""
    out = tmp_path / "check"
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu",
               "--tiny", "--out", str(out), "--data-dir", str(data_dir)]  # fmt: skip
    done = subprocess.run([*command, "--only", "objective"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "check-tiny-cpu-only.json").read_text())
    assert report["only"] == ["objective"] and list(report["parts_seconds"]) == ["objective"]
    assert report["objective"] and "steps" not in report and "failed" not in report
    assert report["provenance"]["dclr"] and "loadavg_end" in report["provenance"]
    assert not (tmp_path / "check-tiny-cpu.json").exists()  # a full run's report is not touched
    table = (tmp_path / "check-tiny-cpu-only.md").read_text()
    assert "Only these parts were run (--only): objective." in table
    assert "not run (--only)." in table and "not reached" not in table
    wrong = subprocess.run([*command, "--only", "objective,stpes"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "--only: stpes; the parts: steps, objective" in wrong.stderr


def test_the_resume_check_passes_and_is_red_on_a_stale_background_copy(
    tiny_check_model, tmp_path, monkeypatch, data_dir
):
    """Resumed from checkpoints written in the background, steps 7 and 8 are the unpaused run's
    (bit for bit on the CPU); a host copy that misses one update of one weight (a copy taken
    from a stale buffer) turns the check red."""
    import dclr.training.loop as loop_module

    monkeypatch.setenv("DCLR_DATA_DIR", str(data_dir))
    good = gpu_check.resume_check(tiny_check_model, tmp_path / "good")
    assert good["passed"] and good["max_abs_difference"] == 0.0
    assert good["checkpoints_at_the_pause"] == ["step-00000004", "step-00000006"]
    real = loop_module.host_copy

    def stale_copy(content):
        copied = real(content)
        name = next(k for k in copied.model if k.endswith("layer.0.attention.self.query.weight"))
        copied.model[name].view(-1)[0] += 0.5  # one element of the host copy off
        return copied

    monkeypatch.setattr(loop_module, "host_copy", stale_copy)
    bad = gpu_check.resume_check(tiny_check_model, tmp_path / "bad")
    assert not bad["passed"], bad


def test_a_step_cell_times_its_steps_and_exports_nothing(tmp_path):
    """A step cell is a timing run: its metrics are written, its model is not (final/ of the
    BERT-base shape cost ~3 s a cell, for nothing)."""
    model = gpu_check.tiny_model(tmp_path / "tiny")
    row = gpu_check.step_cell(model, "simcse", 8, "fp32", tmp_path / "cell", timing=(1, 2))
    assert row["seconds_per_step"] > 0
    assert (tmp_path / "cell" / "metrics.jsonl").exists()
    assert not (tmp_path / "cell" / "final").exists()
    # model FLOPs: 6 (forward 2, backward 4) x linear weights x the tokens of both views. The
    # tiny BERT (64 wide, 2 layers, 128 inner), its pooler and the MLP head, by hand:
    weights = 2 * (4 * 64 * 64 + 2 * 64 * 128) + 64 * 64 + 64 * 64
    assert row["flops_per_step"] == 6 * weights * row["tokens_per_step"]
    from transformers import AutoTokenizer

    from dclr.data.corpus import load_corpus

    first = list(load_corpus("sts", None))[:256]  # the sample a step's tokens are counted on
    ids = AutoTokenizer.from_pretrained(model)(first, truncation=True, max_length=32)["input_ids"]
    assert row["tokens_per_step"] == int(8 * 2 * sum(map(len, ids)) / len(ids))  # 2 views


def test_the_steady_step_time_leaves_the_warm_up_out(tmp_path):
    """`train_seconds` logged at the last timed step minus at the end of the warm-up, over the
    timed steps: 3 warm-up steps took 9 s (compiling), the 6 after them 0.2 s each."""
    records = [(3, 9.0), (6, 9.6), (9, 10.2)]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "kind": "train", "train_seconds": x}) + "\n" for s, x in records
        )
    )
    assert paper_run_cost.steady_step_seconds(tmp_path, 3, 6) == pytest.approx(0.2)


def test_a_step_rows_rates_are_the_hand_arithmetic():
    """20 ms a step of batch 64 and 6e12 model FLOPs: 3,200 sentences/s, 300 TFLOP/s, half of a
    600 TFLOP/s matmul rate."""
    row = {"batch": 64, "seconds_per_step": 0.02, "flops_per_step": 6e12}
    done = gpu_check.finish_row(dict(row), 600.0)
    assert (done["ms_per_step"], done["sentences_per_s"]) == (20.0, 3200.0)
    assert (done["model_tflops"], done["share_of_matmul"]) == (300.0, 0.5)
    assert "share_of_matmul" not in gpu_check.finish_row(dict(row), None)  # a CPU: no rate


def test_the_targets_read_the_right_cells_the_right_way_up():
    """Issue 44's targets off a GPU report, by hand: the BERT-base shape's bf16 cells (not fp32,
    not MiniLM), ratios as the targets state them (MNRL / SimCSE, DCLR / SimCSE, fp16 / fp32,
    dclr / sentence-transformers fp32)."""

    def cell(model, method, batch, precision, ms, share=None):
        return {"model": model, "method": method, "batch": batch, "precision": precision,
                "status": "ok", "ms_per_step": ms, "share_of_matmul": share}  # fmt: skip

    base = "bert-base-shape"
    steps = [cell(base, "simcse", 64, "bf16", 16.0), cell(base, "dclr", 64, "bf16", 17.6),
             cell(base, "st-mnrl", 64, "bf16", 64.0), cell(base, "simcse", 512, "bf16", 100.0, 0.45),
             cell(base, "dclr", 512, "bf16", 105.0), cell(base, gpu_check.TRANSFORMERS_MASK, 64,
                                                          "bf16", 19.0),
             cell(base, "simcse", 64, "fp32", 40.0), cell(base, "dclr", 64, "fp32", 50.0),
             cell(base, "st-mnrl", 64, "fp32", 80.0), cell(base, "simcse", 512, "fp32", 300, 0.15),
             cell(base, "dclr", 512, "fp32", 330.0), cell("minilm", "simcse", 64, "bf16", 5.0),
             cell("minilm", "st-mnrl", 64, "bf16", 7.0)]  # fmt: skip
    compiled = [cell(base, "simcse", 64, "bf16", 8.0), cell(base, "dclr", 64, "bf16", 8.8),
                cell(base, "simcse", 512, "bf16", 60.0, 0.75),
                cell(base, "dclr", 512, "bf16", 66.0)]  # fmt: skip
    encode = [{"engine": engine, "precision": p, "sentences_per_s": rate}
              for engine, p, rate in [("dclr", "fp32", 3000.0), ("dclr", "fp16", 6000.0),
                                      ("dclr", "bf16", 4500.0),
                                      ("sentence-transformers", "fp32", 750.0),
                                      ("sentence-transformers", "fp16", 1500.0),
                                      ("sentence-transformers", "bf16", 1000.0)]]  # fmt: skip
    report = {"device": "cuda", "tiny": False, "steps": steps, "compiled_steps": compiled,
              "encode": encode, "evaluation": [{"precision": "fp32", "seconds": 1.5},
                                               {"precision": "fp16", "seconds": 0.9}],
              "trajectory": {"passed": False}, "resume": {"passed": True}}  # fmt: skip

    def verdicts(report: dict) -> dict[str, str]:
        return {name: verdict for name, _, verdict in gpu_check.targets(report)}

    found = {name: value for name, value, _ in gpu_check.targets(report)}
    judged = verdicts(report)
    assert found["bert-base-shape bf16 batch 64 SimCSE step <= 20 ms"] == (
        "16.0 ms eager, 8.0 ms compiled"
    )
    assert found["... >= 3x sentence-transformers MNRL"] == "4.00 eager, 8.00 compiled"
    assert found["batch 512 model FLOPs >= 40 % of the bf16 matmul"] == "45% eager, 75% compiled"
    assert found["DCLR / SimCSE <= 1.10 (batch 64, 512; compiled 64, 512)"] == (
        "1.10, 1.05; 1.10, 1.10"
    )
    assert found["7-task STS evaluation <= 2 s"] == "1.5 s"
    assert found["fp16, bf16 encode >= 1.5x fp32"] == "2.00, 1.50"
    assert found["fp32 encode >= 3.5x sentence-transformers"] == "4.00"
    assert found["trajectory against the CPU"] == "FAILED"
    assert found["resumed from background checkpoints"] == "passed"
    assert found["... its step with transformers' own mask (prepared_mask off; GPU only)"] == (
        "19.0 ms, against 16.0 ms prepared"
    )
    assert list(judged.values()) == [
        "met (eager)", "met (eager)", "met (eager)", "met (eager)",  # 1.10 at 64 is the bound
        "met", "met", "met", "missed", "met", "—", "(no target)",
    ]  # fmt: skip
    # the eager step misses where the compiled one meets; a target measured on neither side
    slow = [{**c, "ms_per_step": 25.0} if c["method"] == "simcse" and c["batch"] == 64
            else {**c, "ms_per_step": 150.0} if c["method"] == "dclr" and c["batch"] == 512
            else c for c in steps]  # fmt: skip
    slower = {"steps": slow, "compiled_steps": compiled[:1], "encode": encode[:2]}
    judged = verdicts({**report, **slower})
    assert judged["bert-base-shape bf16 batch 64 SimCSE step <= 20 ms"] == "met (compiled)"
    assert judged["... >= 3x sentence-transformers MNRL"] == "met (compiled)"  # 64 / 8: 8x
    assert judged["DCLR / SimCSE <= 1.10 (batch 64, 512; compiled 64, 512)"] == "missed"  # 1.5
    assert judged["batch 512 model FLOPs >= 40 % of the bf16 matmul"] == "met"  # none compiled
    assert judged["fp16, bf16 encode >= 1.5x fp32"] == "—"  # bf16 not measured
    assert judged["fp32 encode >= 3.5x sentence-transformers"] == "—"
    cpu = gpu_check.targets({**report, "device": "cpu"})
    assert {verdict for name, _, verdict in cpu if "trajectory" not in name and "resumed" not in name
            and "own mask" not in name} == {"— (a CPU run)"}  # fmt: skip
    synced = {**report, "host_syncs": [{"method": "simcse", "ours_in_ordinary_steps": 0,
                                        "syncs_in_ordinary_steps": 2, "ordinary_steps": 9}]}  # fmt: skip
    sync = "no host sync in an ordinary step (eager, batch 64)"
    assert verdicts(synced)[sync] == "met"
    synced["host_syncs"][0]["ours_in_ordinary_steps"] = 1
    assert verdicts(synced)[sync] == "missed"
