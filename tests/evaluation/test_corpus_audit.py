"""`dclr audit` on a user's corpus: the pure report on stub vectors (known cosines), then the
gathering (`audit_corpus`) and the command end to end on a tiny model."""

import json
import sys
import zlib

import numpy as np
import pytest
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.data.paraphrases import GoldIndex, ParaphrasePair
from dclr.errors import ConfigError
from dclr.evaluation.corpus_audit import (
    FIXED_PHIS,
    NO_FALSE_NEGATIVES,
    audit_pairs,
    plot_histogram,
)
from dclr.methods.dclr_audit import audit_corpus

DIM = 256  # random unit vectors in 256 dimensions: |cos| of unrelated texts ~ 0.06
NEAR_NOISE = 0.3  # "X!" = vector of "X" + 0.3 noise: cos = 1 / sqrt(1 + 0.09) ~ 0.958

runner = CliRunner()


def _unit(seed_text: str) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(seed_text.encode())).standard_normal(DIM)


def stub_vectors(sentences: list[str]) -> np.ndarray:
    """Unrelated texts get unrelated vectors; 'X!' is a near-duplicate of 'X'; case and
    whitespace are ignored, so an exact copy gets the same vector."""
    rows = []
    for s in sentences:
        base = " ".join(s.lower().split()).rstrip("!")
        v = _unit(base)
        if s.endswith("!"):
            v = v + NEAR_NOISE * _unit(s)
        rows.append(v / np.linalg.norm(v))
    return np.stack(rows)


def unrelated(k: int, offset: int = 0) -> list[str]:
    return [f"sentence number {i}" for i in range(offset, offset + k)]


BATCHES = [
    ["the cat sleeps", "The  cat sleeps", *unrelated(6)],  # one exact copy (case, whitespace)
    ["a dog runs", "a dog runs!", *unrelated(6, 10)],  # one near-duplicate
    ["a red car", "a red car", "a red car!", *unrelated(5, 20)],  # 1 copy, 2 near-duplicates
]


def test_report_keys_copies_and_near_duplicates():
    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5})
    assert {"batches", "pairs", "exact_copies", "exact_copy_rate", "cos", "histogram", "rules",
            "recommendation"} <= set(result)  # fmt: skip
    assert result["batches"] == 3 and result["pairs"] == 3 * 28  # C(8, 2) per batch
    assert result["exact_copies"] == 2
    assert result["exact_copy_rate"] == pytest.approx(2 / 84)
    assert sum(result["histogram"]["counts"]) == 84
    by_rule = {r["rule"]: r for r in result["rules"]}
    fixed = by_rule["fixed 0.95"]
    assert (fixed["exact_copies"], fixed["near_duplicates"]) == (2, 3)
    assert {frozenset((e["a"], e["b"])) for e in fixed["examples"]} <= {
        frozenset(("a dog runs", "a dog runs!")),
        frozenset(("a red car", "a red car!")),
    }
    assert all(e["cos"] >= 0.95 for e in fixed["examples"])
    assert by_rule["GIST margin 0"]["dropped"] == 2  # cos = 1: the exact copies only
    assert by_rule["calibrated random_pairs q=0.001"]["phi"] == 0.5
    assert "precision" not in fixed  # no known pair in the batches: gold P/R left out


def test_a_pair_met_in_two_batches_is_shown_once():
    twice = [["a dog runs", "a dog runs!", *unrelated(4)], ["a dog runs", "a dog runs!", "x"]]
    result = audit_pairs(twice, stub_vectors, {"random_pairs q=0.001": 0.5})
    fixed = {r["rule"]: r for r in result["rules"]}["fixed 0.9"]
    assert fixed["near_duplicates"] == 2 and len(fixed["examples"]) == 1


def test_drop_counts_are_monotone_in_phi():
    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5}, phis=FIXED_PHIS)
    rows = sorted(result["rules"], key=lambda r: r["phi"])
    dropped = [r["dropped"] for r in rows]
    assert dropped == sorted(dropped, reverse=True)
    assert all(r["dropped"] == r["exact_copies"] + r["near_duplicates"] for r in rows)


