"""Read and write a retrieval folder in BEIR's layout, strictly.

    DIR/corpus.jsonl      {"_id": ..., "title": ..., "text": ...} per line (title optional)
    DIR/queries.jsonl     {"_id": ..., "text": ...} per line
    DIR/qrels/SPLIT.tsv   query-id <TAB> corpus-id <TAB> score, after a header row

BEIR's `GenericDataLoader` reads the same files; where it would crash or silently overwrite (a
blank line, a missing field, a repeated id or judgement, a qrels id that names nothing) this reader
stops with the file, the 1-based line and the fix. Like BEIR it keeps every qrels row (score 0
included) and keeps only the queries the qrels judge, in queries.jsonl's order. A passage is
`(title + " " + text).strip()`, as BEIR's dense search and sentence-transformers' example of
`InformationRetrievalEvaluator` build it (no title: `text.strip()`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from dclr.data.text import decode_utf8
from dclr.errors import InputError

CORPUS = "corpus.jsonl"
QUERIES = "queries.jsonl"
QRELS = "qrels"
QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class RetrievalData:
    """One split of a BEIR folder: corpus ids and passages (file order), the judged queries
    (queries.jsonl order) and qrels {query id: {corpus id: score}}."""

    corpus_ids: list[str]
    passages: list[str]
    query_ids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]


def passage_text(title: str, text: str) -> str:
    """What is encoded for a corpus row (BEIR's and sentence-transformers' concatenation)."""
    return (title + " " + text).strip()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise InputError(
            "file not found", path=path, fix=f"a BEIR folder holds {CORPUS}, {QUERIES}, {QRELS}/"
        )
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            yield number, decode_utf8(raw, path, number).rstrip("\r\n")


def _field(record: dict, name: str, path: Path, line: int, required: bool = True) -> str:
    value = record.get(name)
    if value is None and not required:
        return ""
    if name == "_id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # some BEIR exports write numeric ids; qrels name them as text
    if not isinstance(value, str):
        got = "no such field" if name not in record else f"a {type(value).__name__}"
        raise InputError(
            f"field {name!r} must be a string ({got})",
            path=path,
            line=line,
            fix='each line is a JSON object with "_id" and "text" strings (corpus: "title" optional)',
        )
    return value


def read_jsonl(path: str | Path, with_title: bool) -> tuple[list[str], list[str]]:
    """(ids, texts) of corpus.jsonl (`with_title`: passages) or queries.jsonl, in file order."""
    path = Path(path)
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, int] = {}
    for line, text in _lines(path):
        if not text.strip():
            raise InputError(
                "blank line", path=path, line=line, fix="remove it (one JSON object per line)"
            )
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(
                f"not valid JSON ({err.msg} at column {err.colno})",
                path=path,
                line=line,
                fix="write one JSON object per line",
            ) from None
        if not isinstance(record, dict):
            raise InputError("not a JSON object", path=path, line=line)
        doc_id = _field(record, "_id", path, line)
        if doc_id in seen:
            raise InputError(
                f"id {doc_id!r} repeats line {seen[doc_id]}",
                path=path,
                line=line,
                fix="give every row its own _id",
            )
        seen[doc_id] = line
        body = _field(record, "text", path, line)
        title = _field(record, "title", path, line, required=False) if with_title else ""
        ids.append(doc_id)
        texts.append(passage_text(title, body) if with_title else body)
    if not ids:
        raise InputError("no rows", path=path, fix="a BEIR file holds one JSON object per line")
    return ids, texts


def read_qrels(
    path: str | Path, query_ids: Mapping[str, object], corpus_ids: Mapping[str, object]
) -> dict[str, dict[str, int]]:
    """{query id: {corpus id: score}} of a qrels TSV; refuses ids that name no query / passage."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    where: dict[tuple[str, str], int] = {}
    for line, text in _lines(path):
        fields = text.split("\t")
        if line == 1:
            if len(fields) == 3 and fields[2].strip().lstrip("-").isdigit():
                raise InputError(
                    "the first row is a judgement, not the header",
                    path=path,
                    line=1,
                    fix="add the header row query-id<TAB>corpus-id<TAB>score (BEIR skips row 1)",
                )
            continue
        if not text.strip():
            raise InputError("blank line", path=path, line=line, fix="remove it")
        if len(fields) != 3:
            raise InputError(
                f"{len(fields)} tab-separated fields, expected 3",
                path=path,
                line=line,
                fix="write query-id<TAB>corpus-id<TAB>score",
            )
        query_id, corpus_id, score_text = fields
        try:
            score = int(score_text)
        except ValueError:
            raise InputError(
                f"score {score_text!r} is not an integer", path=path, line=line
            ) from None
        for kind, value, known in (("query", query_id, query_ids), ("corpus", corpus_id, corpus_ids)):  # fmt: skip
            if value not in known:
                source = QUERIES if kind == "query" else CORPUS
                raise InputError(
                    f"{kind} id {value!r} is not in {source}",
                    path=path,
                    line=line,
                    fix=f"judge only ids that {source} holds (ids are compared as exact text)",
                )
        if (query_id, corpus_id) in where:
            raise InputError(
                f"({query_id!r}, {corpus_id!r}) was judged already on line "
                f"{where[(query_id, corpus_id)]}",
                path=path,
                line=line,
                fix="keep one judgement per query and passage",
            )
        where[(query_id, corpus_id)] = line
        qrels.setdefault(query_id, {})[corpus_id] = score
    if not qrels:
        raise InputError("no judgements after the header", path=path)
    return qrels


