"""Bulk encoding: readers for every input format, shards equal to `encode`, resume after a crash,
and 2 processes (torch.multiprocessing, CPU) writing the same vectors as one."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import make_tiny_model_dir
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.data.readers import open_source
from dclr.errors import InputError
from dclr.indexing import bulk, shards
from dclr.indexing.bulk import BulkSettings, bulk_encode, read_manifest
from dclr.indexing.shards import iter_shards
from dclr.models.encoder import SentenceEncoder

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SENTENCES = [
    f"sentence number {i} about {['cats', 'dogs', 'birds', 'fish'][i % 4]}" for i in range(23)
]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SentenceEncoder.from_pretrained(model_dir, pooler="mean")


@pytest.fixture
def text_file(tmp_path):
    """23 sentences with blank and whitespace lines at known rows, CRLF, no final newline."""
    lines = list(SENTENCES)
    lines.insert(3, "")
    lines.insert(10, "   ")
    path = tmp_path / "in.txt"
    path.write_bytes("\r\n".join(lines).encode())
    return path


def _all(out_dir):
    manifest = read_manifest(out_dir)
    parts = list(iter_shards(out_dir, manifest["n_shards"], manifest["shard_format"]))
    return np.concatenate([r for r, _ in parts]), np.concatenate([v for _, v in parts])


# ---- readers ---------------------------------------------------------------------------------


def test_text_rows_keep_line_numbers(text_file):
    source = open_source(text_file)
    rows = list(source.rows())
    assert source.count() == len(rows) == 25
    assert rows[3] == "" and rows[10] == "" and rows[0] == SENTENCES[0]
    assert rows[-1] == SENTENCES[-1]


def test_table_formats_read_the_named_column(tmp_path):
    texts = ["plain", 'has "quotes", and a comma', "spans\ntwo lines", ""]
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        'id,text\n1,plain\n2,"has ""quotes"", and a comma"\n3,"spans\ntwo lines"\n4,\n'
    )
    tsv_path = tmp_path / "t.tsv"
    tsv_path.write_text("text\tid\nplain\t1\n")
    jsonl_path = tmp_path / "t.jsonl"
    jsonl_path.write_text("\n".join(json.dumps({"id": i, "body": t}) for i, t in enumerate(texts)))
    parquet_path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": texts[:3] + [None], "n": [1, 2, 3, 4]}), parquet_path)

    assert list(open_source(csv_path, "text").rows()) == texts
    assert open_source(csv_path, "text").count() == 4
    assert list(open_source(tsv_path, "text").rows()) == ["plain"]
    assert list(open_source(jsonl_path, "body").rows()) == texts
    assert list(open_source(parquet_path, "body").rows()) == texts
    assert open_source(parquet_path, "body").count() == 4


@pytest.mark.parametrize(
    ("name", "content", "column", "message"),
    [
        ("a.csv", "id,text\n1,x\n", None, "needs --column"),
        ("a.csv", "id,text\n1,x\n", "body", "choose one of: id, text"),
        ("a.txt", "x\n", "text", "--column applies to csv"),
        ("a.jsonl", '{"t": "a"}\n{"t": 3}\n', "t", ":2: field 't' is a int"),
        ("a.jsonl", '{"t": "a"}\n{bad\n', "t", ":2: invalid JSON"),
        ("a.txt", b"ok\n\xff\xfe\n", None, ":2: bytes"),
    ],
)
def test_bad_inputs_name_the_file_line_and_fix(tmp_path, name, content, column, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InputError) as err:
        list(open_source(path, column).rows())
    assert message in str(err.value)


def test_parquet_non_string_column_is_refused(tmp_path):
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"n": [1, 2]}), path)
    with pytest.raises(InputError, match="not strings"):
        list(open_source(path, "n").rows())


# ---- shards ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_shard_round_trip(tmp_path, fmt, dtype):
    rows = np.array([0, 2, 5])
    vectors = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    shards.write_shard(tmp_path, 0, rows, vectors, fmt, dtype)
    got_rows, got = shards.read_shard(tmp_path, 0, fmt)
    assert got.dtype == np.dtype(dtype) and got.shape == (3, 7)
    np.testing.assert_array_equal(got_rows, rows)
    np.testing.assert_array_equal(got, vectors.astype(dtype))
    assert not list(tmp_path.glob(".*tmp")), "no temporary files left behind"


# ---- bulk encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shard_size", "batch_size", "n_shards"),
    [(7, 128, 4), (10, 1, 3)],  # batch 1: chunks of 8 texts, so a shard of 9 or 10 takes two
)
def test_bulk_equals_encode_and_skips_blank_rows(
    model_dir, encoder, text_file, tmp_path, shard_size, batch_size, n_shards
):
    """Every shard's texts are encoded in chunks of `CHUNK_BATCHES` batches; with the default
    batch size a shard here is one chunk, so the second case makes shards of several chunks."""
    settings = BulkSettings(shard_size=shard_size, batch_size=batch_size)
    manifest = bulk_encode(
        str(model_dir), open_source(text_file), tmp_path / "out", settings, pooler="mean"
    )
    assert manifest["complete"] and manifest["rows"] == 25 and manifest["n_shards"] == n_shards
    assert manifest["vectors"] == 23 and manifest["dim"] == 32
    rows, vectors = _all(tmp_path / "out")
    assert 3 not in rows and 10 not in rows and len(rows) == 23
    np.testing.assert_allclose(vectors, encoder.encode(SENTENCES), atol=1e-5)


def test_bulk_packs_its_batches_on_the_cpu_as_encode_does(model_dir):
    # a padded batch costs its longest text in every row: one cut 50 MB corpus line among short
    # ones took encode-bulk from 723 to 1,073 MiB (benchmarks/long_line_memory.py); packed: 706
    encoder = bulk.load_encoder(str(model_dir), "mean", bulk.torch.device("cpu"))
    assert encoder.packing


def test_float16_parquet_normalized(model_dir, encoder, text_file, tmp_path):
    settings = BulkSettings(shard_size=10, shard_format="parquet", dtype="float16", normalize=True)
    bulk_encode(str(model_dir), open_source(text_file), tmp_path / "o", settings, pooler="mean")
    _, vectors = _all(tmp_path / "o")
    assert vectors.dtype == np.float16
    expected = encoder.encode(SENTENCES, normalize=True)
    np.testing.assert_allclose(vectors.astype(np.float32), expected, atol=2e-3)  # fp16 rounding
    assert len(list((tmp_path / "o").glob("shard-*.parquet"))) == 3


def test_resume_after_a_crash_encodes_only_missing_shards(
    model_dir, text_file, tmp_path, monkeypatch
):
    source, out = open_source(text_file), tmp_path / "out"
    settings = BulkSettings(shard_size=5)
    real_write = bulk.write_shard
    written = []

    def crash_on_third(folder, index, *args):
        if len(written) == 2:
            raise KeyboardInterrupt("simulated kill")
        written.append(index)
        return real_write(folder, index, *args)

    monkeypatch.setattr(bulk, "write_shard", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        bulk_encode(str(model_dir), source, out, settings, pooler="mean")
    assert not read_manifest(out)["complete"]
    assert sorted(p.name for p in out.glob("shard-*.npy") if ".rows" not in p.name) == [
        "shard-00000.npy",
        "shard-00001.npy",
    ]

    monkeypatch.setattr(bulk, "write_shard", real_write)
    encoded = []
    real_encode = bulk.encode_shards

    def counting_encode(*args, **kwargs):
        encoded.append(real_encode(*args, **kwargs))
        return encoded[-1]

    monkeypatch.setattr(bulk, "encode_shards", counting_encode)
    manifest = bulk_encode(str(model_dir), source, out, settings, pooler="mean")
    assert manifest["complete"] and manifest["vectors"] == 23
    assert encoded == [14]  # only shards 2-4: rows 10-24, of which row 10 is blank
    resumed_rows, resumed = _all(out)

    fresh = tmp_path / "fresh"
    bulk_encode(str(model_dir), source, fresh, settings, pooler="mean")
    fresh_rows, fresh_vectors = _all(fresh)
    np.testing.assert_array_equal(resumed_rows, fresh_rows)
    np.testing.assert_array_equal(resumed, fresh_vectors)


def test_resume_with_other_settings_or_model_is_refused(model_dir, text_file, tmp_path):
    source, out = open_source(text_file), tmp_path / "out"
    bulk_encode(str(model_dir), source, out, BulkSettings(shard_size=5), pooler="mean")
    with pytest.raises(InputError, match="finished job with another shard_size .it was 5") as err:
        bulk_encode(str(model_dir), source, out, BulkSettings(shard_size=6), pooler="mean")
    assert "pass --overwrite to replace them" in str(err.value)
    other = make_tiny_model_dir(tmp_path / "other", seed=1)
    with pytest.raises(InputError, match=r"another model \(weights, pooler or precision: it was"):
        bulk_encode(str(other), source, out, BulkSettings(shard_size=5), pooler="mean")
    text_file.write_text(text_file.read_text() + "one more line\n")  # the corpus edited
    with pytest.raises(InputError, match=r"another version of .*in\.txt \(its size or mod"):
        bulk_encode(str(model_dir), open_source(text_file), out, BulkSettings(shard_size=5),
                    pooler="mean")  # fmt: skip
    manifest = bulk_encode(
        str(other), source, out, BulkSettings(shard_size=6), pooler="mean", overwrite=True
    )
    assert manifest["shard_size"] == 6 and manifest["complete"]


@pytest.mark.slow
def test_two_processes_write_the_same_vectors_as_one(model_dir, text_file, tmp_path):
    source, settings = open_source(text_file), BulkSettings(shard_size=4)
    one = bulk_encode(str(model_dir), source, tmp_path / "one", settings, pooler="mean")
    two = bulk_encode(
        str(model_dir), source, tmp_path / "two", settings, pooler="mean", processes=2
    )
    assert two["complete"] and two["n_shards"] == one["n_shards"] == 7
    rows_one, vectors_one = _all(tmp_path / "one")
    rows_two, vectors_two = _all(tmp_path / "two")
    np.testing.assert_array_equal(rows_one, rows_two)
    np.testing.assert_allclose(vectors_two, vectors_one, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_torchrun_two_ranks_write_the_same_vectors_as_one(model_dir, text_file, tmp_path):
    settings = BulkSettings(shard_size=4)
    bulk_encode(str(model_dir), open_source(text_file), tmp_path / "one", settings, pooler="mean")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        "--master_addr=127.0.0.1", "--master_port=0", "--rdzv_backend=c10d",
        "--rdzv_endpoint=127.0.0.1:0", "-m", "dclr", "encode-bulk", str(model_dir),
        str(text_file), str(tmp_path / "two"), "--pooler", "mean", "--shard-size", "4",
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_manifest(tmp_path / "two")["complete"]
    rows_one, vectors_one = _all(tmp_path / "one")
    rows_two, vectors_two = _all(tmp_path / "two")
    np.testing.assert_array_equal(rows_one, rows_two)
    np.testing.assert_allclose(vectors_two, vectors_one, atol=1e-6, rtol=0)


def test_cli_encode_bulk_csv(model_dir, encoder, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,text\n" + "".join(f'{i},"{s}"\n' for i, s in enumerate(SENTENCES[:5])))
    result = CliRunner().invoke(
        app,
        ["encode-bulk", str(model_dir), str(path), str(tmp_path / "o"), "--column", "text",
         "--pooler", "mean", "--format", "parquet", "--dtype", "float16"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "5 vectors of dimension 32" in result.output
    _, vectors = _all(tmp_path / "o")
    np.testing.assert_allclose(vectors.astype(np.float32), encoder.encode(SENTENCES[:5]), atol=2e-3)
    bad = CliRunner().invoke(app, ["encode-bulk", str(model_dir), str(path), str(tmp_path / "x")])
    assert bad.exit_code == 2 and "needs --column" in bad.output


# ---- the Python API ----------------------------------------------------------------------------


def test_the_api_encodes_in_bulk_and_reads_the_vectors_back(model_dir, text_file, tmp_path):
    """`dclr.encode_bulk` is `dclr encode-bulk`; `dclr.read_bulk` gives the (rows, vectors) of a
    finished job in input order (what a user reassembled from the shards by hand before)."""
    import dclr

    out = tmp_path / "api"
    manifest = dclr.encode_bulk(model_dir, text_file, out, shard_size=7, pooler="mean",
                                shard_format="parquet")  # fmt: skip
    assert manifest["complete"] and manifest["n_shards"] == 4
    cli = tmp_path / "cli"
    done = CliRunner().invoke(app, ["encode-bulk", str(model_dir), str(text_file), str(cli),
                                    "--shard-size", "7", "--pooler", "mean", "--format", "parquet"])  # fmt: skip
    assert done.exit_code == 0, done.output
    rows, vectors = dclr.read_bulk(out)
    expected_rows, expected = _all(cli)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_array_equal(vectors, expected)
    assert rows.dtype == np.int64 and list(rows[:4]) == [0, 1, 2, 4]  # row 3 is blank


def test_reading_an_unfinished_bulk_job_is_refused_with_the_fix(model_dir, text_file, tmp_path):
    import dclr

    with pytest.raises(InputError, match="no finished bulk job here .manifest.json missing"):
        dclr.read_bulk(tmp_path)
    bulk_encode(str(model_dir), open_source(text_file), tmp_path / "o", BulkSettings(7),
                pooler="mean")  # fmt: skip
    manifest = read_manifest(tmp_path / "o")
    manifest["complete"] = False  # as a job interrupted before its last shard leaves it
    (tmp_path / "o" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"(?s)not complete.*dclr encode-bulk MODEL INPUT DIR"):
        dclr.read_bulk(tmp_path / "o")