# Pairs at chosen cosines, one between each two values of the fixed grid (0.7, 0.8, 0.9, 0.95)
# and one above it: BATCHES' cosines sit at ~0.06, 0.958 and 1, so over that grid their drop
# counts are flat (5, 5, 5, 5) and say nothing of which pairs a phi drops.
GRID_COSINES = {"p75": 0.75, "p85": 0.85, "p925": 0.925, "p97": 0.97}


def exact_cosine_vectors(sentences: list[str]) -> np.ndarray:
    """'NAME' and 'NAME too' (NAME in GRID_COSINES) meet at exactly that cosine; every other
    text is an unrelated random vector (stub_vectors)."""
    rows = []
    for s in sentences:
        name = s.removesuffix(" too")
        base = _unit(name)
        base /= np.linalg.norm(base)
        if s.endswith(" too"):
            other = _unit(s)
            other -= (other @ base) * base  # orthogonal to the base vector
            c = GRID_COSINES[name]
            rows.append(c * base + np.sqrt(1 - c * c) * other / np.linalg.norm(other))
        else:
            rows.append(stub_vectors([s])[0])
    return np.stack(rows)


def test_each_phi_of_the_grid_drops_exactly_the_pairs_at_or_above_it():
    batch = [w for name in GRID_COSINES for w in (name, f"{name} too")] + unrelated(4)
    result = audit_pairs([batch], exact_cosine_vectors, {}, phis=FIXED_PHIS)
    fixed = {r["phi"]: r["dropped"] for r in result["rules"] if r["rule"].startswith("fixed")}
    # by hand: 0.7 drops all four pairs, 0.8 the three over it, 0.9 two, 0.95 the 0.97 pair
    assert fixed == {0.7: 4, 0.8: 3, 0.9: 2, 0.95: 1}
    examples = {r["phi"]: r["examples"] for r in result["rules"] if r["rule"].startswith("fixed")}
    assert [e["cos"] for e in examples[0.95]] == [pytest.approx(0.97)]
    assert all(e["cos"] >= phi for phi, rows in examples.items() for e in rows)


def test_unrelated_sentences_mean_no_measurable_false_negatives():
    batches = [unrelated(16, 16 * k) for k in range(4)]
    result = audit_pairs(batches, stub_vectors, {"random_pairs q=0.001": 0.99})
    assert result["recommendation"]["loss"] == "simcse"
    assert result["recommendation"]["text"].startswith(NO_FALSE_NEGATIVES)
    assert all(r["dropped"] == 0 for r in result["rules"] if r["phi"] >= 0.7)


def test_near_duplicates_recommend_dclr_with_a_clamped_phi():
    batches = [[f"text {i}", f"text {i}!", *unrelated(6, 10 * i)] for i in range(4)]
    result = audit_pairs(batches, stub_vectors, {"random_pairs q=0.001": 0.999})
    rec = result["recommendation"]
    assert rec["loss"] == "dclr" and rec["phi"] == 0.95  # 0.999 clamped into (0.8, 0.95)


def test_gold_pairs_give_precision_and_recall():
    gold = GoldIndex([ParaphrasePair("a dog runs", "a dog runs!", "test")])
    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5}, gold=gold)
    fixed = {r["rule"]: r for r in result["rules"]}["fixed 0.95"]
    # gold = the known pair + the 2 exact copies; dropped = 2 copies + 3 near-duplicates
    assert fixed["precision"] == pytest.approx(3 / 5) and fixed["recall"] == 1.0


def test_gold_precision_is_null_when_nothing_is_dropped():
    gold = GoldIndex([ParaphrasePair("a dog runs", "a dog runs!", "test")])
    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5}, phis=[0.99],
                         gold=gold)  # fmt: skip
    row = {r["rule"]: r for r in result["rules"]}["fixed 0.99"]
    assert row["near_duplicates"] == 0 and row["recall"] == pytest.approx(2 / 3)
    json.dumps(result, allow_nan=False)  # strict JSON for scripts
    unrelated_only = audit_pairs([unrelated(8)], stub_vectors, {}, phis=[0.9], gold=gold)
    assert "precision" not in unrelated_only["rules"][0]


