"""Start `dclr serve` as a child process and find its address; read a process's memory.

Used by the tests and the load benchmark: the server binds port 0 on 127.0.0.1 and prints the
port it got (`dclr.serving.server.LISTEN_LINE`), so parallel runs never collide on a port.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dclr.serving.server import LISTEN_LINE

# Seconds to wait for a server to load its model and bind (MiniLM on a busy 2-core box: ~10 s).
START_TIMEOUT_S = 120.0
# Seconds a server gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0


@dataclass
class ServerProcess:
    """A running `dclr serve` child: its process, base URL and what it printed."""

    process: subprocess.Popen
    url: str
    output: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid


def _pump(stream: object, lines: list[str], ready: threading.Event, found: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line)
        if LISTEN_LINE in line and not found:
            match = re.search(r"(http://\S+?)/?$", line.strip())
            if match:
                found.append(match.group(1))
                ready.set()
    ready.set()  # the process ended


@contextlib.contextmanager
def serve_process(
    args: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
    command: Sequence[str] | None = None,
) -> Iterator[ServerProcess]:
    """Run `python -m dclr serve ARGS --port 0` (or `command`, a server that binds port 0 the
    same way, e.g. `dclr.serve(..., port=0)`) until the block exits; yields its address."""
    command = list(command or [sys.executable, "-m", "dclr", "serve", *args, "--port", "0"])
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()
    threading.Thread(target=_pump, args=(process.stdout, lines, ready, found), daemon=True).start()
    try:
        if not ready.wait(timeout) or not found:
            raise RuntimeError(
                f"dclr serve did not start within {timeout:.0f} s:\n{''.join(lines)[-3000:]}"
            )
        yield ServerProcess(process, found[0], lines)
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def process_memory(pid: int) -> dict[str, float]:
    """Resident memory of a process in MiB: `rss` now and `peak` (VmHWM) since it started."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return {"rss": fields["VmRSS"], "peak": fields["VmHWM"]}
