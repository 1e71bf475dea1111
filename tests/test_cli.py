"""The command line on a tiny model: eval's JSON contract, encode, data check, clear errors."""

import json
import sys

import numpy as np
import pytest
import yaml
from helpers import REPO_ROOT
from typer.testing import CliRunner

from dclr.cli.main import app

SEVEN = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


# `--no-eval` as overrides: dev evaluations and the before/after tables off
NO_EVAL_SETS = ("--set", "run.eval_steps=0", "--set", "run.test_eval=false")


def tiny_train(model_dir, corpus, out, steps: int, *extra: str) -> list[str]:
    """`dclr train` of the tiny model on `corpus` into `out`: mean pooling, batch 4, `steps`."""
    return ["train", "--model", str(model_dir), "--set", f"data.corpus={corpus}",
            "--set", "model.pooler=mean", "--set", "model.mlp_head=false",
            "--set", "optimisation.batch_size=4", "--max-steps", str(steps), "-o", str(out),
            *extra]  # fmt: skip


def test_eval_writes_the_contract_json(model_dir, data_dir, tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "eval",
            str(model_dir),
            "--data-dir",
            str(data_dir),
            "--pooler",
            "mean",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    for key in [*SEVEN, "avg", "alignment", "uniformity"]:
        assert isinstance(scores[key], float), key
    assert scores["avg"] == pytest.approx(np.mean([scores[t] for t in SEVEN]))
    assert "STSBenchmark" in result.output


def test_eval_dev_mode(model_dir, data_dir, tmp_path):
    out = tmp_path / "d.json"
    result = runner.invoke(
        app,
        [
            "eval",
            str(model_dir),
            "--data-dir",
            str(data_dir),
            "--pooler",
            "cls_before_pooler",
            "--mode",
            "dev",
            "--sts-text",
            "senteval",
            "--released-geometry",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert set(SEVEN[5:]) <= set(written)
    assert written["sts_text"] == "senteval"
    assert {"alignment_released", "uniformity_released"} <= set(written)
    said = " ".join(result.output.split())
    assert "released estimator" in said and "senteval text" in said
    bad = runner.invoke(app, ["eval", str(model_dir), "--sts-text", "lower"])
    assert bad.exit_code == 2 and "raw or senteval" in bad.output


def test_eval_unknown_pooler_is_a_clear_error(model_dir, data_dir):
    result = runner.invoke(
        app, ["eval", str(model_dir), "--data-dir", str(data_dir), "--pooler", "max"]
    )
    assert result.exit_code == 2
    assert "unknown pooler" in result.output
    typo = runner.invoke(app, ["eval", str(model_dir), "--data-dir", str(data_dir), "--pooler",
                               "maen"])  # fmt: skip
    assert typo.exit_code == 2 and "did you mean 'mean'?" in " ".join(typo.output.split())


def test_eval_missing_data_says_how_to_get_it(model_dir, tmp_path):
    result = runner.invoke(app, ["eval", str(model_dir), "--data-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "dclr data download" in result.output


def test_eval_not_a_model(tmp_path, data_dir):
    result = runner.invoke(
        app, ["eval", str(tmp_path), "--data-dir", str(data_dir), "--pooler", "mean"]
    )
    assert result.exit_code == 2
    assert "config.json" in result.output


def test_encode_writes_npy(model_dir, tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("a man plays guitar\n\nthe cat sleeps\nthe cat sleeps\n")
    out = tmp_path / "v.npy"
    result = runner.invoke(
        app, ["encode", str(model_dir), str(src), str(out), "--pooler", "mean", "--normalize"]
    )
    assert result.exit_code == 0, result.output
    vectors = np.load(out)
    # One row per line, as sentence-transformers returns one vector per input: the blank line
    # is row 1 (the empty string's vector), and the repeated line gives the same vector twice.
    assert vectors.shape == (4, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors[2], vectors[3])
    assert "1 blank line(s) encoded as '' (line 2)" in result.output


def test_encode_keeps_the_previous_file_when_its_write_fails(model_dir, tmp_path, monkeypatch):
    """The vectors go to a temp name renamed when complete: a full disk mid-write leaves the
    previous .npy as it was and names the problem; an output under a file is named before the
    model loads; a name without .npy is written (and reported) as np.save names it."""
    import errno

    src = tmp_path / "s.txt"
    src.write_text("a man plays guitar\nthe cat sleeps\n")
    out = tmp_path / "v.npy"
    args = ["--pooler", "mean"]
    assert runner.invoke(app, ["encode", str(model_dir), str(src), str(out), *args]).exit_code == 0
    before = out.read_bytes()
    real_save = np.save

    def full_disk(file, array, *a, **k):
        real_save(file, array[:1], *a, **k)  # part of it written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full_disk)
    failed = runner.invoke(app, ["encode", str(model_dir), str(src), str(out), *args])
    monkeypatch.setattr(np, "save", real_save)
    assert failed.exit_code == 2 and "disk is full" in failed.output, failed.output
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt", "v.npy"]  # no temp left
    under = runner.invoke(app, ["encode", str(model_dir), str(src), str(src / "v.npy"), *args])
    assert under.exit_code == 2 and "is a file, not a folder" in under.output
    bare = runner.invoke(
        app, ["encode", str(model_dir), str(src), str(tmp_path / "w"), *args, "--skip-blank"]
    )
    assert bare.exit_code == 0 and np.load(tmp_path / "w.npy").shape == (2, 32)
    assert str(tmp_path / "w.npy") in " ".join(bare.output.split())
    assert (tmp_path / "w.lines.txt").read_text() == "1\n2\n"  # named as before


def test_encode_reads_a_table_column_as_encode_bulk_does(model_dir, tmp_path):
    """Issue 38 item 1: `dclr encode` read text files only; it now shares the readers of
    `encode-bulk`, `index build` and training corpora (--column), row i = record i."""
    txt = tmp_path / "s.txt"
    txt.write_text("a man plays guitar\n\nthe cat sleeps\n")
    csv = tmp_path / "s.csv"
    csv.write_text('id,text\n7,a man plays guitar\n8,\n9,"the cat sleeps"\n')
    base = ["--pooler", "mean", "--normalize"]
    plain = runner.invoke(app, ["encode", str(model_dir), str(txt), str(tmp_path / "t.npy"), *base])
    assert plain.exit_code == 0, plain.output
    table = runner.invoke(app, ["encode", str(model_dir), str(csv), str(tmp_path / "c.npy"),
                                "--column", "text", *base])  # fmt: skip
    assert table.exit_code == 0, table.output
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), np.load(tmp_path / "t.npy"), atol=1e-6)
    refused = runner.invoke(app, ["encode", str(model_dir), str(csv), str(tmp_path / "x.npy")])
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "needs --column" in text and "id, text" in text


def test_data_check(data_dir):
    result = runner.invoke(app, ["data", "check", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "3108" in result.output  # STS12 scored pairs


def test_train_rejects_bad_options(model_dir):
    result = runner.invoke(app, ["train", "--model", str(model_dir), "--set", "temperature=0"])
    assert result.exit_code == 2
    assert "temperature" in result.output
    result = runner.invoke(app, ["train", "--model", str(model_dir), "--set", "batch_size=1"])
    assert result.exit_code == 2 and "batch_size" in result.output


def test_help_explains_options():
    result = runner.invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    assert "--resume" in result.output and "--set" in result.output


@pytest.mark.slow
def test_gpu_throughput_script_runs_on_cpu(model_dir, tmp_path):
    """The GPU benchmark is ready to ship: it runs end to end on the CPU with tiny sizes."""
    import subprocess

    script = REPO_ROOT / "benchmarks" / "gpu_throughput.py"
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "--model",
            str(model_dir),
            "--device",
            "cpu",
            "--batch-size",
            "8",
            "--reps",
            "2",
            "--warmup",
            "1",
            "--encode-sentences",
            "64",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["sentences_per_s"]) == {"train_simcse", "train_dclr", "encode"}
    assert all(v > 0 for v in result["sentences_per_s"].values())


def test_eval_sts12_in_dev_mode_is_a_named_error_not_a_traceback(model_dir, data_dir):
    args = ["eval", str(model_dir), "--data-dir", str(data_dir), "--tasks", "STS12",
            "--mode", "dev"]  # fmt: skip
    result = runner.invoke(app, args)
    assert (
        result.exit_code == 2
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )
    assert "STS12 have no dev split" in result.output and "--mode test" in result.output
    assert "Traceback" not in result.output


def test_errors_and_titles_keep_their_brackets(capsys):
    import typer

    from dclr.cli.tools import fail, scores_table

    with pytest.raises(typer.Exit):
        fail(ValueError("install it: pip install 'dclr[serve]'"))
    assert "pip install 'dclr[serve]'" in capsys.readouterr().err.replace("\n", "")
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(scores_table("STS test [cls, fp32]", {"model": {"avg": 70.0}}, []))
    assert "STS test [cls, fp32]" in console.export_text()


def test_train_says_what_it_trains_on_and_where_the_model_is(model_dir, tmp_path):
    from helpers import write_pseudo_corpus

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 20, blank_every=5)
    out = tmp_path / "run"
    args = tiny_train(model_dir, corpus, out, 1, *NO_EVAL_SETS)
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "data: " in text and "blank skipped" in text and "cut at 32 tokens" in text
    assert text.index("data: ") < text.index("1 steps in")
    assert f"model: {out / 'best'}" in text
    saved = json.loads((out / "results.json").read_text())
    assert (saved["data"]["lines"], saved["data"]["blank_skipped"]) == (20, 4)


def test_no_eval_skips_every_evaluation_of_a_smoke_run(model_dir, tmp_path):
    """Issue 47 point 9: a 3-step smoke run spent 365 of 413 s evaluating; --no-eval turns the
    dev and before/after test evaluations off."""
    from helpers import write_pseudo_corpus

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    out = tmp_path / "run"
    args = tiny_train(model_dir, corpus, out, 2, "--no-eval")
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["run"]["eval_steps"] == 0 and saved["run"]["test_eval"] is False


def test_a_calibrated_run_says_which_phi_it_used(model_dir, tmp_path, tmp_path_factory):
    """Issue 38 item 2: the calibrated phi is printed before the first step, is in results.json
    and in the model card in place of the default 0.9; no exported file names a local folder."""
    from helpers import write_pseudo_corpus

    from dclr.training.tracking import read_metrics

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    out = tmp_path / "run"
    args = ["train", "--model", str(model_dir), "--set", "method=dclr",
            "--set", f"data.corpus={corpus}", "--set", "model.pooler=mean",
            "--set", "model.mlp_head=false", "--set", "dclr.complementary_pooler=mean",
            "--set", "dclr.phi_calibration=random_pairs",
            "--set", "dclr.phi_calibration_target=0.25", "--set", "optimisation.batch_size=4",
            "--set", "run.eval_steps=0", "--set", "run.test_eval=false",
            "--max-steps", "2", "-o", str(out)]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (calibration,) = read_metrics(out, "calibration")
    phi = calibration["phi"]
    assert phi != 0.9
    text = " ".join(result.output.split())
    said = (
        f"false_negative_threshold = {phi:.4g} (derived by this run; the config's 0.9 is not used)"
    )
    assert said in text and text.index(said) < text.index("» train: 2 steps")
    assert f"false_negative_threshold used: {phi:.4g}" in text  # and in the closing summary
    saved = json.loads((out / "results.json").read_text())
    assert saved["derived"] == {"false_negative_threshold": phi}
    assert saved["start_records"]["calibration"]["phi"] == phi
    for folder in (out / "best", out / "final"):
        card = (folder / "README.md").read_text()
        assert f"| false_negative_threshold | `{phi:.4g}` (computed by this run" in card
        assert "| false_negative_threshold | `0.9`" not in card
        assert f'SentenceTransformer("path/to/{folder.name}")' in card
        for file in folder.rglob("*"):
            if file.is_file() and file.suffix in {".md", ".json", ".txt"}:
                content = file.read_text()
                for local in (str(tmp_path_factory.getbasetemp()), str(REPO_ROOT)):
                    assert local not in content, (file, local)


def test_too_small_data_names_the_corpus_and_the_set_syntax_and_shrinking_is_one_line(
    model_dir, tmp_path
):
    """A walkthrough's findings: the refusal named neither the file nor the `--set` syntax, and
    `shrink_batch`'s notice came as Python's `prepare.py:71: UserWarning:` with a line of code."""
    corpus = tmp_path / "three.txt"
    corpus.write_text("one sentence\nanother sentence\na third one\n")
    args = tiny_train(model_dir, corpus, tmp_path / "run", 1, "--no-eval")
    refused = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert refused.exit_code == 2
    text = " ".join(refused.output.split())
    assert f"the training data ({corpus}) has 3 examples" in text
    assert "--set data.small_data=shrink_batch" in text
    shrunk = runner.invoke(
        app, [*args, "--set", "data.small_data=shrink_batch"], env={"COLUMNS": "200"}
    )
    assert shrunk.exit_code == 0, shrunk.output
    assert "warning: data.small_data: shrink_batch: 3 examples < batch_size 4" in shrunk.output
    assert "UserWarning" not in shrunk.output


def test_sigterm_outside_the_steps_says_what_is_saved_as_ctrl_c_does(
    model_dir, tmp_path, monkeypatch
):
    """A walkthrough's finding: `timeout`, Slurm or `docker stop` (SIGTERM) during the evaluation
    after training ended the run with no word (exit -15), where Ctrl-C named the saved model. It
    now says the same, exit 143 (128 + SIGTERM); the handler is gone after the command."""
    import os
    import signal
    import time

    from helpers import write_pseudo_corpus

    from dclr.methods.base import Method

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 20)
    out = tmp_path / "run"
    args = tiny_train(model_dir, corpus, out, 2, *NO_EVAL_SETS)

    def terminated(self, config, result):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode: this never ends on its own

    monkeypatch.setattr(Method, "evaluate_final", terminated)
    before = signal.getsignal(signal.SIGTERM)
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 143, result.output
    text = " ".join(result.output.split())
    assert "interrupted after training, in the evaluation" in text
    assert f"dclr train --resume {out}" in text
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_in_the_evaluation_after_training_says_what_is_saved(
    model_dir, tmp_path, monkeypatch
):
    """Issue 38 item 6: Ctrl-C during the evaluation after training exited 130 with no word. It
    now names the saved model and the way on; `--resume` then evaluates without retraining."""
    from helpers import write_pseudo_corpus

    from dclr.methods.base import Method

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 20)
    out = tmp_path / "run"
    args = tiny_train(model_dir, corpus, out, 2, *NO_EVAL_SETS)
    real = Method.evaluate_final

    def interrupted(self, config, result):
        raise KeyboardInterrupt

    monkeypatch.setattr(Method, "evaluate_final", interrupted)
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 130
    text = " ".join(result.output.split())
    assert "interrupted after training, in the evaluation" in text
    assert str(out / "best") in text and f"dclr train --resume {out}" in text
    assert not (out / "results.json").exists()

    monkeypatch.setattr(Method, "evaluate_final", real)
    trained = (out / "final" / "model.safetensors").read_bytes()
    again = runner.invoke(app, ["train", "--resume", str(out)], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert json.loads((out / "results.json").read_text())["steps"] == 2
    assert (out / "final" / "model.safetensors").read_bytes() == trained
    assert "» train: " not in again.output  # no step trained again


def test_dclr_version():
    """Issue 38 item 6: there was no `dclr --version`."""
    from dclr._meta import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"dclr {__version__}"


def test_the_summary_names_the_better_of_the_two_models():
    from dclr.cli.main import better_of_two

    assert "beats the starting model" in better_of_two({"avg": 78.87}, {"avg": 79.38})
    worse = better_of_two({"avg": 78.87}, {"avg": 77.07})
    assert "not better" in worse and "-1.80" in worse and "keep the starting model" in worse
    assert better_of_two({}, {"avg": 70.0}) == ""


def test_every_long_phase_says_how_much_and_how_long(model_dir, data_dir, tmp_path, monkeypatch):
    """The steps and each dev evaluation announce themselves with their size and an estimate
    (a rough prior on the first run here, the measured speed on the next); dev evaluation has
    its own bar."""
    from helpers import write_pseudo_corpus

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # CI sets it; this test looks at a bar
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    texts = []
    for name in ("a", "b"):
        args = ["train", "--model", str(model_dir), "--set", f"data.corpus={corpus}",
                "--set", f"data.data_dir={data_dir}", "--set", "optimisation.batch_size=4",
                "--set", "run.eval_steps=2", "--set", "run.test_eval=false",
                "--max-steps", "2", "-o", str(tmp_path / name)]  # fmt: skip
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        texts.append(" ".join(result.output.split()))
    first, second = texts
    assert "» train: 2 steps of batch 4 (simcse), ~" in first
    assert "(rough: first run on this machine)" in first
    assert "» dev eval: " in first and " sentences, " in first and " tokens, ~" in first
    assert "dev eval: 100%" in first  # its own bar
    speeds = json.loads((tmp_path / "cache" / "dclr" / "speed.json").read_text())
    assert {key.split("|")[0] for key in speeds} == {"train:simcse", "encode"}
    assert "» train: 2 steps of batch 4 (simcse), ~" in second
    assert "rough" not in second  # both estimates now come from the measured speed


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*prefix, name))


def test_help_paragraphs_are_not_hard_wrapped():
    """Issue 27 item 8: docstrings broke lines mid-sentence in --help (rich keeps newlines).
    Every command's help keeps a newline only between paragraphs, before a list item or an
    indented line; the terminal wraps the rest at its own width."""
    import typer

    from dclr.cli.main import app

    checked = 0
    for path, command in _commands(typer.main.get_command(app)):
        for block in (command.help or "").split("\n\n"):
            for line in block.split("\n")[1:]:
                assert line.startswith(("- ", "* ", " ")), (" ".join(path), line)
        checked += 1
    assert checked > 20
    result = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "80"})
    assert "refused, naming the holder. SIGTERM" in " ".join(result.output.split())


