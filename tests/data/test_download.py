"""download_data against a tiny fake SentEval tarball served from 127.0.0.1 (no internet)."""

from __future__ import annotations

import functools
import hashlib
import io
import socket
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dclr.data.download import URL_ENV_VAR, download_data, required_files
from dclr.data.sts import STS_SUBSETS, load_task
from dclr.errors import InputError

# SimCSE's senteval.tar puts the task folders under this prefix.
SIMCSE_PREFIX = "data/downstream/"
PAIRS_PER_SUBSET = 3  # the last gold line is blank (unscored), so 2 scored pairs per subset
STSB_ROWS = 3
SICK_ROWS = 3


def fake_senteval() -> dict[str, str]:
    """A few lines per file in SentEval's formats (Moses-tokenized, as in the real tarball)."""
    files: dict[str, str] = {}
    for task, subsets in STS_SUBSETS.items():
        for subset in subsets:
            folder = f"STS/{task}-en-test"
            files[f"{folder}/STS.input.{subset}.txt"] = (
                f"A man is playing a guitar .\tA man plays the guitar . ({subset})\n"
                "It 's raining .\tThe sun is out .\n"
                "A woman slices onions .\tSomeone is cutting an onion .\n"
            )
            files[f"{folder}/STS.gs.{subset}.txt"] = "4.800\n0.250\n\n"
    for split in ("train", "dev", "test"):
        files[f"STS/STSBenchmark/sts-{split}.csv"] = (
            f"main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off .\tAn air plane is taking off . ({split})\n"
            "main-captions\tMSRvid\t2012test\t0004\t3.800\tA man is playing a flute .\tA man is playing a bamboo flute .\n"
            'main-news\theadlines\t2013\t0010\t0.500\tHe said "no .\tShe left .\textra\tcolumns\n'
        )
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        files[f"SICK/{name}"] = (
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
            "1\tA group of kids is playing in a yard\tA group of boys is playing in a yard\t4.5\tNEUTRAL\n"
            "2\tA man is cooking\tNobody is cooking\t3.1\tCONTRADICTION\n"
            "3\tA dog runs\tA cat sleeps\t1.2\tNEUTRAL\n"
        )
    files["MR/rt-polarity.pos"] = "a good film .\n"  # a transfer task: laid out too
    files["README.txt"] = "not a task folder: left out\n"
    return files


def write_tar(
    path: Path, files: dict[str, str], prefix: str = SIMCSE_PREFIX, extra: tuple = ()
) -> Path:
    """Write `files` (under `prefix`) and any extra raw TarInfo members to a tar at `path`."""
    with tarfile.open(path, "w") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info, data in extra:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return path


@dataclass
class Server:
    """A local HTTP server over `folder`; `hits` counts GET requests; with `unannounced` it
    sends no Content-Length (the body ends when the connection closes); with `short_by` it
    announces the file's length but closes the connection that many bytes early."""

    folder: Path
    base: str = ""
    hits: list[str] = field(default_factory=list)
    unannounced: bool = False
    short_by: int = 0

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    folder = tmp_path / "www"
    folder.mkdir()
    state = Server(folder)

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits.append(self.path)
            if not (state.unannounced or state.short_by):
                super().do_GET()
                return
            body = (folder / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if state.short_by:  # the full length announced, fewer bytes sent
                self.send_header("Content-Length", str(len(body)))
                body = body[: -state.short_by]
            self.end_headers()  # without Content-Length: HTTP/1.0, read until the close
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=folder))
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    # A short poll interval so shutdown() returns at once (the default 0.5 s adds up per test).
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def download(data_dir: Path, url: str, **kwargs) -> Path:
    return download_data(data_dir, base_urls={"senteval": url}, show_progress=False, **kwargs)


def assert_no_leftovers(data_dir: Path) -> None:
    assert not list(data_dir.glob(".dclr-download-*"))


@pytest.mark.parametrize("prefix", [SIMCSE_PREFIX, "", "SentEval/data/downstream/"])
def test_download_lays_out_senteval(tmp_path: Path, server: Server, prefix: str) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval(), prefix)
    data_dir = tmp_path / "cache" / "data"  # parents are created

    root = download(data_dir, server.url("senteval.tar"))

    assert root == data_dir
    assert all(path.is_file() for path in required_files(data_dir))
    assert sorted(p.name for p in (data_dir / "senteval").iterdir()) == [
        "MR",
        "SICK",
        "SOURCE.json",  # the URL, sha256 and size of the archive
        "STS",
    ]
    assert sorted(p.name for p in data_dir.iterdir()) == ["senteval"]
    for task, subsets in STS_SUBSETS.items():
        groups = load_task(root, task, "test")
        assert [g.subset for g in groups] == list(subsets)
        assert all(len(g) == PAIRS_PER_SUBSET - 1 for g in groups)
    stsb = load_task(root, "STSBenchmark", "test")[0]
    assert len(stsb) == STSB_ROWS
    assert stsb.scores.tolist() == [5.0, 3.8, 0.5]
    assert stsb.sentences2[0] == "An air plane is taking off . (test)"
    sick = load_task(root, "SICKRelatedness", "dev")[0]
    assert len(sick) == SICK_ROWS
    assert sick.sentences1[1] == "A man is cooking"


