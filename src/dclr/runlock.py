"""An exclusive lock on an output folder (a training run, a bulk job, an index), naming its holder.

`FolderLock(folder, "dclr train")` opens `folder/.dclr.lock` and takes an exclusive `flock` on it
without waiting: of two processes that try at once exactly one succeeds, and the other is refused at
once with a `LockHeld` error naming the holder, whose pid, host, start time and command line the
file records. The kernel drops the lock when its holder exits in any way (kill -9 included), so a
lock left by a dead process is stale by construction and simply taken over; the file's record then
names the new holder. Release removes the file while still holding the lock, and a process that
locked a file just removed notices (its inode is gone) and tries again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from dclr.errors import DclrError

LOCK_FILE = ".dclr.lock"
# Attempts when the lock file is removed between our open and our lock (its holder released it).
TRIES = 5


class LockHeld(DclrError):
    """Another live process writes into this folder."""


def describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {when}: "
        f"{holder.get('command') or '?'}"
    )


class FolderLock:
    """`with FolderLock(folder, purpose):` - hold `folder/.dclr.lock` for the block."""

    def __init__(self, folder: str | Path, purpose: str) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.purpose = purpose
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> dict[str, Any]:
        """The lock file's record ({} if absent, empty or unreadable)."""
        try:
            record = json.loads(self.path.read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            return {}
        return record if isinstance(record, dict) else {}

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(TRIES):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = self.holder()
                raise LockHeld(
                    f"{self.folder} is in use by {describe(holder)} "
                    f"({holder.get('purpose', 'dclr')})\n"
                    "  fix: wait for that process to finish or stop it, or write to another folder"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released and removed between our open and our lock
                os.close(fd)
                continue
            record = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.time(),
                "purpose": self.purpose,
                "command": " ".join(sys.argv),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
            self._fd = fd
            return self
        raise LockHeld(f"{self.path}: could not take the lock (other processes keep taking it)")

    def check(self) -> None:
        """Raise LockHeld if another process holds the lock now (a fast early check; the lock
        itself is only held after `acquire`)."""
        if not self.path.is_file():
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.holder()
            raise LockHeld(
                f"{self.folder} is in use by {describe(holder)} "
                f"({holder.get('purpose', 'dclr')})\n"
                "  fix: wait for that process to finish or stop it, or write to another folder"
            ) from None
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # while still locked: nobody can have taken it meanwhile
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
