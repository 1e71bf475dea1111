"""Stream the texts of a large file, one row at a time, in a fixed order.

A *row* is a line of a .txt file, a record of a .csv/.tsv file (after the header), a line of a
.jsonl file, or a row of a .parquet file; rows are numbered from 0 in file order. Every row yields
one string: blank lines, empty fields and nulls yield "" (callers skip them with `is_blank`), so
row numbers always match the file. Nothing is read into memory beyond one row (one record batch for
Parquet), and a row is at most `MAX_LINE_CHARS` long: a longer text line is cut (and counted, a
`LongLinesCut` warning), a longer CSV/JSONL record refused by line number. LF, CRLF and a lone CR
(old Mac files) each end a line (universal newlines).
"""

from __future__ import annotations

import csv
import io
import json
import re
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from dclr.data.text import decode_utf8
from dclr.errors import InputError

InputFormat = Literal["auto", "txt", "csv", "tsv", "jsonl", "parquet"]
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_TABULAR = ("csv", "tsv", "jsonl", "parquet")
# Bytes read at a time when counting lines: large enough for disk speed, small for memory.
_COUNT_CHUNK = 1 << 22
# Rows per Parquet record batch: bounded memory, few Python calls.
_PARQUET_BATCH = 8192
# Characters of one line (a text file's line, a CSV/JSONL record). Why 4 Mi: 64x what any encoder
# reads of a text (512 tokens x `CHARS_PER_TOKEN_BOUND` = 64 Ki characters), so no real text loses
# a token, while a line costs bounded memory downstream too (the copies a run makes of its texts:
# stripping, lower-casing for duplicates; +110 MB peak for a 16 Mi-character line in `dclr train`).
# A longer text line is cut and counted (`LongLinesCut`); a longer CSV or JSONL record cannot be
# cut without breaking it, and is refused by line number.
MAX_LINE_CHARS = 1 << 22


class LongLinesCut(UserWarning):
    """Lines of a text file longer than `MAX_LINE_CHARS` were cut to it (count and line numbers
    in the message)."""


# csv's default field limit is 128 KiB; one text of a bulk file may legitimately be longer.
_CSV_FIELD_LIMIT = MAX_LINE_CHARS
# What errors="surrogateescape" makes of bytes that are not UTF-8 (U+DC80..U+DCFF).
_ESCAPED = re.compile("[\udc80-\udcff]")


def unencodable(text: str) -> str | None:
    """Why `text` cannot be UTF-8 (a lone surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"character {err.start} is the lone surrogate U+{ord(text[err.start]):04X}"
    return None


def is_blank(text: str) -> bool:
    """True for rows that are not encoded: empty, or only whitespace and invisible characters
    (Unicode control and format characters such as U+200B ZERO WIDTH SPACE or U+FEFF, which the
    tokenizers drop: such a text would encode as the empty text; issue 47 point 6)."""
    stripped = text.strip()
    if not stripped or stripped.isprintable():  # printable after strip: a visible first char
        return not stripped
    return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in stripped)


_INVISIBLE = frozenset({"Cc", "Cf"})


@dataclass(frozen=True)
class TextSource:
    """The texts of one file. Build it with `open_source`, which validates path and column.

    `format` is resolved (never "auto"); `column` names the CSV/JSONL field or Parquet column
    (None for .txt).
    """

    path: Path
    format: str
    column: str | None

    def identity(self) -> dict[str, object]:
        """What a resumed job checks to know the file has not changed since it started."""
        stat = self.path.stat()
        return {
            "path": str(self.path),
            "format": self.format,
            "column": self.column,
            "bytes": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        }

    def rows(self) -> Iterator[str]:
        """Every row's text, in file order (blank rows as "")."""
        if self.format == "txt":
            return _txt_rows(self.path)
        if self.format in ("csv", "tsv"):
            return _csv_rows(self.path, self.column, "\t" if self.format == "tsv" else ",")
        if self.format == "jsonl":
            return _jsonl_rows(self.path, self.column)
        return _parquet_rows(self.path, self.column)

    def ids(self, column: str) -> Iterator[str]:
        """Every row's value in `column` as a string (a user's own document id: numbers are
        written as JSON writes them), in file order; "" where a row has none."""
        if self.format in ("csv", "tsv"):
            return _csv_rows(self.path, column, "\t" if self.format == "tsv" else ",")
        if self.format == "jsonl":
            return _jsonl_ids(self.path, column)
        if self.format == "parquet":
            return _parquet_ids(self.path, column)
        raise InputError(
            "a text file has no id column", path=self.path, fix="drop --id-column, or index a table"
        )

    def count(self) -> int:
        """The number of rows (a fast byte scan for .txt/.jsonl, metadata for Parquet)."""
        if self.format in ("txt", "jsonl"):
            return _count_lines(self.path)
        if self.format == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(self.path).metadata.num_rows)
        return sum(1 for _ in self.rows())


