"""Write files and folders so that a reader sees the old version or the new one, never a part.

A file is written under a temporary name in the same folder, flushed to disk (`fsync`) and renamed
over the target (`os.replace`, atomic on POSIX); a folder is filled under a temporary name and
renamed into place when complete. A crash, a kill or a full disk at any moment leaves the target
as it was, plus at most a temporary file that the next write replaces. `file_record` /
`check_file` give the size and sha256 that manifests store so a truncated or altered file is
detected later, and `named_os_error` turns "disk full" and "read-only folder" into errors that name
the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dclr.errors import DclrError

# Bytes hashed per read: large enough for disk speed, small enough for memory.
_HASH_CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """A hidden sibling of `path` unique to this process (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_with(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call `write(tmp)` to fill a temporary sibling of `path`, fsync it, rename it to `path`."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        write(tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return path


def write_bytes(path: str | Path, data: bytes) -> Path:
    return write_with(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: str | Path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_array(path: str | Path, array: Any) -> Path:
    """A numpy array as a .npy file at `path` (never pickled), written whole or not at all."""
    import numpy as np

    def save(tmp: Path) -> None:
        with tmp.open("wb") as fh:
            np.save(fh, array, allow_pickle=False)

    return write_with(path, save)


@contextlib.contextmanager
def staged_folder(target: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `target`; on success it replaces `target`.

    An existing `target` is moved aside first and deleted only after the new folder is in place;
    on an error the temporary folder is removed and `target` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with file.open("rb") as fh:
                    os.fsync(fh.fileno())
        old = target.with_name(f".{target.name}.{os.getpid()}.old")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        fsync_dir(target.parent)
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_record(path: str | Path) -> dict[str, Any]:
    """{"bytes", "sha256"} of a file, as manifests store it."""
    path = Path(path)
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def check_file(path: str | Path, record: dict[str, Any], hash_: bool = True) -> str | None:
    """Why `path` does not match its manifest `record` (missing, size, checksum), or None."""
    path = Path(path)
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != record.get("bytes"):
        return f"{size} bytes, the manifest says {record.get('bytes')} (truncated or replaced)"
    if hash_ and record.get("sha256") and sha256_file(path) != record["sha256"]:
        return "its sha256 differs from the manifest's (the file was altered)"
    return None


class StorageError(DclrError, OSError):
    """Writing failed for a reason the user must fix: disk full, read-only folder, permissions."""


_STORAGE_FIXES = {
    errno.ENOSPC: ("the disk is full", "free space on that disk, or write to another folder"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space, or write to another folder"),
    errno.EROFS: (
        "the folder is on a read-only filesystem",
        "choose an output folder on a writable disk",
    ),
    errno.EACCES: ("permission denied", "choose a folder you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a folder you can write to"),
    errno.EFBIG: (
        "the file is larger than this process may write (ulimit -f, or the filesystem's limit)",
        "raise the limit (ulimit -f unlimited), or write to another filesystem",
    ),
}


def named_os_error(
    err: OSError, path: str | Path | None = None, needed: int | None = None
) -> OSError:
    """`err` as a StorageError naming the file and the fix, when it is a storage problem."""
    known = _STORAGE_FIXES.get(err.errno or -1)
    if known is None:
        return err
    return _storage_error(err.errno or 0, err.filename or path, needed)


# How writers that are not Python's own report a full disk: safetensors ("No space left on device
# (os error 28)"), numpy's tofile ("190080 requested and 13280 written"); torch.save only says
# "unexpected pos ..." and is recognised by the free space left.
_FULL_DISK_TEXT = re.compile(r"No space left on device|os error 28|requested and \d+ written")
# Below this much free space a failed write is taken to be a full disk.
_NEARLY_FULL = 1 << 20


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the disk holding `path` (or its nearest existing parent), or None."""
    try:
        return shutil.disk_usage(_existing(Path(path).absolute())).free
    except OSError:
        return None


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _storage_error(code: int, where: str | Path | None, needed: int | None) -> StorageError:
    what, fix = _STORAGE_FIXES[code]
    if code in (errno.ENOSPC, errno.EDQUOT) and where is not None:
        free = free_bytes(where)
        sizes = []
        if needed:
            sizes.append(f"this write needs about {human_bytes(needed)}")
        if free is not None:
            sizes.append(f"{human_bytes(free)} free")
        if sizes:
            what = f"{what} ({', '.join(sizes)})"
    return StorageError(f"{where}: cannot write: {what}\n  fix: {fix}")


def storage_problem(
    err: BaseException, path: str | Path, needed: int | None = None
) -> StorageError | None:
    """The StorageError `err` means when writing `path` failed on a full or read-only disk, or
    None when it is some other failure."""
    if isinstance(err, StorageError):
        return err
    if isinstance(err, OSError) and (err.errno or -1) in _STORAGE_FIXES:
        return _storage_error(err.errno or 0, err.filename or path, needed)
    if _FULL_DISK_TEXT.search(str(err)):
        return _storage_error(errno.ENOSPC, path, needed)
    free = free_bytes(path)
    if free is not None and (free < _NEARLY_FULL or (needed is not None and free < needed)):
        return _storage_error(errno.ENOSPC, path, needed)
    return None


@contextlib.contextmanager
def storage_guard(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn a full or read-only disk while writing `path` into a StorageError that names the
    path, the bytes needed and the fix; any other error passes through unchanged."""
    try:
        yield
    except Exception as err:
        named = storage_problem(err, path, needed)
        if named is None or named is err:
            raise
        raise named from err