def test_second_call_is_a_no_op_and_force_redownloads(tmp_path: Path, server: Server) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval())
    url = server.url("senteval.tar")
    data_dir = tmp_path / "data"
    download(data_dir, url)
    assert len(server.hits) == 1
    marker = data_dir / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv"
    before = marker.stat().st_mtime_ns

    assert download(data_dir, url) == data_dir
    assert len(server.hits) == 1  # no network access at all
    assert marker.stat().st_mtime_ns == before

    assert download(data_dir / "senteval", url) == data_dir  # the folder itself is accepted too
    assert len(server.hits) == 1

    (data_dir / "senteval" / "stale.txt").write_text("from an older layout")
    download(data_dir, url, force=True)
    assert len(server.hits) == 2
    assert not (data_dir / "senteval" / "stale.txt").exists()
    assert_no_leftovers(data_dir)


def test_incomplete_existing_folder_needs_force(tmp_path: Path, server: Server) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval())
    data_dir = tmp_path / "data"
    (data_dir / "senteval" / "STS").mkdir(parents=True)
    with pytest.raises(InputError, match="lacks .* required files") as info:
        download(data_dir, server.url("senteval.tar"))
    assert "--force" in str(info.value)
    assert server.hits == []
    download(data_dir, server.url("senteval.tar"), force=True)
    assert load_task(data_dir, "STSBenchmark", "test")


def test_url_from_environment(tmp_path: Path, server: Server, monkeypatch) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval())
    monkeypatch.setenv(URL_ENV_VAR, server.url("senteval.tar"))
    root = download_data(tmp_path / "data", show_progress=False)
    assert load_task(root, "STSBenchmark", "test")
    assert server.hits == ["/senteval.tar"]


def test_file_url_for_a_manual_download(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "senteval.tar", fake_senteval())
    root = download(tmp_path / "data", archive.as_uri())
    assert len(load_task(root, "SICKRelatedness", "test")[0]) == SICK_ROWS


def test_sha256_is_checked(tmp_path: Path, server: Server) -> None:
    archive = write_tar(server.folder / "senteval.tar", fake_senteval())
    url = server.url("senteval.tar")
    with pytest.raises(InputError, match="sha256 of the download is"):
        download(tmp_path / "bad", url, sha256="0" * 64)
    assert not (tmp_path / "bad" / "senteval").exists()
    assert_no_leftovers(tmp_path / "bad")
    good = hashlib.sha256(archive.read_bytes()).hexdigest().upper()  # case does not matter
    download(tmp_path / "good", url, sha256=good)


def test_404_names_the_url_and_the_fix(tmp_path: Path, server: Server) -> None:
    url = server.url("missing.tar")
    with pytest.raises(InputError) as info:
        download(tmp_path / "data", url)
    message = str(info.value)
    assert url in message
    assert "404" in message
    assert "--data-dir" in message and "fix:" in message
    assert not (tmp_path / "data" / "senteval").exists()
    assert_no_leftovers(tmp_path / "data")


def test_connection_refused_is_an_input_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/senteval.tar"
    with pytest.raises(InputError, match="download failed") as info:
        download(tmp_path / "data", url)
    assert url in str(info.value)


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", data: bytes = b"x"):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    "members",
    [
        (_member("../evil"),),
        (_member("data/downstream/../../evil"),),
        (_member("/tmp/dclr-evil"),),
        (_member("data/link", tarfile.SYMTYPE, "../../evil"),),
        (_member("data/hard", tarfile.LNKTYPE, "../evil"),),
        (_member("data/abs", tarfile.SYMTYPE, "/etc/passwd"),),
        # Each link looks inside on its own; only resolving `l` shows that `l/m` points outside.
        (_member("l", tarfile.SYMTYPE, "."), _member("l/m", tarfile.SYMTYPE, "..")),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "symlink", "hardlink", "abs-symlink", "chain"],
)
def test_unsafe_archives_are_rejected(tmp_path: Path, server: Server, members) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval(), extra=members)
    data_dir = tmp_path / "deep" / "data"
    with pytest.raises(InputError, match="refusing to extract") as info:
        download(data_dir, server.url("senteval.tar"))
    assert server.url("senteval.tar") in str(info.value)
    assert not (tmp_path / "deep" / "evil").exists()
    assert not (tmp_path / "evil").exists()
    assert not (data_dir / "senteval").exists()
    assert_no_leftovers(data_dir)