def splits(folder: str | Path) -> list[str]:
    """The qrels splits a folder holds (qrels/*.tsv), sorted."""
    return sorted(p.stem for p in (Path(folder) / QRELS).glob("*.tsv"))


def load_beir(folder: str | Path, split: str = "test") -> RetrievalData:
    """Read one split of a BEIR folder (see the module docstring)."""
    folder = Path(folder)
    qrels_path = folder / QRELS / f"{split}.tsv"
    if not qrels_path.is_file():
        held = ", ".join(splits(folder)) or "none"
        raise InputError(
            f"no qrels for split {split!r} (splits here: {held})",
            path=qrels_path,
            fix="pass --split with one of the splits, or point at a BEIR folder",
        )
    corpus_ids, passages = read_jsonl(folder / CORPUS, with_title=True)
    all_query_ids, all_queries = read_jsonl(folder / QUERIES, with_title=False)
    qrels = read_qrels(
        qrels_path, dict.fromkeys(all_query_ids), {c: i for i, c in enumerate(corpus_ids)}
    )
    kept = [i for i, q in enumerate(all_query_ids) if q in qrels]
    return RetrievalData(
        corpus_ids,
        passages,
        [all_query_ids[i] for i in kept],
        [all_queries[i] for i in kept],
        qrels,
    )


def write_beir(
    folder: str | Path,
    corpus: Mapping[str, str],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    split: str,
) -> Path:
    """Write a BEIR folder (titles empty) that `load_beir` reads back; returns the folder."""
    from dclr.atomic import write_text

    folder = Path(folder)
    (folder / QRELS).mkdir(parents=True, exist_ok=True)

    def jsonl(rows: Mapping[str, str], title: bool) -> str:
        records = (
            {"_id": i, "title": "", "text": t} if title else {"_id": i, "text": t}
            for i, t in rows.items()
        )
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

    write_text(folder / CORPUS, jsonl(corpus, title=True))
    write_text(folder / QUERIES, jsonl(queries, title=False))
    rows = ["\t".join(QRELS_HEADER)]
    rows += [f"{q}\t{d}\t{s}" for q, docs in qrels.items() for d, s in docs.items()]
    write_text(folder / QRELS / f"{split}.tsv", "\n".join(rows) + "\n")
    return folder
