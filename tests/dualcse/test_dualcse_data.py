"""INLI and EIS readers: quoted commas/newlines, and errors that name the file, line and fix.

The synthetic INLI writers live in tests/inli_data.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from inli_data import HEADER, inli_rows, write_inli, write_inli_dir  # noqa: F401

from dclr.data.inli import (
    HYPOTHESIS_TYPES,
    eis_split,
    eis_split_sizes,
    inli_split,
    read_eis_file,
    read_eis_pairs,
    read_impscore_csv,
    read_inli,
    resolve_inli_dir,
)
from dclr.errors import InputError


def test_reads_quoted_commas_and_newlines(tmp_path):
    path = write_inli(tmp_path / "train.csv", inli_rows(3))
    examples = read_inli(path)
    assert len(examples) == 3
    first = examples[0]
    assert first.premise == inli_rows(1)[0][2]  # the comma, quotes and newline survive
    assert first.explicit == "Alex loves soccer (0)."
    assert first.implied.startswith("Alex would happily")
    assert first.source == "circa"
    assert [e.line for e in examples] == [2, 4, 6]  # each premise spans two lines
    assert [first.hypothesis(t) for t in HYPOTHESIS_TYPES] == [
        first.explicit,
        first.implied,
        first.neutral,
        first.contradiction,
    ]


def test_missing_column_names_file_line_and_fix(tmp_path):
    header = [c for c in HEADER if c != "neutral"]
    rows = [[f for i, f in enumerate(r) if HEADER[i] != "neutral"] for r in inli_rows(2)]
    path = write_inli(tmp_path / "val.csv", rows, header)
    with pytest.raises(InputError, match="missing column") as err:
        read_inli(path)
    assert err.value.path == str(path) and err.value.line == 1
    assert "neutral" in str(err.value) and "first line must name the columns" in err.value.fix


def test_empty_hypothesis_names_the_line_of_its_record(tmp_path):
    rows = inli_rows(3)
    rows[2][HEADER.index("implied_entailment")] = "   "
    path = write_inli(tmp_path / "test.csv", rows)
    with pytest.raises(InputError, match="empty implied_entailment") as err:
        read_inli(path)
    assert err.value.line == 6 and err.value.path == str(path)
    assert "fill the field or drop the row" in err.value.fix


def test_short_row_and_empty_file(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text(",".join(HEADER) + "\n0,circa,premise only\n")
    with pytest.raises(InputError, match="3 fields") as err:
        read_inli(path)
    assert err.value.line == 2
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        read_inli(empty)


def test_data_dir_resolution(tmp_path, monkeypatch):
    root = write_inli_dir(tmp_path / "data")
    assert resolve_inli_dir(root) == root / "inli"
    assert resolve_inli_dir(root / "inli") == root / "inli"
    monkeypatch.setenv("DCLR_DATA_DIR", str(root))
    assert inli_split(None, "val") == root / "inli" / "val.csv"
    with pytest.raises(InputError, match="no INLI data") as err:
        resolve_inli_dir(tmp_path / "nowhere")
    assert "github.com/google-deepmind/inli" in err.value.fix
    with pytest.raises(InputError, match="unknown INLI split"):
        inli_split(root, "dev")
    monkeypatch.delenv("DCLR_DATA_DIR")
    with pytest.raises(InputError, match="--data-dir"):
        resolve_inli_dir(None)


def test_real_inli_sizes():
    root = Path(os.environ.get("DCLR_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
    if not (root / "inli" / "test.csv").is_file():
        pytest.skip(f"no INLI at {root}")
    sizes = {s: len(read_inli(inli_split(root, s))) for s in ("train", "val", "test")}
    assert sizes == {"train": 8000, "val": 1000, "test": 1000}


# ---- EIS pairs --------------------------------------------------------------------------------
def test_eis_pairs_header_and_blank_lines(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("implicit\texplicit\nIt's a bit chilly in here.\tPlease close the window.\n\n")
    assert read_eis_pairs(path) == [("It's a bit chilly in here.", "Please close the window.")]


@pytest.mark.parametrize(
    ("content", "line"),
    [("a\tb\nonly one field\n", 2), ("a\tb\tc\n", 1), ("a\t \n", 1)],
    ids=["one-field", "three-fields", "empty-field"],
)
def test_eis_bad_line_is_named(tmp_path, content, line):
    path = tmp_path / "pairs.tsv"
    path.write_text(content)
    with pytest.raises(InputError, match="tab-separated") as err:
        read_eis_pairs(path)
    assert err.value.line == line and "<TAB>" in err.value.fix


def test_eis_without_pairs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("implicit\texplicit\n")
    with pytest.raises(InputError, match="no sentence pairs"):
        read_eis_pairs(path)


# ---- EIS data in ImpScore's published CSV ---------------------------------------------------
IMPSCORE = (
    "pos_implicit,pos_explicit,neg_implicit,neg_explicit\n"
    "\"It's chilly, isn't it?\",Please close the window.,\"It's chilly, isn't it?\",I like dogs.\n"
    '"I have a lot on my plate","I am too busy to help, sorry.","I have a lot on my plate",'
    '"The plate is\nblue."\n'
)


def test_impscore_rows_give_two_pairs_each(tmp_path):
    path = tmp_path / "train_data.csv"
    path.write_text(IMPSCORE)
    rows = read_impscore_csv(path)
    assert [r.line for r in rows] == [2, 3]
    assert rows[0].pairs == (
        ("It's chilly, isn't it?", "Please close the window."),
        ("It's chilly, isn't it?", "I like dogs."),
    )
    assert rows[1].pairs[1] == ("I have a lot on my plate", "The plate is\nblue.")
    assert read_eis_file(path) == [pair for row in rows for pair in row.pairs]
    # ImpScore's test dump: one pair per row with its pragmatic label
    dump = tmp_path / "test_data.csv"
    dump.write_text("pos_implicit,pos_explicit,pragmatic_label\na,b,1\na,c,0\n")
    assert read_eis_file(dump) == [("a", "b"), ("a", "c")]
    # a TSV still reads as before
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("implicit\texplicit\nx\ty\n")
    assert read_eis_file(tsv) == [("x", "y")]


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("pos_implicit,pos_explicit,neg_implicit\na,b,c\n", 1, "missing column"),
        ("pos_implicit,pos_explicit,neg_implicit,neg_explicit\na,b,c,d\na,b,c\n", 3, "fields"),
        ("pos_implicit,pos_explicit,neg_implicit,neg_explicit\na,b, ,d\n", 2, "empty neg_implicit"),
        ("pos_implicit,pos_explicit,pragmatic_label\na,b,yes\n", 2, "pragmatic_label"),
        ('pos_implicit,pos_explicit,neg_implicit,neg_explicit\na,"b,c,d\n', 2, "fields"),
    ],
    ids=["missing-column", "short-row", "empty-field", "bad-label", "open-quote"],
)
def test_impscore_errors_name_file_line_and_fix(tmp_path, content, line, message):
    path = tmp_path / "eis.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as err:
        read_eis_file(path)
    assert err.value.path == str(path) and err.value.line == line and err.value.fix


def test_impscore_header_only(tmp_path):
    path = tmp_path / "eis.csv"
    path.write_text("pos_implicit,pos_explicit,neg_implicit,neg_explicit\n")
    with pytest.raises(InputError, match="no rows"):
        read_eis_file(path)


def test_eis_split_sizes_match_dualcse():
    # ImpScore's 56,290 rows (112,580 pairs) -> DualCSE's 101,320 / 5,630 / 5,630 pairs
    sizes = eis_split_sizes(56_290)
    assert {k: 2 * v for k, v in sizes.items()} == {"train": 101_320, "val": 5_630, "test": 5_630}


def test_eis_split_is_a_seeded_partition(tmp_path):
    rows = "".join(f"i{k},e{k},i{k},n{k}\n" for k in range(40))
    path = tmp_path / "eis.csv"
    path.write_text("pos_implicit,pos_explicit,neg_implicit,neg_explicit\n" + rows)
    parts = {s: read_eis_file(path, s, seed=1) for s in ("train", "val", "test")}
    assert {s: len(p) for s, p in parts.items()} == {"train": 72, "val": 4, "test": 4}
    firsts = [pair[1] for part in parts.values() for pair in part if pair[1].startswith("e")]
    assert sorted(firsts) == sorted(f"e{k}" for k in range(40))  # every row exactly once
    assert parts["test"] == read_eis_file(path, "test", seed=1)
    assert parts["test"] != read_eis_file(path, "test", seed=2)
    full = read_impscore_csv(path)
    assert eis_split(full, "all") == full
    with pytest.raises(InputError, match="ImpScore"):
        read_eis_file(_tsv(tmp_path), "test")


def _tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\n")
    return path