def test_without_the_data_filter_links_are_refused(tmp_path: Path, monkeypatch) -> None:
    """Pythons before 3.11.4 lack tarfile's "data" filter: then every link is refused."""
    monkeypatch.delattr(tarfile, "data_filter")
    plain = write_tar(tmp_path / "plain.tar", fake_senteval())
    assert load_task(download(tmp_path / "a", plain.as_uri()), "STSBenchmark", "test")
    inside = _member("data/downstream/MR/alias.pos", tarfile.SYMTYPE, "rt-polarity.pos")
    linked = write_tar(tmp_path / "linked.tar", fake_senteval(), extra=(inside,))
    with pytest.raises(InputError, match="lacks the 'data' filter"):
        download(tmp_path / "b", linked.as_uri())


def test_symlink_inside_the_archive_is_allowed(tmp_path: Path, server: Server) -> None:
    inside = _member("data/downstream/MR/alias.pos", tarfile.SYMTYPE, "rt-polarity.pos")
    write_tar(server.folder / "senteval.tar", fake_senteval(), extra=(inside,))
    root = download(tmp_path / "data", server.url("senteval.tar"))
    assert (root / "senteval" / "MR" / "alias.pos").read_text() == "a good film .\n"


def test_archive_without_sts_and_sick(tmp_path: Path, server: Server) -> None:
    files = {k: v for k, v in fake_senteval().items() if not k.startswith("SICK/")}
    write_tar(server.folder / "senteval.tar", files)
    with pytest.raises(InputError, match="no folder with both STS/ and SICK/"):
        download(tmp_path / "data", server.url("senteval.tar"))


def test_not_a_tar(tmp_path: Path, server: Server) -> None:
    (server.folder / "senteval.tar").write_text("<html>rate limited</html>")
    with pytest.raises(InputError, match="not a readable tar archive"):
        download(tmp_path / "data", server.url("senteval.tar"))


def test_broken_archive_leaves_existing_data_untouched(tmp_path: Path, server: Server) -> None:
    write_tar(server.folder / "good.tar", fake_senteval())
    data_dir = tmp_path / "data"
    download(data_dir, server.url("good.tar"))
    files = fake_senteval()
    del files["STS/STS14-en-test/STS.gs.tweet-news.txt"]
    write_tar(server.folder / "broken.tar", files)

    with pytest.raises(InputError, match="file not found") as info:
        download(data_dir, server.url("broken.tar"), force=True)
    assert "STS.gs.tweet-news.txt" in str(info.value)
    assert all(path.is_file() for path in required_files(data_dir))
    assert_no_leftovers(data_dir)


# ---- issue 13: a pinned checksum per URL and caps on size ----------------------------------------
def test_every_default_source_has_a_pin_entry() -> None:
    from dclr.data.download import SHA256_BY_URL, SOURCES

    assert set(SOURCES.values()) <= set(SHA256_BY_URL)  # the value may still be "" (unverified)


def test_checksum_from_environment_and_the_record_of_what_was_downloaded(
    tmp_path: Path, server: Server, monkeypatch
) -> None:
    import json

    from dclr.data.download import SHA256_ENV_VAR, SOURCE_RECORD

    archive = write_tar(server.folder / "senteval.tar", fake_senteval())
    monkeypatch.setenv(SHA256_ENV_VAR, "f" * 64)
    with pytest.raises(InputError, match="sha256 of the download is"):
        download(tmp_path / "bad", server.url("senteval.tar"))
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    monkeypatch.setenv(SHA256_ENV_VAR, digest)
    root = download(tmp_path / "good", server.url("senteval.tar"))
    record = json.loads((root / "senteval" / SOURCE_RECORD).read_text())
    assert record == {
        "url": server.url("senteval.tar"),
        "sha256": digest,
        "bytes": archive.stat().st_size,
    }


def test_pinned_url_must_match_its_checksum(tmp_path: Path, server: Server, monkeypatch) -> None:
    from dclr.data import download as module

    write_tar(server.folder / "senteval.tar", fake_senteval())
    url = server.url("senteval.tar")
    monkeypatch.setitem(module.SHA256_BY_URL, url, "0" * 64)
    with pytest.raises(InputError, match="expected 0000"):
        download(tmp_path / "data", url)