def open_source(
    path: str | Path, column: str | None = None, input_format: InputFormat = "auto"
) -> TextSource:
    """Check `path` and `column` and return the source; the format comes from the suffix."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        what = "the input is a folder, not a file" if path.is_dir() else "input file not found"
        raise InputError(what, path=path, fix="pass an existing file")
    if input_format not in get_args(InputFormat):
        raise InputError(
            f"unknown input format {input_format!r}",
            fix=f"choose from {', '.join(get_args(InputFormat))}",
        )
    fmt = _SUFFIXES.get(path.suffix.lower(), "txt") if input_format == "auto" else input_format
    if fmt in _TABULAR and not column:
        raise InputError(
            f"a {fmt} file needs --column to say which field holds the text",
            path=path,
            fix=f"pass --column NAME (Python: column=NAME; dclr train: --set data.column=NAME, "
            f"or data.column: NAME "
            f"in the recipe); its columns: "
            f"{', '.join(_columns(path, fmt)) or 'none found'}",
        )
    if fmt == "txt" and column:
        raise InputError(
            "--column applies to csv/tsv/jsonl/parquet files, not to text files (so does a "
            "recipe's data.column)",
            path=path,
            fix="drop --column, or pass --input-format to read the file as a table",
        )
    if fmt in ("csv", "tsv", "parquet"):
        available = _columns(path, fmt)
        if column not in available:
            raise InputError(
                f"no column {column!r}",
                path=path,
                line=1 if fmt != "parquet" else None,
                fix=f"choose one of: {', '.join(available)}",
            )
    return TextSource(path, fmt, column)


def table_format(path: str | Path) -> str | None:
    """The table format a file's suffix names (csv, tsv, jsonl, parquet), or None (a text file)."""
    return _SUFFIXES.get(Path(path).suffix.lower())


def _columns(path: Path, fmt: str) -> list[str]:
    """Column names of a table file (for error messages and validation)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except Exception as err:  # pyarrow raises several types for a file that is not Parquet
            raise InputError(f"not a Parquet file: {err}", path=path) from None
    if fmt in ("csv", "tsv"):
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            return next(csv.reader(fh, delimiter="\t" if fmt == "tsv" else ","), [])
    if fmt == "jsonl":
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        return []
                    return list(record) if isinstance(record, dict) else []
    return []


def _count_lines(path: Path) -> int:
    """Lines as `_lines` reads them: LF, CRLF and a lone CR each end one."""
    n, last, carried_cr = 0, b"\n", False
    with path.open("rb") as fh:
        while chunk := fh.read(_COUNT_CHUNK):
            n += chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
            if carried_cr and chunk.startswith(b"\n"):  # a CRLF split between two chunks
                n -= 1
            carried_cr, last = chunk.endswith(b"\r"), chunk[-1:]
    return n + (last not in (b"\n", b"\r"))  # a last line without a newline still counts


def _lines(path: Path, too_long: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without its line ending) per line of a UTF-8 file, in bounded
    memory: LF, CRLF and a lone CR end a line; a line longer than `MAX_LINE_CHARS` is cut to it
    (`too_long="cut"`, counted in one `LongLinesCut` warning at the end) or refused by number
    (`"refuse"`); bytes that are not UTF-8 are an error naming their line."""
    limit = MAX_LINE_CHARS
    cut: list[int] = []
    with path.open("rb") as raw:
        fh = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape", newline=None)
        number = 0
        while line := fh.readline(limit + 1):
            number += 1
            whole = line.endswith("\n")
            text = line[:-1] if whole else line
            _check_utf8(text, path, number)
            if not whole and len(text) > limit:  # read (and check) the rest in bounded pieces
                if too_long == "refuse":
                    raise _record_too_long(path, number)
                text = text[:limit]
                cut.append(number)
                while (rest := fh.readline(limit + 1)) and not rest.endswith("\n"):
                    _check_utf8(rest, path, number)
                _check_utf8(rest, path, number)
            yield number, text
    if cut:
        shown = ", ".join(map(str, cut[:5])) + (", ..." if len(cut) > 5 else "")
        warnings.warn(
            LongLinesCut(
                f"{path.name}: {len(cut):,} line(s) longer than {limit:,} characters were cut to "
                f"it (line {shown}); the model reads only the first few hundred tokens of a text"
            ),
            stacklevel=2,
        )


