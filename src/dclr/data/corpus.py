"""Training corpora: a text file (one sentence per line), a column of a CSV/TSV, JSONL or Parquet
file, or a built-in corpus (the STS sentences, ...).

`TextFileCorpus` memory-maps the file and keeps only two int64 arrays (line start and end byte
offsets), so SimCSE's `wiki1m_for_simcse.txt` (1M lines) costs ~16 MB of index, not a million
Python strings. LF, CRLF and a lone CR each end a line (as `dclr.data.readers` reads text
files); a line longer than `MAX_LINE_CHARS` bytes is cut to it when read (`n_cut` counts them), so
one huge line costs bounded memory. A table's column is read by the readers every other text input uses
(`dclr.data.readers`: `dclr encode`, `encode-bulk`, `index build`), into memory. Empty and
whitespace-only lines or fields are skipped and counted.
"""

from __future__ import annotations

import codecs
import mmap
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dclr.data.readers import MAX_LINE_CHARS
from dclr.data.text import decode_utf8
from dclr.errors import InputError

# Bytes scanned for line ends at a time, and decoded at a time when checking UTF-8: bounded
# memory for any file and any line length (~2 bytes of masks per byte scanned: 32 MB at a time).
_SCAN_BYTES = 1 << 24
_BLOCK_LINES = 1 << 16  # lines per UTF-8 check, when they are short
_LINE_END = re.compile("\r\n|\r|\n")

RETRIEVAL_CORPUS = "retrieval-"  # + a built-in retrieval task: its test passages
BUILTIN_STS = "sts"  # the corpus name for every sentence of the STS/SICK evaluation data
# ConSERT's corpus: every text of the 7 STS datasets, unscored pairs and duplicates kept (89,192)
BUILTIN_STS_ALL = "sts_all"


