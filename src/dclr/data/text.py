"""Strict UTF-8 line reading with errors that name the file and the line."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dclr.errors import InputError


def decode_utf8(raw: bytes, path: str | Path, first_line: int = 1) -> str:
    """Decode `raw` as strict UTF-8; on failure name the 1-based line of the file that holds the
    bad bytes (`raw` starts at line `first_line`: a line, or a block of a larger file).

    The one UTF-8 decoder of file contents in dclr: whole files, CSV/JSONL/text lines, memory-
    mapped corpora and BEIR folders all report a bad byte the same way."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = first_line + raw.count(b"\n", 0, err.start)
        raise InputError(
            f"bytes {raw[err.start : err.end]!r} are not valid UTF-8",
            path=path,
            line=line,
            fix="re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or fix that line",
        ) from None


def read_text(path: str | Path) -> str:
    """Read a whole file as strict UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path, fix="check the path and the data layout")
    return decode_utf8(path.read_bytes(), path)


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 file, split as SentEval does (`str.splitlines`)."""
    return read_text(path).splitlines()


def csv_records(path: Path, reader: Any, width: int) -> Iterator[tuple[int, list[str]]]:
    """(line where the record starts, fields) for each non-blank record after the header.

    `reader` is a `csv.reader` already past its header; records whose field count is not `width`
    and malformed CSV raise InputError naming the file and line.
    """
    start = reader.line_num + 1  # the line on which the next record starts
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row or not any(field.strip() for field in row):
                continue
            if len(row) != width:
                raise InputError(
                    f"{len(row)} fields, the header has {width}",
                    path=path,
                    line=line,
                    fix="quote fields that contain commas or newlines, or fix that record",
                )
            yield line, row
    except csv.Error as err:
        raise InputError(
            f"malformed CSV: {err}",
            path=path,
            line=reader.line_num,
            fix="check the quoting of that record (a field with a quote must be quoted, its "
            'quotes doubled: "")',
        ) from None