def test_a_table_column_is_read_as_training_reads_it(tiny_model_dir, tmp_path):
    rows = [{"id": i, "text": f"row {i} of the table"} for i in range(40)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.warns(UserWarning, match="40 corpus sentences put 0.78 random pairs above it"):
        result = audit_corpus(str(path), str(tiny_model_dir), batch_size=8, batches=2,
                              column="text", pooler="mean", gold_sources="")  # fmt: skip
    assert result["settings"]["texts"] == 40 and result["pairs"] == 2 * 28
    texts = {e["a"] for r in result["rules"] for e in r["examples"]}
    assert all(t.startswith("row ") for t in texts)


def test_histogram_png_is_written(tmp_path):
    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5})
    path = plot_histogram(result, tmp_path / "h.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["h.png"]  # no temporary left


def test_the_histogram_has_a_title_and_marks_the_recommended_phi():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dclr.evaluation.corpus_audit import histogram_figure

    result = audit_pairs(BATCHES, stub_vectors, {"random_pairs q=0.001": 0.5})
    result["settings"] = {"corpus": "/data/my_corpus.txt"}
    fig = histogram_figure(result)
    try:
        ax = fig.axes[0]
        assert "my_corpus.txt" in ax.get_title()
        phi = result["recommendation"]["phi"]
        assert phi is not None and f"{phi:.3f}" in ax.get_title()
        marked = [line for line in ax.get_lines() if line.get_label().startswith("recommended")]
        assert len(marked) == 1 and marked[0].get_xdata()[0] == pytest.approx(phi)
    finally:
        plt.close(fig)


def test_without_matplotlib_the_plot_names_the_fix(tmp_path, monkeypatch):
    """matplotlib left dclr's dependencies (issue 36): the PNG's error says how to get it."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    result = audit_pairs(BATCHES, stub_vectors, {})
    with pytest.raises(ConfigError, match=r"pip install matplotlib .*dclr-lab"):
        plot_histogram(result, tmp_path / "h.png")
    assert list(tmp_path.iterdir()) == []


def test_audit_png_without_matplotlib_fails_before_the_audit(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    # no such guide model: the audit would fail on it, so the matplotlib error comes first
    result = runner.invoke(app, ["audit", str(tmp_path / "corpus.txt"), "--guide",
                                 str(tmp_path / "no-model"), "--png", str(tmp_path / "a.png")])  # fmt: skip
    assert result.exit_code != 0
    assert "pip install matplotlib" in result.output and not (tmp_path / "a.png").exists()


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    lines = [f"line {i} about topic {i % 7}" for i in range(120)]
    lines += ["an exact copy"] * 20 + ["a near duplicate.", "A near duplicate!"] * 5
    path = tmp_path_factory.mktemp("audit") / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_audit_corpus_reads_samples_and_calibrates(tiny_model_dir, corpus_file):
    result = audit_corpus(str(corpus_file), str(tiny_model_dir), batch_size=16, batches=4,
                          pooler="mean", gold_sources="")  # fmt: skip
    assert result["batches"] == 4 and result["pairs"] == 4 * 120
    assert result["settings"]["texts"] == 150
    calibrated = result["settings"]["calibration"]
    assert calibrated["mode"] == "random_pairs" and calibrated["sentences"] == 150
    assert result["exact_copies"] > 0  # 20 copies of one line in 150: some share a batch


def test_audit_command_end_to_end(tiny_model_dir, corpus_file, tmp_path):
    out_json, out_png = tmp_path / "a.json", tmp_path / "a.png"
    result = runner.invoke(
        app,
        ["audit", str(corpus_file), "--guide", str(tiny_model_dir), "--batch-size", "16",
         "--batches", "4", "--pooler", "mean", "--json", str(out_json), "--png", str(out_png),
         "--data-dir", str(tmp_path / "nowhere")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "recommendation:" in result.output and "fixed 0.9" in result.output
    report = json.loads(out_json.read_text())
    assert report["settings"]["guide"] == str(tiny_model_dir)
    assert out_png.read_bytes()[:4] == b"\x89PNG"


def test_audit_command_refuses_a_corpus_smaller_than_a_batch(tiny_model_dir, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("one\ntwo\nthree\n")
    result = runner.invoke(
        app, ["audit", str(small), "--guide", str(tiny_model_dir), "--pooler", "mean"]
    )
    assert result.exit_code == 2 and "fewer than one batch" in result.output
