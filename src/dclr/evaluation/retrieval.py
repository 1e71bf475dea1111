"""Retrieval metrics with trec_eval's definitions (what BEIR reports through pytrec_eval).

A *run* maps each query id to `{doc id: score}` (the retrieved documents); *qrels* map each query
id to `{doc id: relevance}` (graded integers; 0 or less is not relevant). Every metric ranks a
query's documents as trec_eval does, by score descending and then by doc id descending (trec_eval
sorts equal scores by `strcmp(docno2, docno1)`), and reduces to:

- nDCG@k (`ndcg_cut.k`): sum of gain / log2(rank + 1) over the first k ranks, gain = relevance
  (negative counted as 0), divided by the same sum over the ideal order of every judged document;
- MRR@k (`recip_rank` on the first k ranks, as BEIR's MRR@k): 1 / rank of the first relevant
  document within the first k, else 0;
- MAP@k (`map_cut.k`): sum of precision@rank over the relevant documents within the first k,
  divided by the number of relevant documents judged (not by min(k, relevant));
- Recall@k (`recall.k`): relevant documents within the first k / relevant documents judged.

A query in the run but not in the qrels is ignored (trec_eval's rule); a query in the qrels whose
judgements are all 0 counts, with every metric 0 (trec_eval's and BEIR's rule: BEIR keeps every
qrels row and averages over every query pytrec_eval returns). Means are over the queries both hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]
# The table of issue 26: (name, metric function, k); names are what results dicts hold.
NDCG_K = 10
MRR_K = 10
MAP_K = 100
RECALL_KS = (1, 10, 100)
# How many documents a search must return per query for every metric above.
DEPTH = max(NDCG_K, MRR_K, MAP_K, *RECALL_KS)


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Doc ids best first: score descending, then doc id descending (trec_eval's tie order;
    Python compares str by code point, which is UTF-8's byte order, as strcmp does)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def added_up(values: Iterable[float]) -> float:
    """Left-to-right float addition, as trec_eval's C loops and BEIR's averaging add. Python 3.12's
    `sum` compensates rounding (Neumaier), and then differs from trec_eval in the last bit."""
    total = 0.0
    for value in values:
        total += value
    return total


def _n_relevant(rels: Mapping[str, int]) -> int:
    return sum(1 for r in rels.values() if r > 0)


def ndcg(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranked list (trec_eval's `ndcg_cut.k`; 0 when no judged gain is positive)."""
    gains = [max(rels.get(doc, 0), 0) for doc in ranked[:k]]
    ideal = sorted((max(r, 0) for r in rels.values()), reverse=True)[:k]
    idcg = added_up(g / math.log2(i + 2) for i, g in enumerate(ideal))  # rank i + 1: log2(i + 2)
    if idcg == 0:
        return 0.0
    return added_up(g / math.log2(i + 2) for i, g in enumerate(gains)) / idcg


def reciprocal_rank(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the first k ranks, else 0."""
    for i, doc in enumerate(ranked[:k]):
        if rels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def average_precision(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """trec_eval's `map_cut.k` of one list: sum of precision@rank at each relevant document in
    the first k, over the number of relevant documents judged (0 when there are none)."""
    n_rel = _n_relevant(rels)
    if n_rel == 0:
        return 0.0
    found, total = 0, 0.0
    for i, doc in enumerate(ranked[:k]):
        if rels.get(doc, 0) > 0:
            found += 1
            total += found / (i + 1)
    return total / n_rel


def recall(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Relevant documents in the first k ranks over the relevant documents judged (0 if none)."""
    n_rel = _n_relevant(rels)
    if n_rel == 0:
        return 0.0
    return sum(1 for doc in ranked[:k] if rels.get(doc, 0) > 0) / n_rel


PerQuery = Callable[[Sequence[str], Mapping[str, int], int], float]


def per_query(metric: PerQuery, run: Run, qrels: Qrels, k: int) -> dict[str, float]:
    """{query id: metric@k} over the queries in both the run and the qrels (trec_eval's set)."""
    return {q: metric(trec_order(run[q]), qrels[q], k) for q in run if q in qrels}


def _mean(values: dict[str, float]) -> float:
    return added_up(values.values()) / len(values) if values else 0.0


def ndcg_at_k(run: Run, qrels: Qrels, k: int = NDCG_K) -> float:
    return _mean(per_query(ndcg, run, qrels, k))


def mrr_at_k(run: Run, qrels: Qrels, k: int = MRR_K) -> float:
    return _mean(per_query(reciprocal_rank, run, qrels, k))


def map_at_k(run: Run, qrels: Qrels, k: int = MAP_K) -> float:
    return _mean(per_query(average_precision, run, qrels, k))


def recall_at_k(run: Run, qrels: Qrels, k: int) -> float:
    return _mean(per_query(recall, run, qrels, k))


def retrieval_scores(run: Run, qrels: Qrels) -> dict[str, float]:
    """The issue-26 table, fractions in [0, 1]: ndcg@10, mrr@10, map@100, recall@{1,10,100},
    and n_queries (the queries averaged over)."""
    scores = {
        f"ndcg@{NDCG_K}": ndcg_at_k(run, qrels, NDCG_K),
        f"mrr@{MRR_K}": mrr_at_k(run, qrels, MRR_K),
        f"map@{MAP_K}": map_at_k(run, qrels, MAP_K),
    }
    for k in RECALL_KS:
        scores[f"recall@{k}"] = recall_at_k(run, qrels, k)
    scores["n_queries"] = float(sum(1 for q in run if q in qrels))
    return scores


METRICS = (f"ndcg@{NDCG_K}", f"mrr@{MRR_K}", f"map@{MAP_K}", *(f"recall@{k}" for k in RECALL_KS))
