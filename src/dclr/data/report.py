"""What a run trains on, said before it trains: lines, blank lines skipped, duplicates, truncation.

`data_report` is a pure summary (a dict for results.json and the command line): the count of
lines, blank lines the reader skipped, lines equal to an earlier one after lower-casing and
collapsing whitespace (`data.dedup` drops them), and how many lines the tokenizer cuts at the
run's `max_length`, counted on a seeded sample of at most `TRUNCATION_SAMPLE` lines for a large
corpus (the report says which).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from dclr.data.paraphrases import normalize_text

TRUNCATION_SAMPLE = 20_000  # lines tokenized to count truncation (all of a smaller corpus)


def duplicate_count(lines: Sequence[str]) -> int:
    """Lines equal to an earlier line after normalisation."""
    return len(lines) - len({normalize_text(s) for s in lines})


def dedup_lines(lines: Sequence[str]) -> list[str]:
    """The first line of each normalised text, in order."""
    seen: set[str] = set()
    out = []
    for s in lines:
        key = normalize_text(s)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def data_report(
    lines: Sequence[str],
    skipped: int,
    token_counts: Callable[[list[str]], list[int]] | None,
    max_length: int,
    dropped_duplicates: int = 0,
    sample: int = TRUNCATION_SAMPLE,
    seed: int = 0,
) -> dict[str, Any]:
    """The summary of a sentence corpus; `token_counts` maps lines to their token counts
    (None: truncation not counted)."""
    n = len(lines)
    report: dict[str, Any] = {
        "lines": n,
        "blank_skipped": int(skipped),
        "duplicates": duplicate_count(lines),
        "duplicates_dropped": int(dropped_duplicates),
        "max_length": max_length,
    }
    report["duplicate_share"] = report["duplicates"] / n if n else 0.0
    if token_counts is not None and n:
        chosen = sorted(random.Random(seed).sample(range(n), sample)) if n > sample else range(n)
        texts = [lines[i] for i in chosen]
        counts = token_counts(texts)
        report["truncated"] = sum(c > max_length for c in counts)
        report["truncation_checked"] = len(texts)
    return report


def describe(report: dict[str, Any]) -> str:
    """One line for the command line."""
    parts = [f"{report['lines']:,} lines", f"{report['blank_skipped']:,} blank skipped"]
    dup = f"{report['duplicates']:,} duplicates ({100 * report['duplicate_share']:.1f} %)"
    if report.get("duplicates_dropped"):
        dup += f", {report['duplicates_dropped']:,} dropped by data.dedup"
    elif report["duplicates"]:
        dup += " kept (data.dedup drops them)"
    parts.append(dup)
    if "truncated" in report:
        checked = report["truncation_checked"]
        of = "" if checked == report["lines"] else f" of {checked:,} sampled"
        parts.append(f"{report['truncated']:,}{of} cut at {report['max_length']} tokens")
    if report.get("long_lines_cut"):  # the reader's bound (dclr.data.readers.MAX_LINE_CHARS)
        parts.append(f"{report['long_lines_cut']:,} line(s) too long to read whole, cut when read")
    return "data: " + ", ".join(parts)