def _record_too_long(path: Path, number: int) -> InputError:
    return InputError(
        f"this record is longer than {MAX_LINE_CHARS:,} characters",
        path=path,
        line=number,
        fix="split the text or remove that line (a text is read only up to its model's token "
        "limit anyway)",
    )


def _check_utf8(text: str, path: Path, number: int) -> None:
    """Raise `decode_utf8`'s error naming line `number` if `text` holds bytes that are not UTF-8
    (escaped by errors="surrogateescape")."""
    if not text.isascii() and _ESCAPED.search(text):
        decode_utf8(text.encode("utf-8", "surrogateescape"), path, number)


def physical_lines(path: str | Path) -> int:
    """Lines in a text file (a last line without a newline counts), for reports that set the
    records read beside them: a CSV record may span lines, a header is one."""
    lines, last = 0, b"\n"
    with Path(path).open("rb") as fh:
        while chunk := fh.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def _txt_rows(path: Path) -> Iterator[str]:
    for _, text in _lines(path, too_long="cut"):
        yield text.strip()


def _bounded_records(fh: io.TextIOBase, path: Path) -> Iterator[str]:
    """The lines of a CSV file opened with newline="", each refused by number when longer than
    `MAX_LINE_CHARS` (+2: the CRLF of a line of exactly that length)."""
    number = 0
    while line := fh.readline(MAX_LINE_CHARS + 2):
        number += 1
        if len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
            raise _record_too_long(path, number)
        _check_utf8(line, path, number)  # by physical line: the decoder reads ahead in chunks
        yield line


def _csv_rows(path: Path, column: str | None, delimiter: str) -> Iterator[str]:
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as fh:
        # strict: a quote opened and never closed is an error, not a field that swallows every
        # following line to the end of the file
        reader = csv.reader(_bounded_records(fh, path), delimiter=delimiter, strict=True)
        start = 1  # physical line where the record being read starts
        try:
            header = next(reader, [])
            position = header.index(column) if column in header else None
            if position is None:
                raise InputError(f"no column {column!r}", path=path, line=1)
            start = reader.line_num + 1
            for record in reader:
                start = reader.line_num + 1  # where the next record starts
                if not record:  # an empty line: a blank row
                    yield ""
                elif position < len(record):
                    yield record[position].strip()
                else:
                    raise InputError(
                        f"this row has {len(record)} field(s); the text column {column!r} is "
                        f"field {position + 1} of the header",
                        path=path,
                        line=reader.line_num,
                        fix="add the missing field(s) to that row (an empty text is written as "
                        "an empty field: a,,c) or remove the row",
                    )
        except UnicodeDecodeError:
            raise InputError(
                "invalid UTF-8 bytes",
                path=path,
                line=reader.line_num + 1,
                fix="re-encode the file as UTF-8 or fix that line",
            ) from None
        except csv.Error as err:
            if "end of data" in str(err):
                raise InputError(
                    "a quoted field is never closed: from here to the end of the file would be "
                    "one text",
                    path=path,
                    line=start,
                    fix="close the quote on that line (a literal quote inside a quoted field is "
                    'written twice: "a ""b"" c") or remove it',
                ) from None
            raise InputError(
                f"malformed CSV: {err}",
                path=path,
                line=reader.line_num,
                fix="a field that holds the separator, a quote or a line break is quoted, and a "
                'quote inside it written twice ("a ""b"" c"); TSV files follow the same rule',
            ) from None