class TextFileCorpus(Sequence[str]):
    """Sentences of a UTF-8 text file, one per line, read lazily from a memory map."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(
                "the corpus is a folder, not a file"
                if self.path.is_dir()
                else "corpus file not found",
                path=self.path,
                fix="pass a UTF-8 text file with one sentence per line",
            )
        raw = self.path.read_bytes() if self.path.stat().st_size == 0 else None
        if raw is not None:
            raise InputError(
                "corpus is empty",
                path=self.path,
                fix="the file needs at least 2 non-empty lines (one sentence each)",
            )
        with self.path.open("rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        buf = np.frombuffer(self._map, dtype=np.uint8)
        newlines = line_ends(buf)
        starts = np.concatenate([[0], newlines + 1])
        ends = np.concatenate([newlines, [len(buf)]])
        if starts[-1] == len(buf):  # file ends with a newline: no last line
            starts, ends = starts[:-1], ends[:-1]
        keep = self._validate(starts, ends)
        # The scan read every page of the file; training reads a few lines per step. Drop the
        # pages from this process (the OS keeps them cached): a 50 MB line no longer counts
        # 50 MB against the run for its whole length (issue 47 point 3).
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)
        self.n_skipped = int((~keep).sum())
        self._starts, self._ends = starts[keep], ends[keep]
        self.n_cut = int((self._ends - self._starts > MAX_LINE_CHARS).sum())
        if len(self._starts) < 2:
            raise InputError(
                f"corpus has {len(self._starts)} usable line(s) ({self.n_skipped} empty skipped)",
                path=self.path,
                fix="contrastive training needs at least 2 sentences",
            )

    def _validate(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Check UTF-8 block by block (naming the bad line) and mark non-blank lines; a block is
        at most `_BLOCK_LINES` lines and `_SCAN_BYTES` bytes, a longer line checked alone."""
        keep = np.ones(len(starts), dtype=bool)
        lo = 0
        while lo < len(starts):
            fit = int(np.searchsorted(ends, starts[lo] + _SCAN_BYTES, side="right"))
            hi = max(lo + 1, min(lo + _BLOCK_LINES, fit))
            if ends[lo] - starts[lo] > _SCAN_BYTES:
                keep[lo] = self._validate_long(int(starts[lo]), int(ends[lo]), lo + 1)
            else:
                block = self._map[starts[lo] : ends[hi - 1]]
                block = block[:-1] if block.endswith(b"\r") else block  # a last line's CRLF
                text = decode_utf8(block, self.path, first_line=lo + 1)
                keep[lo:hi] = [bool(line.strip()) for line in _LINE_END.split(text)]
            lo = hi
        return keep

    def _validate_long(self, start: int, end: int, number: int) -> bool:
        """Check one line longer than `_SCAN_BYTES` piece by piece; whether it is non-blank."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        blank = True
        for lo in range(start, end, _SCAN_BYTES):
            piece = self._map[lo : min(lo + _SCAN_BYTES, end)]
            try:
                blank = blank and not decoder.decode(piece, final=lo + _SCAN_BYTES >= end).strip()
            except UnicodeDecodeError:
                decode_utf8(piece, self.path, first_line=number)  # names the line and the bytes
                raise  # a character split across pieces: decode_utf8 saw it whole
        return not blank

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        start, end = self._starts[i], self._ends[i]
        if end - start > MAX_LINE_CHARS:  # cut (counted in n_cut); "ignore": a split character
            return self._map[start : start + MAX_LINE_CHARS].decode("utf-8", "ignore").strip()
        return self._map[start:end].decode("utf-8").rstrip("\r").strip()


def line_ends(buf: np.ndarray) -> np.ndarray:
    """Byte offsets that end a line of `buf` (uint8): every LF and every CR not followed by an
    LF (a CRLF line keeps its CR, stripped on reading), found `_SCAN_BYTES` at a time."""
    n, parts = len(buf), []
    for lo in range(0, n, _SCAN_BYTES):
        chunk = buf[lo : lo + _SCAN_BYTES]
        lf = np.flatnonzero(chunk == ord("\n")) + lo
        cr = np.flatnonzero(chunk == ord("\r")) + lo
        after = cr + 1
        lone = cr[(after >= n) | (buf[np.minimum(after, n - 1)] != ord("\n"))]
        parts.append(np.union1d(lf, lone))
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


class ListCorpus(Sequence[str]):
    """An in-memory list of sentences (the built-in STS corpus, few-shot subsets)."""

    def __init__(self, sentences: list[str], name: str = "list", minimum: int = 2) -> None:
        self.sentences = [s for s in sentences if s.strip()]
        self.n_skipped = len(sentences) - len(self.sentences)
        self.name = name
        if len(self.sentences) < minimum:
            raise InputError(
                f"corpus {name!r} has fewer than {minimum} sentences",
                fix="contrastive training needs at least 2 sentences (a few-shot subset, 1)",
            )

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return self.sentences[i]


def table_corpus(path: str | Path, column: str | None) -> ListCorpus:
    """The non-blank texts of `column` of a CSV/TSV, JSONL or Parquet file (the readers of
    `dclr.data.readers`: a file without a column is refused with its columns listed)."""
    from dclr.data.readers import open_source

    source = open_source(path, column)
    return ListCorpus(list(source.rows()), name=f"{source.path.name}:{column}")


def load_corpus(
    corpus: str, data_dir: str | Path | None = None, column: str | None = None
) -> Sequence[str]:
    """`sts` -> every distinct STS/SICK sentence (29,511 with the shared data); `sts_all` ->
    ConSERT's 89,192 texts (every pair, scored or not, duplicates kept); `scraped` / `clusters`
    -> the duplicate-rich corpora of `dclr.data.realistic`; `retrieval-paraphrase` /
    `retrieval-inli` -> the passages (corpus side only: no queries, no judgements) of a built-in
    retrieval task's test split (`dclr.data.retrieval_tasks`), for in-domain refinement; these
    need the data folder. Anything else -> a file: one sentence per line, or with `column` (or a
    .csv/.tsv/.jsonl/.parquet suffix, which needs one) that column of a table."""
    from dclr.data.realistic import REALISTIC, build_realistic
    from dclr.data.retrieval_tasks import BUILTIN, build_task

    builtin = (BUILTIN_STS, BUILTIN_STS_ALL, *REALISTIC, *(RETRIEVAL_CORPUS + t for t in BUILTIN))
    if column is not None and corpus in builtin:
        raise InputError(
            f"data.column {column!r} applies to a table file, not to the built-in corpus "
            f"{corpus!r}",
            fix="drop data.column, or set data.corpus to a CSV/TSV, JSONL or Parquet file",
        )

    if corpus.startswith(RETRIEVAL_CORPUS) and corpus[len(RETRIEVAL_CORPUS) :] in BUILTIN:
        from dclr.data.paths import resolve_data_dir

        task = build_task(corpus[len(RETRIEVAL_CORPUS) :], resolve_data_dir(data_dir), "test")
        return ListCorpus(list(task.corpus.values()), name=corpus)

    if corpus in REALISTIC:
        from dclr.data.paths import resolve_data_dir

        return ListCorpus(build_realistic(corpus, resolve_data_dir(data_dir)), name=corpus)
    if corpus in (BUILTIN_STS, BUILTIN_STS_ALL):
        from dclr.data.paths import resolve_data_dir
        from dclr.data.sts import all_sentences, all_texts

        read = all_sentences if corpus == BUILTIN_STS else all_texts
        return ListCorpus(read(resolve_data_dir(data_dir)), name=corpus)
    from dclr.data.readers import table_format

    if column is not None or table_format(corpus) is not None:
        return table_corpus(corpus, column)
    return TextFileCorpus(corpus)