def test_output_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Commands' output files (`--json`, `--output`) go through `save_output`: a temp name
    renamed when complete. A failing write (full disk) keeps the previous file, leaves no temp
    and exits with the named problem; an output under a file is named."""
    import errno

    from dclr import atomic

    recipe = tmp_path / "flat.yaml"
    recipe.write_text("model: m\nmethod: simcse\nbatch_size: 8\n")
    out = tmp_path / "deep" / "sections.yaml"
    first = runner.invoke(app, ["config", "convert", str(recipe), "-o", str(out)])
    assert first.exit_code == 0, first.output
    before = out.read_bytes()
    assert b"batch_size: 8" in before

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full_disk)
    recipe.write_text("model: m\nmethod: simcse\nbatch_size: 16\n")
    failed = runner.invoke(app, ["config", "convert", str(recipe), "-o", str(out)])
    monkeypatch.undo()
    assert failed.exit_code == 2 and "disk is full" in failed.output, failed.output
    assert out.read_bytes() == before
    assert [p.name for p in out.parent.iterdir()] == ["sections.yaml"]  # no temp left
    under = runner.invoke(app, ["config", "convert", str(recipe), "-o", str(recipe / "x.yaml")])
    assert under.exit_code == 2 and "is a file, not a folder" in under.output


def test_encode_file_is_dclr_encode_from_python(model_dir, tmp_path):
    """`dclr.encode_file` returns what `dclr encode` writes (rows, blank rows, --skip-blank's
    row numbers); the command writes what it returns."""
    import dclr

    src = tmp_path / "s.txt"
    src.write_text("a man plays guitar\n\nthe cat sleeps\n  padded  \n")
    out = tmp_path / "v.npy"
    args = ["--pooler", "mean"]
    assert runner.invoke(app, ["encode", str(model_dir), str(src), str(out), *args]).exit_code == 0
    encoded = dclr.encode_file(model_dir, src, pooler="mean")
    assert encoded.rows == [1, 2, 3, 4] and encoded.blank == [2]
    np.testing.assert_array_equal(encoded.vectors, np.load(out))
    skipped = dclr.encode_file(model_dir, src, pooler="mean", skip_blank=True)
    assert skipped.rows == [1, 3, 4] and skipped.blank == [2]
    np.testing.assert_array_equal(skipped.vectors, encoded.vectors[[0, 2, 3]])
    cli = runner.invoke(app, ["encode", str(model_dir), str(src), str(out), *args, "--skip-blank"])
    assert cli.exit_code == 0
    assert (tmp_path / "v.npy.lines.txt").read_text() == "1\n3\n4\n"
    np.testing.assert_array_equal(np.load(out), skipped.vectors)
