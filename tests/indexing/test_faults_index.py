"""Fault injection on index folders: mixed builds, torn files, two writers, a crash mid-rewrite.

Before issue 13 `vectors.faiss`, the offsets file and `index.json` were overwritten in place; two
writers crashed; an HNSW `vectors.faiss` under a flat `index.json` searched silently at FAISS's
default efSearch; a `dclr search` query with invalid Unicode gave a raw traceback.
"""

import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

faiss = pytest.importorskip("faiss")

from helpers import write_pseudo_corpus  # noqa: E402

from dclr.cli.main import app  # noqa: E402
from dclr.data.readers import open_source  # noqa: E402
from dclr.errors import InputError  # noqa: E402
from dclr.indexing import index as index_module  # noqa: E402
from dclr.indexing.index import INDEX_FILE, IndexParams, SearchIndex, build_index  # noqa: E402
from dclr.indexing.searcher import check_queries  # noqa: E402
from dclr.runlock import FolderLock, LockHeld  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_pseudo_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", 30)


def build(model_dir, corpus_file, folder, kind):
    return build_index(str(model_dir), open_source(corpus_file), folder, IndexParams(kind), "mean")


@pytest.fixture(scope="module")
def flat_and_hnsw(model_dir, corpus_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("indexes")
    build(model_dir, corpus_file, root / "flat", "flat")
    build(model_dir, corpus_file, root / "hnsw", "hnsw")
    return root / "flat", root / "hnsw"


def test_hnsw_file_under_a_flat_index_json_is_an_error(flat_and_hnsw, tmp_path):
    flat, hnsw = flat_and_hnsw
    mixed = tmp_path / "mixed"
    shutil.copytree(flat, mixed)
    shutil.copy(hnsw / INDEX_FILE, mixed / INDEX_FILE)
    (mixed / "index.json").write_text(  # as an older dclr wrote it: no file list to compare
        (mixed / "index.json").read_text().replace('"files"', '"_files"')
    )
    with pytest.raises(InputError, match="holds a hnsw index .* describes a flat index"):
        SearchIndex(mixed)


def test_torn_index_file_is_named(flat_and_hnsw, tmp_path):
    torn = tmp_path / "torn"
    shutil.copytree(flat_and_hnsw[0], torn)
    data = (torn / INDEX_FILE).read_bytes()
    (torn / INDEX_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="vectors.faiss: .*truncated or replaced") as err:
        SearchIndex(torn)
    assert "dclr index build" in str(err.value)


def test_crash_while_rewriting_leaves_the_old_index_usable(model_dir, corpus_file, tmp_path):
    folder = tmp_path / "index"
    build(model_dir, corpus_file, folder, "flat")
    before = SearchIndex(folder).search(SearchIndex(folder).index.reconstruct_n(0, 1), 3)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing texts")

    real = index_module._write_texts
    index_module._write_texts = crash
    try:
        with pytest.raises(KeyboardInterrupt):
            build(model_dir, corpus_file, folder, "hnsw")
    finally:
        index_module._write_texts = real
    survivor = SearchIndex(folder)
    assert survivor.params.kind == "flat"
    assert survivor.search(survivor.index.reconstruct_n(0, 1), 3) == before
    assert not list(folder.glob(".staging-*")), "the staging folder is cleaned up"


def test_second_writer_is_refused_naming_the_first(model_dir, corpus_file, tmp_path):
    folder = tmp_path / "index"
    lock = FolderLock(folder, "dclr index build")  # another build holds the folder
    with lock, pytest.raises(LockHeld, match="is in use by pid .*dclr index build"):
        build(model_dir, corpus_file, folder, "flat")


def test_search_query_with_invalid_unicode_is_a_named_error(flat_and_hnsw):
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")  # Latin-1 bytes on a UTF-8 command line
    result = CliRunner().invoke(app, ["search", bad, "--index", str(flat_and_hnsw[0])])
    assert result.exit_code == 2
    assert "query is not valid text" in result.output and "U+DCE9" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("query", ["", "   ", "\u200b\n"])
def test_an_empty_query_is_refused_as_the_server_refuses_it(flat_and_hnsw, query):
    """An empty query ranked the whole corpus by nothing (10 hits) where /search says
    `empty_text`: the command and the Python API refuse it, by name, before the model loads."""
    result = CliRunner().invoke(app, ["search", query, "--index", str(flat_and_hnsw[0])])
    assert result.exit_code == 2 and "the query is empty" in result.output
    assert "Traceback" not in result.output
    with pytest.raises(InputError, match="query 1 is empty"):
        check_queries(["a real query", query], 10)
    assert check_queries(["a real query"], 10) == ["a real query"]


def test_a_moved_model_folder_is_named_as_the_indexs_and_search_takes_its_new_place(
    model_dir, corpus_file, tmp_path
):
    model = shutil.copytree(model_dir, tmp_path / "model")
    build(model, corpus_file, tmp_path / "index", "flat")
    moved = model.rename(tmp_path / "moved")
    result = CliRunner().invoke(app, ["search", "guitar", "--index", str(tmp_path / "index")])
    assert result.exit_code == 2, result.output
    assert f"records its model as the folder {model}" in result.output
    assert "moved or deleted" in result.output and "pass --model" in result.output
    result = CliRunner().invoke(
        app, ["search", "guitar", "--index", str(tmp_path / "index"), "--model", str(moved)]
    )
    assert result.exit_code == 0, result.output


def test_an_index_folder_never_chooses_code_to_import(tmp_path):
    """Issue 25 item 3: index.json naming python-package:dclr_model beside a dclr_model.py that
    would run on import; `python -m dclr search` from inside the folder refuses, and runs nothing."""
    import json
    import os
    import subprocess

    from dclr.indexing.index import FORMAT_VERSION

    folder = tmp_path / "shared-index"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "dclr_model.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    meta = {"format": FORMAT_VERSION, "model": "python-package:dclr_model", "pooler": "mean",
            "count": 1, "dim": 32, "model_fingerprint": "x", "params": {"kind": "flat"}}  # fmt: skip
    (folder / "index.json").write_text(json.dumps(meta))
    env = {**os.environ, "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, "-m", "dclr", "search", "a query", "--index", "."],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "never chooses code to import" in said and "--model python-package:dclr_model" in said
    assert not marker.exists()


def test_a_same_size_file_from_another_build_is_refused_by_its_checksum(
    model_dir, corpus_file, tmp_path
):
    """Issue 25 item 3: an int8 build's vectors.faiss (same size, other vectors) copied into an
    fp32 folder was searched without complaint; the recorded sha256 now refuses it."""
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    build(model_dir, corpus_file, fp32, "flat")
    build_index(str(model_dir), open_source(corpus_file), int8, IndexParams("flat"), "mean",
                precision="int8")  # fmt: skip
    assert (int8 / INDEX_FILE).stat().st_size == (fp32 / INDEX_FILE).stat().st_size
    assert (int8 / INDEX_FILE).read_bytes() != (fp32 / INDEX_FILE).read_bytes()
    shutil.copy(int8 / INDEX_FILE, fp32 / INDEX_FILE)
    with pytest.raises(InputError, match="vectors.faiss: its sha256 differs"):
        SearchIndex(fp32)


def test_an_int8_index_refusing_a_model_says_its_rounding_follows_the_cpu(
    model_dir, corpus_file, tmp_path
):
    """An int8 model's weights are rounded for the CPU's int8 kernel (`static_int8`): the same
    model built on a CPU without VNNI is refused with a fix that says so; an fp32 one is not
    told about int8."""
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    build(model_dir, corpus_file, fp32, "flat")
    build_index(str(model_dir), open_source(corpus_file), int8, IndexParams("flat"), "mean",
                precision="int8")  # fmt: skip
    for folder, hinted in ((int8, True), (fp32, False)):
        with pytest.raises(InputError, match="not comparable") as err:
            SearchIndex(folder).check_model("0" * 64, str(model_dir))
        assert ("dclr cpu-policy" in str(err.value)) is hinted


def test_python_m_dclr_does_not_import_from_the_current_folder(tmp_path):
    """Issue 25 item 3: even a model named on the command line is not imported from the folder
    `python -m dclr` runs in (python -m puts it first on sys.path; dclr removes it)."""
    import os
    import subprocess

    marker = tmp_path / "ran"
    (tmp_path / "dclr_model.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (tmp_path / "in.txt").write_text("hello\n")
    result = subprocess.run(
        [sys.executable, "-m", "dclr", "encode", "python-package:dclr_model", "in.txt", "o.npy"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(index_module.__file__).parents[2])},
    )  # fmt: skip
    assert result.returncode != 0 and "not installed" in result.stderr + result.stdout
    assert not marker.exists()


def test_staging_folders_of_killed_builds_are_removed_by_the_next_build(
    model_dir, corpus_file, tmp_path
):
    """Issue 39 item 6: a build killed mid-write left `.staging-PID/` (up to 1.1 MB each), and
    later builds only removed their own pid's. The next build removes every one, under the lock
    (so never one a live build holds: a held lock refuses the build before it touches them)."""
    folder = tmp_path / "index"
    stale = [folder / ".staging-4000001", folder / ".staging-4000002"]
    for path in stale:
        path.mkdir(parents=True)
        (path / INDEX_FILE).write_bytes(b"\0" * 1024)  # a killed build's half-written file
    with FolderLock(folder, "dclr index build"), pytest.raises(LockHeld):
        build(model_dir, corpus_file, folder, "flat")  # a live build holds the folder
    assert all(path.is_dir() for path in stale), "nothing is removed without the lock"
    build(model_dir, corpus_file, folder, "flat")
    assert not list(folder.glob(".staging-*"))
    assert SearchIndex(folder).meta["count"] > 0