def _jsonl_objects(path: Path) -> Iterator[tuple[int, dict[Any, Any] | None]]:
    """(line number, the line's JSON object) per line, None for a blank line; a line that is
    not a JSON object is an error naming it."""
    for number, text in _lines(path, too_long="refuse"):
        line = text.strip()
        if not line:
            yield number, None
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"invalid JSON: {err.msg}",
                path=path,
                line=number,
                fix='each line is one JSON object, e.g. {"text": "a sentence"}: fix or drop it',
            ) from None
        if not isinstance(record, dict):
            raise InputError(
                f"each line must be a JSON object, not a {type(record).__name__}",
                path=path,
                line=number,
                fix='write it as an object with the text field, e.g. {"text": "a sentence"}',
            )
        yield number, record


def _jsonl_rows(path: Path, column: str | None) -> Iterator[str]:
    for number, record in _jsonl_objects(path):
        if record is None:
            yield ""
            continue
        if column not in record:
            raise InputError(
                f"this object has no field {column!r} (it has {sorted(map(str, record))[:5]})",
                path=path,
                line=number,
                fix=f'add "{column}" to that line (an empty text is "{column}": ""), choose the '
                "field with --column, or remove the line",
            )
        value = record.get(column)
        if value is not None and not isinstance(value, str):
            raise InputError(
                f"field {column!r} is a {type(value).__name__}, not a string",
                path=path,
                line=number,
                fix=f'write the text as a JSON string ("{column}": "...") or drop that line',
            )
        if value and (bad := unencodable(value)) is not None:
            raise InputError(
                f"field {column!r} is not valid Unicode: {bad}",
                path=path,
                line=number,
                fix="a \\uD800-\\uDFFF escape must be half of a surrogate pair: fix or "
                "drop that line",
            )
        yield (value or "").strip()


def _parquet_rows(path: Path, column: str | None) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(path)
    kind = handle.schema_arrow.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(
            f"column {column!r} holds {kind}, not strings", path=path, fix="pick a text column"
        )
    for batch in handle.iter_batches(batch_size=_PARQUET_BATCH, columns=[column]):
        for value in batch.column(0).to_pylist():
            yield (value or "").strip()


def _id_text(value: object) -> str:
    """A document id as text: strings as they are, anything else as JSON writes it."""
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _jsonl_ids(path: Path, column: str) -> Iterator[str]:
    for _, record in _jsonl_objects(path):
        yield "" if record is None else _id_text(record.get(column))


def _parquet_ids(path: Path, column: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(path)
    if column not in handle.schema_arrow.names:
        raise InputError(
            f"no column {column!r}",
            path=path,
            fix=f"pick one of: {', '.join(handle.schema_arrow.names)}",
        )
    for batch in handle.iter_batches(batch_size=_PARQUET_BATCH, columns=[column]):
        for value in batch.column(0).to_pylist():
            yield _id_text(value)


@dataclass(frozen=True)
class NumberedRows:
    """A file's rows, one vector each (`dclr encode`, `dclr dualcse encode`): `texts` of the rows
    kept, stripped; `numbers` the 1-based row number of each (a text file's line, a table's record
    after its header); `blank` the 1-based numbers of the blank rows (kept as "" unless left out)."""

    texts: list[str]
    numbers: list[int]
    blank: list[int]


def numbered_rows(source: TextSource, skip_blank: bool = False) -> NumberedRows:
    """Every row of `source`, blank ones as "" (row i is vector i, as sentence-transformers gives
    one vector per input), or without them with `skip_blank`."""
    lines = list(source.rows())
    blank = [i for i, line in enumerate(lines, 1) if not line.strip()]
    left_out = set(blank) if skip_blank else set()
    kept = [i for i in range(1, len(lines) + 1) if i not in left_out]
    return NumberedRows([lines[i - 1].strip() for i in kept], kept, blank)
