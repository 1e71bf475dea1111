"""Fault injection on bulk encoding: torn shards, two writers, bad rows, a full or read-only disk.

Before issue 13 an empty or truncated shard counted as done because its file existed (the job
ended with `Aborted.` or a numpy error without a path, and rerunning never repaired it); two jobs
into one folder crashed; a JSONL field with a lone surrogate, a full disk or a read-only folder gave
raw tracebacks; a CSV row missing the text column was silently blank.
"""

import errno
import json

import numpy as np
import pytest
from helpers import write_pseudo_corpus
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.data.readers import open_source
from dclr.errors import InputError
from dclr.indexing import shards
from dclr.indexing.bulk import BulkSettings, DamagedShardWarning, bulk_encode
from dclr.indexing.shards import iter_shards
from dclr.runlock import FolderLock, LockHeld

SHARD = 5


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    return write_pseudo_corpus(tmp_path_factory.mktemp("text") / "texts.txt", 18)


@pytest.fixture(scope="module")
def fresh(model_dir, text_file, tmp_path_factory):
    """Rows and vectors of an undisturbed job."""
    out = tmp_path_factory.mktemp("fresh") / "out"
    bulk_encode(str(model_dir), open_source(text_file), out, BulkSettings(SHARD), pooler="mean")
    return _all(out)


def _all(out):
    manifest = json.loads((out / "manifest.json").read_text())
    parts = list(iter_shards(out, manifest["n_shards"], manifest["shard_format"]))
    return np.concatenate([r for r, _ in parts]), np.concatenate([v for _, v in parts])


@pytest.mark.parametrize("damage", ["empty", "truncated", "rows-file-empty"])
def test_damaged_shard_is_named_and_encoded_again(model_dir, text_file, fresh, tmp_path, damage):
    out, source = tmp_path / "out", open_source(text_file)
    bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    name = "shard-00001.rows.npy" if damage == "rows-file-empty" else "shard-00001.npy"
    data = (out / name).read_bytes()
    (out / name).write_bytes(b"" if "empty" in damage else data[: len(data) // 2])

    with pytest.warns(DamagedShardWarning, match=name):
        manifest = bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    assert manifest["complete"] and manifest["vectors"] == len(fresh[0])
    rows, vectors = _all(out)
    np.testing.assert_array_equal(rows, fresh[0])
    np.testing.assert_array_equal(vectors, fresh[1])
    assert len(manifest["shards"]) == manifest["n_shards"]
    for record in manifest["shards"]:  # sizes and checksums of every shard file
        assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in record["files"].values())


def test_read_bulk_checks_each_shard_against_its_checksum(model_dir, text_file, tmp_path):
    """Bytes changed on disk at the same size (a bit flip, a stray write) are named by
    `read_bulk`, never returned as vectors; rerunning the job encodes the shard again."""
    from dclr.indexing.bulk import read_bulk

    out, source = tmp_path / "out", open_source(text_file)
    bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    rows, vectors = read_bulk(out)
    shard = out / "shard-00001.npy"
    data = bytearray(shard.read_bytes())
    data[-4:] = np.float32(np.nan).tobytes()  # the last component of the last vector
    shard.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"shard 1 fails its check: .*shard-00001\.npy"):
        read_bulk(out)
    with pytest.warns(DamagedShardWarning, match="shard-00001.npy"):
        bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    again = read_bulk(out)
    np.testing.assert_array_equal(again[0], rows)
    np.testing.assert_array_equal(again[1], vectors)


def test_shard_without_its_record_is_not_done(model_dir, text_file, tmp_path):
    """A crash between the shard's rename and its record: the file exists, but is redone."""
    out, source = tmp_path / "out", open_source(text_file)
    bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    (out / shards.record_name(2)).unlink()
    assert not shards.is_done(out, 2, "npy")
    with pytest.warns(DamagedShardWarning, match="shard-00002.done.json"):
        bulk_encode(str(model_dir), source, out, BulkSettings(SHARD), pooler="mean")
    assert shards.is_done(out, 2, "npy")


