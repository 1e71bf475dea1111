"""Built-in retrieval tasks, made from the evaluation data's test (or dev) splits only.

- `paraphrase`: each query is the first sentence of a gold paraphrase pair, its relevant passages
  (relevance 1) the second sentences it is paired with. Gold pairs: STS-B score >= 4.0, SICK
  relatedness >= 4.5 with ENTAILMENT, MRPC label 1 (the thresholds of
  `dclr.data.paraphrases`). Test: STS-B test, SICK test, MRPC test; dev: STS-B dev, SICK trial
  (MRPC has no dev split). The corpus is every other sentence of those splits: a query's own
  sentence is left out of the corpus, otherwise it would be its own best hit (BEIR drops such
  hits by id at search time; leaving them out keeps sentence-transformers' evaluator, which
  does not, on the same numbers).
- `inli`: each INLI premise (test.csv, dev: val.csv) is a query; the corpus is every hypothesis
  of the split (explicit and implied entailments, neutrals, contradictions); relevance is graded:
  2 for the premise's explicit entailment, 1 for its implied entailment.

Sentences are compared after `normalize_text` (lower-case, whitespace collapsed): the corpus keeps
the first spelling of each, and none equal to a query. Ids are `q<n>` and `d<n>` in first-seen
order, so a build is byte-identical every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dclr.data.paraphrases import (
    SICK_MIN_SCORE,
    STSB_MIN_SCORE,
    normalize_text,
    read_mrpc,
)
from dclr.data.sts import read_sick, read_stsb, sick_rows
from dclr.errors import ConfigError

SPLITS = ("test", "dev")
EXPLICIT_GRADE = 2  # the entailment the INLI row states
IMPLIED_GRADE = 1  # an entailment too, but only implied


@dataclass(frozen=True)
class BuiltTask:
    """A task in BEIR's terms: {doc id: text}, {query id: text}, {query id: {doc id: grade}}."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def assemble(
    sentences: Iterable[str], judged: Iterable[tuple[str, str, int]], minimum: int = 1
) -> BuiltTask:
    """Queries = the first sides of `judged` (query, passage, grade) rows; corpus = every other
    sentence of `sentences` and of the passages; a query keeps the highest grade given to each
    passage and is dropped when no passage of grade >= `minimum` remains for it."""
    judged = list(judged)
    query_keys = {normalize_text(q) for q, _, _ in judged}
    doc_of: dict[str, str] = {}  # normalized text -> doc id
    corpus: dict[str, str] = {}
    for text in [*sentences, *(p for _, p, _ in judged)]:
        key = normalize_text(text)
        if key and key not in query_keys and key not in doc_of:
            doc_of[key] = f"d{len(doc_of)}"
            corpus[doc_of[key]] = text
    grades: dict[str, dict[str, int]] = {}  # normalized query -> {doc id: grade}
    spelling: dict[str, str] = {}
    for query, passage, grade in judged:
        doc = doc_of.get(normalize_text(passage))
        if doc is None:  # the passage is itself a query
            continue
        key = normalize_text(query)
        spelling.setdefault(key, query)
        docs = grades.setdefault(key, {})
        docs[doc] = max(grade, docs.get(doc, grade))
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for key, docs in grades.items():
        if max(docs.values()) >= minimum:
            qid = f"q{len(queries)}"
            queries[qid] = spelling[key]
            qrels[qid] = docs
    return BuiltTask(corpus, queries, qrels)


def paraphrase_task(root: Path, split: str = "test") -> BuiltTask:
    """See the module docstring."""
    sentences: list[str] = []
    judged: list[tuple[str, str, int]] = []
    stsb = read_stsb(root, split)  # type: ignore[arg-type]
    sick = read_sick(root, split)  # type: ignore[arg-type]
    labels = [fields[4] for _, fields in sick_rows(root, split, columns=5)]  # type: ignore[arg-type]
    for a, b, score in zip(stsb.sentences1, stsb.sentences2, stsb.scores, strict=True):
        sentences += [a, b]
        if score >= STSB_MIN_SCORE and normalize_text(a) != normalize_text(b):
            judged.append((a, b, 1))
    for a, b, score, label in zip(sick.sentences1, sick.sentences2, sick.scores, labels, strict=True):  # fmt: skip
        sentences += [a, b]
        if score >= SICK_MIN_SCORE and label == "ENTAILMENT" and normalize_text(a) != normalize_text(b):  # fmt: skip
            judged.append((a, b, 1))
    if split == "test":
        for a, b, paraphrase in read_mrpc(root, "test"):
            sentences += [a, b]
            if paraphrase == 1 and normalize_text(a) != normalize_text(b):
                judged.append((a, b, 1))
    return assemble(sentences, judged)


def inli_task(root: Path, split: str = "test") -> BuiltTask:
    """See the module docstring."""
    from dclr.data.inli import inli_split, read_inli

    rows = read_inli(inli_split(root, "val" if split == "dev" else split))
    hypotheses = [h for r in rows for h in (r.explicit, r.implied, r.neutral, r.contradiction)]
    judged = [(r.premise, r.explicit, EXPLICIT_GRADE) for r in rows]
    judged += [(r.premise, r.implied, IMPLIED_GRADE) for r in rows]
    return assemble(hypotheses, judged)


BUILTIN: dict[str, Callable[[Path, str], BuiltTask]] = {
    "paraphrase": paraphrase_task,
    "inli": inli_task,
}


def build_task(name: str, root: Path, split: str = "test") -> BuiltTask:
    """The built-in task `name` on `split` (test | dev) of the data under `root`."""
    if name not in BUILTIN:
        raise ConfigError(f"unknown retrieval task {name!r}; choose from {', '.join(BUILTIN)}")
    if split not in SPLITS:
        raise ConfigError(f"split must be test or dev, got {split!r} (no train split is used)")
    return BUILTIN[name](root, split)


def write_task(
    name: str, root: Path, out: str | Path, split: str = "test"
) -> tuple[Path, BuiltTask]:
    """Build `name` and write it to `out` in BEIR's layout (qrels/<split>.tsv)."""
    from dclr.data.beir import write_beir

    task = build_task(name, root, split)
    return write_beir(out, task.corpus, task.queries, task.qrels, split), task


TEST_SPLIT = "test"  # the split a run's retrieval test scores are measured on


def check_test_target(target: str) -> None:
    """A built-in task name or a BEIR folder with qrels/test.tsv; else a ConfigError."""
    if target in BUILTIN:
        return
    qrels = Path(target) / "qrels" / f"{TEST_SPLIT}.tsv"
    if not qrels.is_file():
        raise ConfigError(
            f"run.test_retrieval {target!r} is neither a built-in task "
            f"({', '.join(BUILTIN)}) nor a BEIR folder with {qrels}",
        )
