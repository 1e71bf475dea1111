"""`dclr dualcse ...` on a tiny model and a synthetic INLI: train, encode, implicitness, rte, eis,
and bad input reported as file:line with a fix."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_tiny_model_dir
from inli_data import HEADER, inli_rows, write_inli, write_inli_dir
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.dualcse.model import DualEncoder

runner = CliRunner()
SENTENCES = ["It's a bit chilly in here.", "", "Please close the window.", "Hi"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(data root, run folder) after `dclr dualcse train` of a tiny cross model for 2 steps."""
    root = tmp_path_factory.mktemp("cli")
    data = write_inli_dir(root / "data", n_train=8, n_eval=4)
    model = make_tiny_model_dir(root / "model")
    run = root / "run"
    result = runner.invoke(
        app,
        [
            "dualcse",
            "train",
            "--model",
            str(model),
            "--data-dir",
            str(data),
            "-o",
            str(run),
            "--max-steps",
            "2",
            "--set",
            "batch_size=4",
            "--set",
            "log_steps=1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "RTE on INLI test" in result.output and "dualcse-cross" in result.output
    return data, run


def test_help_lists_the_commands():
    result = runner.invoke(app, ["dualcse", "--help"])
    assert result.exit_code == 0
    for command in ("train", "encode", "implicitness", "rte", "eis"):
        assert command in result.output


def test_train_writes_the_run_folder(trained):
    _, run = trained
    summary = json.loads((run / "results.json").read_text())
    assert summary["steps"] == 2 and summary["encoder"] == "cross"
    assert (run / "final" / "dualcse.json").is_file() and (run / "config.yaml").is_file()


def test_encode_each_semantics(trained, tmp_path):
    """Row i is line i, a blank line encoded as "" (as `dclr encode`): blank lines were skipped,
    so the vectors no longer lined up with the file's lines and nothing said so."""
    _, run = trained
    text = tmp_path / "s.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    model = DualEncoder.from_pretrained(run / "final")
    for semantics in ("explicit", "implicit"):
        out = tmp_path / f"{semantics}.npy"
        result = runner.invoke(
            app,
            [
                "dualcse",
                "encode",
                str(run / "final"),
                str(text),
                str(out),
                "--semantics",
                semantics,
            ],
        )
        assert result.exit_code == 0, result.output
        assert "1 blank line(s) encoded as ''" in result.output
        expected = model.encode(SENTENCES, semantics)
        assert np.load(out).shape[0] == len(SENTENCES)
        assert np.abs(np.load(out) - expected).max() < 1e-5


def test_encode_skips_blank_rows_and_reads_a_table_column(trained, tmp_path):
    _, run = trained
    table = tmp_path / "s.csv"
    table.write_text("id,text\n" + "".join(f'{i},"{s}"\n' for i, s in enumerate(SENTENCES)))
    out = tmp_path / "kept"
    result = runner.invoke(
        app,
        ["dualcse", "encode", str(run / "final"), str(table), str(out),
         "--column", "text", "--skip-blank"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    kept = [s for s in SENTENCES if s]
    expected = DualEncoder.from_pretrained(run / "final").encode(kept, "explicit")
    assert np.abs(np.load(tmp_path / "kept.npy") - expected).max() < 1e-5
    assert (tmp_path / "kept.lines.txt").read_text().split() == ["1", "3", "4"]
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]  # written whole


def test_encode_of_an_empty_or_blank_file_writes_no_rows(trained, tmp_path):
    """An empty file crashed in the tokenizer (IndexError, a traceback); `dclr encode` writes a
    (0, d) array, and so does this command now."""
    _, run = trained
    for name, text, options in (("empty", "", []), ("blank", "\n\n", ["--skip-blank"])):
        source = tmp_path / f"{name}.txt"
        source.write_text(text)
        out = tmp_path / f"{name}.npy"
        result = runner.invoke(
            app, ["dualcse", "encode", str(run / "final"), str(source), str(out), *options]
        )
        assert result.exit_code == 0, result.output
        assert np.load(out).shape[0] == 0


def test_unknown_semantics_is_a_clear_error(trained, tmp_path):
    _, run = trained
    text = tmp_path / "s.txt"
    text.write_text("a\nb\n")
    result = runner.invoke(
        app,
        [
            "dualcse",
            "encode",
            str(run / "final"),
            str(text),
            str(tmp_path / "x.npy"),
            "--semantics",
            "literal",
        ],  # fmt: skip
    )
    assert result.exit_code == 2
    assert "unknown semantics 'literal'" in result.output and "explicit, implicit" in result.output


def test_implicitness_writes_one_score_per_sentence(trained, tmp_path):
    _, run = trained
    text = tmp_path / "s.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "scores.tsv"
    result = runner.invoke(app, ["dualcse", "implicitness", str(run / "final"), str(text), "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in out.read_text().splitlines()]
    assert [s for _, s in lines] == [s for s in SENTENCES if s]
    expected = DualEncoder.from_pretrained(run / "final").implicitness([s for _, s in lines])
    assert np.allclose([float(x) for x, _ in lines], expected, atol=1e-6)


def test_rte_compares_a_dual_and_a_single_model(trained, tmp_path):
    data, run = trained
    out = tmp_path / "rte.json"
    single = make_tiny_model_dir(tmp_path / "single")
    result = runner.invoke(
        app,
        [
            "dualcse",
            "rte",
            str(run / "final"),
            str(single),
            "--data-dir",
            str(data),
            "--pooler",
            "mean",
            "--json",
            str(out),
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    results = json.loads(out.read_text())
    assert list(results) == [str(run / "final"), str(single)]
    for scores in results.values():
        assert scores["avg"] == pytest.approx(
            np.mean([scores[k] for k in ("explicit", "implied", "neutral", "contradiction")])
        )
    import dclr  # `dclr dualcse rte` from Python: the same results

    assert dclr.evaluate_rte([run / "final", single], data, pooler="mean") == results


def test_eis_on_a_pairs_file(trained, tmp_path):
    _, run = trained
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("implicit\texplicit\nIt's a bit chilly in here.\tPlease close the window.\n")
    out = tmp_path / "eis.json"
    result = runner.invoke(app, ["dualcse", "eis", str(run / "final"), str(pairs), "--json", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["n_pairs"] == 1
    import dclr  # `dclr dualcse eis` from Python: the same result

    found = dclr.evaluate_eis(run / "final", pairs)
    assert {"model": str(run / "final"), **found} == json.loads(out.read_text())
    pairs.write_text("just one field\n")
    result = runner.invoke(app, ["dualcse", "eis", str(run / "final"), str(pairs)])
    assert result.exit_code == 2 and f"{pairs}:1" in result.output


def test_bad_inli_file_names_file_and_line(trained, tmp_path):
    _, run = trained
    data = write_inli_dir(tmp_path / "data", n_train=8, n_eval=4)
    rows = inli_rows(4, offset=2000)
    rows[1][HEADER.index("contradiction")] = ""
    test_csv = write_inli(data / "inli" / "test.csv", rows)
    result = runner.invoke(app, ["dualcse", "rte", str(run / "final"), "--data-dir", str(data)])
    assert result.exit_code == 2
    assert f"{test_csv}:4" in result.output and "empty contradiction" in result.output