def test_second_writer_is_refused_naming_the_first(model_dir, text_file, tmp_path):
    out = tmp_path / "out"
    lock = FolderLock(out, "dclr encode-bulk")  # another job holds the folder
    with lock, pytest.raises(LockHeld, match="is in use by pid .*dclr encode-bulk"):
        bulk_encode(str(model_dir), open_source(text_file), out, BulkSettings(SHARD))
    assert not (out / "manifest.json").exists()


def test_csv_row_missing_the_text_column_names_file_and_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,text\n1,hello\n\n2\n3,bye\n")
    rows = open_source(path, "text").rows()
    assert [next(rows), next(rows)] == ["hello", ""]  # an empty line is a blank row
    with pytest.raises(InputError, match=r"t.csv:4: this row has 1 field\(s\); the text column"):
        next(rows)


def test_jsonl_field_with_a_lone_surrogate_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "bad \\ud800 half"}\n')
    with pytest.raises(InputError, match=r"t.jsonl:2: field 'text' is not valid Unicode.*U\+D800"):
        list(open_source(path, "text").rows())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"txt": "typo"}', r"t.jsonl:2: this object has no field 'text' \(it has \['txt'\]\)"),
        ('{"text": 3}', r"t.jsonl:2: field 'text' is a int, not a string"),
        ('["text"]', r"t.jsonl:2: each line must be a JSON object, not a list"),
        ('{"text": "cut', r"t.jsonl:2: invalid JSON"),
    ],
)
def test_a_jsonl_line_without_its_text_names_line_and_fix(tmp_path, line, message):
    """A record missing the text field is an error (as a CSV row missing the column is), not a
    silent blank; every JSONL error names the line and says how to fix it."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(InputError, match=message) as err:
        list(open_source(path, "text").rows())
    assert "fix:" in str(err.value)


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "the disk is full"), (errno.EROFS, "read-only filesystem")],
)
def test_full_or_read_only_disk_is_a_named_error(
    model_dir, text_file, tmp_path, monkeypatch, code, words
):
    def failing_save(file, *args, **kwargs):
        raise OSError(code, "simulated", str(getattr(file, "name", file)))

    monkeypatch.setattr(shards.np, "save", failing_save)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["encode-bulk", str(model_dir), str(text_file), str(out), "--pooler", "mean"]
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert words in message and "fix:" in message and "shard-00000" in message
    assert "Traceback" not in result.output


def test_an_unterminated_quote_is_refused_with_its_line(tmp_path):
    """Issue 25 item 4: `"unterminated,1` used to swallow every following row into one text."""
    from dclr.data.readers import open_source
    from dclr.errors import InputError

    bad = tmp_path / "bad.csv"
    bad.write_text('text,id\nfine,0\n"unterminated,1\nok,2\nalso ok,3\n')
    with pytest.raises(InputError, match="never closed") as err:
        list(open_source(bad, column="text").rows())
    assert err.value.line == 3 and "bad.csv" in str(err.value)
    good = tmp_path / "good.csv"
    good.write_text('text,id\n"two\nlines, quoted",1\nok,2\n')  # a quoted newline is fine
    assert list(open_source(good, column="text").rows()) == ["two\nlines, quoted", "ok"]


def test_the_summary_sets_rows_read_beside_lines(model_dir, tmp_path):
    """Issue 25 item 4: encode-bulk prints the records it read beside the file's lines, so a
    merge of rows (or a header, or a quoted newline) is visible: 4 rows from 6 lines here."""
    from dclr.data.readers import physical_lines

    data = tmp_path / "in.csv"
    data.write_text('text,id\nhello,1\nworld,2\n\n"multi\nline",3')  # no final newline
    assert physical_lines(data) == 6
    result = CliRunner().invoke(app, ["encode-bulk", str(model_dir), str(data),
                                      str(tmp_path / "out"), "--column", "text",
                                      "--pooler", "mean"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "from 4 rows (6 lines in in.csv)" in " ".join(result.output.split())
