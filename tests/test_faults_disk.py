"""Disk full in every writer (issue 25 item 6): a named error with the path, the bytes needed and
the fix, and no temporary file or folder left behind.

Before, `dclr train` to a full disk ended in safetensors' or torch's raw error and left an empty
`step-*.tmp/`; `encode-bulk` said "190080 requested and 13280 written" with no file and no fix.
The writers are made to fail the way each library fails on a full disk (the messages below were
recorded on a 200 KB tmpfs); one test fills a real tmpfs where the machine lets it mount one.
"""

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_tiny_model_dir

from dclr import atomic
from dclr.atomic import StorageError, storage_problem
from dclr.training import checkpoint as checkpoint_module

# What each writer raised on the full tmpfs.
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
NUMPY_FULL = "190080 requested and 13280 written"
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"


class SafetensorError(Exception):
    """Stands for safetensors' Rust error type (not an OSError)."""


def test_every_library_s_full_disk_is_recognised(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    for err in (OSError(errno.ENOSPC, "No space left on device"), SafetensorError(SAFETENSORS_FULL),
                OSError(NUMPY_FULL)):  # fmt: skip
        named = storage_problem(err, target, needed=3 << 20)
        assert isinstance(named, StorageError), err
        text = str(named)
        assert str(target) in text and "disk is full" in text
        assert "needs about 3.0 MB" in text and "free" in text and "fix: free space" in text
    # torch.save only says "unexpected pos": a full disk when the disk is (nearly) full ...
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 4096)
    assert isinstance(storage_problem(RuntimeError(TORCH_FULL), target), StorageError)
    # ... and the error itself when there is room: not every failure is a full disk
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 10 << 30)
    assert storage_problem(RuntimeError(TORCH_FULL), target) is None
    assert storage_problem(ValueError("bad shape"), target) is None


def test_read_only_folder_is_named(tmp_path):
    named = storage_problem(OSError(errno.EROFS, "Read-only file system"), tmp_path / "x")
    assert isinstance(named, StorageError) and "read-only" in str(named)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name or "staging" in p.name)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from dclr.models.encoder import SentenceEncoder

    path = make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", dropout=0.0)
    return SentenceEncoder.build(str(path), pooler="mean", mlp_head=False)


def save_step(encoder, root: Path):
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return checkpoint_module.save_checkpoint(root, 3, encoder, optimizer, scheduler, {})


def test_checkpoint_on_a_full_disk(encoder, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(checkpoint_module.torch, "save", full)
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 4096)
    root = tmp_path / "checkpoints"
    with pytest.raises(StorageError, match=r"step-00000003\.tmp: cannot write: the disk is full"):
        save_step(encoder, root)
    weights = sum(t.numel() * t.element_size() for t in encoder.state_dict().values())
    assert checkpoint_module.checkpoint_bytes(encoder, torch.optim.AdamW(encoder.parameters())) \
        == weights  # fmt: skip  # no optimizer state before the first step
    assert leftovers(root) == [] and list(root.iterdir()) == []


def test_export_on_a_full_disk(encoder, tmp_path, monkeypatch):
    from dclr.models import export

    def full(*args, **kwargs):
        raise SafetensorError(SAFETENSORS_FULL)

    monkeypatch.setattr(export, "_write_encoder", full)
    with pytest.raises(StorageError, match="best: cannot write: the disk is full") as err:
        export.save_encoder(encoder, tmp_path / "best")
    assert "this write needs about" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    # Over an earlier export, the failed one leaves that export as it was.
    monkeypatch.undo()
    best = export.save_encoder(encoder, tmp_path / "best")
    before = {p.name: p.read_bytes() for p in best.iterdir() if p.is_file()}
    monkeypatch.setattr(export, "_write_encoder", full)
    with pytest.raises(StorageError, match="best: cannot write: the disk is full"):
        export.save_encoder(encoder, best)
    assert best.is_dir(), "the earlier export was removed"
    assert {p.name: p.read_bytes() for p in best.iterdir() if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["best"]


def test_shard_on_a_full_disk(tmp_path, monkeypatch):
    from dclr.indexing import shards

    def full(file, array, **options):  # dclr.atomic.write_array saves through a handle
        file.write(b"\x93NUMPY partial")
        raise OSError(NUMPY_FULL)

    monkeypatch.setattr(np, "save", full)
    rows, vectors = np.arange(4), np.ones((4, 8), dtype=np.float32)
    with pytest.raises(StorageError, match="shard-00000.*disk is full.*needs about 160 bytes"):
        shards.write_shard(tmp_path, 0, rows, vectors, "npy", "float32")
    assert list(tmp_path.iterdir()) == []


def test_complementary_cache_on_a_full_disk(tmp_path, monkeypatch):
    from dclr.losses import complementary

    def full(file, array, **options):
        file.write(b"partial")  # the cache is written through a handle on its temp name
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(complementary.np, "save", full)  # numpy's, as dclr.atomic.write_array
    cache = tmp_path / "cache.npy"
    with pytest.raises(StorageError, match="disk is full.*needs about 64 bytes"):
        complementary.CachedComplementary.save(cache, np.ones((4, 8)), {})
    assert list(tmp_path.iterdir()) == []


def test_index_on_a_full_disk(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    from dclr.data.readers import open_source
    from dclr.indexing import index as index_module

    model = make_tiny_model_dir(tmp_path / "model", dropout=0.0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a cat\na dog\nthe man runs\n")
    import faiss

    def full(index, path):
        raise RuntimeError("Error: 'ret == (size_t)1' failed: write error in out.faiss")

    monkeypatch.setattr(faiss, "write_index", full)
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 0)
    out = tmp_path / "idx"
    with pytest.raises(StorageError, match="staging.*disk is full"):
        index_module.build_index(str(model), open_source(corpus), out,
                                 index_module.IndexParams("flat"), "mean")  # fmt: skip
    assert leftovers(out) == []


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 256 KB filesystem, where this machine lets the tests mount one (root on Linux)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_real_full_disk(encoder, tiny_tmpfs):
    """The tiny model's checkpoint (~1.5 MB of weights) on a 256 KB disk."""
    root = tiny_tmpfs / "checkpoints"
    with pytest.raises(StorageError, match="disk is full.*needs about .* MB.*free") as err:
        save_step(encoder, root)
    assert "step-00000003.tmp" in str(err.value)
    assert list(root.iterdir()) == []


def test_a_config_cut_short_by_a_file_size_limit_leaves_the_old_one(tmp_path):
    """config.yaml (as results.json and metrics.jsonl) goes to a temp name and is renamed: a
    write stopped by `ulimit -f` (EFBIG) leaves the file that was there, and the error is named."""
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "from dclr.atomic import named_os_error\n"
        "from dclr.recipe import load_config\n"
        "config = load_config(None, {'model': 'm'})\n"
        "target = Path(sys.argv[1])\n"
        "target.write_text('kept: true\\n')\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "try:\n"
        "    config.save(target)\n"
        "except OSError as err:\n"
        "    print(named_os_error(err, target))\n"
        "print(target.read_text(), end='')\n"
    )
    target = tmp_path / "config.yaml"
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    said = done.stdout
    assert "larger than this process may write" in said and "ulimit -f" in said, said
    assert said.endswith("kept: true\n")
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temp file left
