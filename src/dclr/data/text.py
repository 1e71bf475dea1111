"""Strict UTF-8 line reading with errors that name the file and the line."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dclr.errors import InputError

# Characters a tokenizer is shown per token it may keep. Why 128: a token of text (a word of up
# to 100 characters or a piece of one, punctuation, the space before it) spans at most ~101
# characters (WordPiece splits words of up to 100 characters; byte-level BPE and SentencePiece
# pieces are shorter), so a text cut at `max_tokens * 128` characters keeps its first
# `max_tokens` tokens (tests/models/test_clip.py). Only text whose first tokens are mostly
# single [UNK]s for words longer than 127 characters, or are separated by runs of more than 27
# spaces, could differ. Tokenising the cut text costs bounded memory: the fast tokenizers use
# ~130 bytes per input character, 6.7 GB for a 50 MB line tokenised whole.
CHARS_PER_TOKEN_BOUND = 128


def clip_for_tokens(text: str, max_tokens: int) -> str:
    """`text` cut to the characters that can hold its first `max_tokens` tokens (above)."""
    bound = max_tokens * CHARS_PER_TOKEN_BOUND
    return text if len(text) <= bound else text[:bound]


def clip_all(texts: list[str], max_tokens: int) -> list[str]:
    """`clip_for_tokens` of each text (a new list only when one is cut)."""
    bound = max_tokens * CHARS_PER_TOKEN_BOUND
    if all(len(t) <= bound for t in texts):
        return texts
    return [t[:bound] for t in texts]


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
