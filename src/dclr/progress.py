"""Progress bars that honour `TQDM_DISABLE`.

tqdm reads its `TQDM_*` variables once, at import, into the defaults of `tqdm.__init__`; an explicit
`disable=` argument then wins. Every bar in dclr passes one (rank 0 only, `show_progress=False`), so
without this helper `TQDM_DISABLE=1` would be ignored and logs of long runs would fill with bars.
Here the variable is read when the bar is made. Our choice where tqdm is loose: "", "0", "false",
"no" and "off" (any case) leave bars on; tqdm itself turns any non-empty value into True.

`announce` is the line a long phase says before its bar (what, how much, an estimate): the
command line listens (`listening`) and prints it; the Python API stays silent.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from tqdm.auto import tqdm

_OFF_WORDS = frozenset({"", "0", "false", "no", "off"})


def disabled_by_env() -> bool:
    """Whether `TQDM_DISABLE` asks for no bars."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() not in _OFF_WORDS


_QUIET: ContextVar[bool] = ContextVar("dclr_quiet_bars", default=False)


@contextlib.contextmanager
def without_bars() -> Iterator[None]:
    """No progress bars inside the block (`dclr.train(show_progress=False)`)."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def progress_bar(*, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A `tqdm` bar, off when `enabled` is false, `TQDM_DISABLE` says so or inside
    `without_bars`; other kwargs go to tqdm."""
    if "disable" in kwargs:
        raise TypeError("progress_bar: pass enabled=, not disable=")
    return tqdm(disable=not enabled or disabled_by_env() or _QUIET.get(), **kwargs)


def short_number(value: float) -> str:
    """`value` to 4 significant digits for a bar or a line (2.346, 0.0001, 1.234e-05): a fixed
    4 decimals showed a loss of 1e-4 as 0.0000."""
    return f"{value:.4g}"


Announce = Callable[[str], None]
_LISTENER: ContextVar[Announce | None] = ContextVar("dclr_announce", default=None)


@contextlib.contextmanager
def listening(listener: Announce) -> Iterator[None]:
    """Send `announce` lines to `listener` (the command line prints them) inside the block."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def announce(text: str) -> None:
    """Say what a long phase is about to do (how much, an estimate); silent without a listener
    (the Python API), so the core returns data and the caller decides what to show."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(text)