def test_download_larger_than_the_cap_is_refused(tmp_path: Path, server: Server) -> None:
    write_tar(server.folder / "senteval.tar", fake_senteval())
    with pytest.raises(InputError, match="the limit is 1000 bytes"):
        download(tmp_path / "data", server.url("senteval.tar"), max_bytes=1000)
    assert_no_leftovers(tmp_path / "data")


def test_a_download_without_a_length_is_cut_at_the_cap(tmp_path: Path, server: Server) -> None:
    """A server that announces no length (chunked, or a body that ends with the connection) is
    cut while reading, past the cap: the test above only ever reached the announced length's
    refusal."""
    write_tar(server.folder / "senteval.tar", fake_senteval())
    server.unannounced = True
    with pytest.raises(InputError, match="sent more than 1000 bytes"):
        download(tmp_path / "data", server.url("senteval.tar"), max_bytes=1000)
    assert_no_leftovers(tmp_path / "data")
    root = download(tmp_path / "data", server.url("senteval.tar"))  # under the cap: read whole
    assert (root / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv").exists()
    assert server.hits == ["/senteval.tar"] * 2


def test_a_download_cut_short_of_its_announced_length_is_refused(
    tmp_path: Path, server: Server
) -> None:
    """http.client returns b"" (no error) when the connection closes before Content-Length
    bytes arrived: only the count after the loop tells a truncated archive from a whole one."""
    archive = write_tar(server.folder / "senteval.tar", fake_senteval())
    size = archive.stat().st_size
    server.short_by = 512  # one tar block: the rest may still read as a valid archive
    url = server.url("senteval.tar")
    with pytest.raises(
        InputError, match=f"connection closed after {size - 512} of {size} bytes"
    ) as info:
        download(tmp_path / "data", url)
    assert url in str(info.value) and "fix:" in str(info.value)
    assert not (tmp_path / "data" / "senteval").exists()
    assert_no_leftovers(tmp_path / "data")


def test_a_failed_swap_puts_the_old_folder_back(
    tmp_path: Path, server: Server, monkeypatch
) -> None:
    """The old senteval/ is moved aside before the new one is renamed in; if that rename fails,
    the old folder (with whatever the user kept there) is renamed back, not deleted with the
    temporary folder."""
    write_tar(server.folder / "senteval.tar", fake_senteval())
    data_dir = tmp_path / "data"
    download(data_dir, server.url("senteval.tar"))
    kept = data_dir / "senteval" / "notes.txt"
    kept.write_text("mine")
    rename = Path.rename

    def failing_rename(self: Path, target):
        if Path(target) == data_dir / "senteval" and self.parent.name == "root":  # staged one
            raise OSError("disk went away")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="disk went away"):
        download(data_dir, server.url("senteval.tar"), force=True)
    assert kept.read_text() == "mine"
    assert all(path.is_file() for path in required_files(data_dir))
    assert_no_leftovers(data_dir)


def test_archive_expanding_past_the_cap_is_refused_before_extraction(
    tmp_path: Path, server: Server
) -> None:
    import gzip

    bomb = io.BytesIO()
    with tarfile.open(fileobj=bomb, mode="w") as tar:
        info = tarfile.TarInfo("data/downstream/STS/huge.txt")
        info.size = 50_000_000  # zeros compress ~1000x
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    (server.folder / "senteval.tar").write_bytes(gzip.compress(bomb.getvalue()))
    with pytest.raises(InputError, match="add up to more than 10000000 bytes"):
        download(tmp_path / "data", server.url("senteval.tar"), max_extracted_bytes=10_000_000)
    assert_no_leftovers(tmp_path / "data")


def test_the_api_downloads_and_checks_as_the_commands_do(
    tmp_path: Path, server: Server, monkeypatch
) -> None:
    """`dclr.download_data` / `dclr.check_data` are `dclr data download` / `dclr data check`:
    the same folder ($DCLR_DATA_DIR when none is given) and the same counts."""
    from typer.testing import CliRunner

    import dclr
    from dclr.cli.main import app

    write_tar(server.folder / "senteval.tar", fake_senteval())
    data_dir = tmp_path / "data"
    monkeypatch.setenv("DCLR_DATA_DIR", str(data_dir))
    assert dclr.download_data(url=server.url("senteval.tar")) == data_dir
    counts = dclr.check_data()
    assert counts["STSBenchmark"] == STSB_ROWS and set(counts) == set(STS_SUBSETS) | {
        "STSBenchmark",
        "SICKRelatedness",
    }
    shown = CliRunner().invoke(app, ["data", "check"])
    assert shown.exit_code == 0, shown.output
    for task, count in counts.items():
        assert any(task in line and line.rstrip(" │|").endswith(str(count))
                   for line in shown.output.splitlines()), (task, shown.output)  # fmt: skip
