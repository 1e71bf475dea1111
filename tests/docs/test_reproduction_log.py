"""docs/reproduction-log.md's fidelity table points at code as `path:LINE` `symbol`: still true.

Pure file reading. Each reference's file must exist and its symbol's name must be on that line,
so the test fails as soon as an edit moves a definition and leaves the table's line number stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG = REPO_ROOT / "docs" / "reproduction-log.md"
SECTION = "## Fidelity to the papers (issue 16)"
CODE_COLUMN = "code (file:line)"
# `path:LINE` then, after optional spaces, the backticked symbol.
REFERENCE = re.compile(r"`([^`\s]+):(\d+)`\s*`([^`]+)`")
LINE_ONLY = re.compile(r"`[^`\s]+:\d+`")
PATH_ONLY = re.compile(r"`([\w./*{},-]+/[\w./*{},-]+\.(?:py|yaml|md))`")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")  # `\|` inside a cell is part of its text
MIN_REFERENCES = 20


def table_rows() -> list[dict[str, str]]:
    """The fidelity table's rows, each as {header: cell}."""
    text = LOG.read_text(encoding="utf-8")
    assert SECTION in text, f"{LOG.name} has no section {SECTION!r}"
    section = text[text.index(SECTION) :]
    next_heading = re.search(r"^## ", section[len(SECTION) :], re.M)
    if next_heading:
        section = section[: len(SECTION) + next_heading.start()]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) > 2, "the fidelity section has no table"

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in CELL_SEPARATOR.split(line.strip())[1:-1]]

    header = cells(rows[0])
    assert CODE_COLUMN in header, f"no {CODE_COLUMN!r} column in {header}"
    body = [cells(line) for line in rows[2:]]
    for row in body:
        assert len(row) == len(header), f"row has {len(row)} cells, header {len(header)}: {row}"
    return [dict(zip(header, row, strict=True)) for row in body]


def symbol_name(symbol: str) -> str:
    """The identifier that must be on the referenced line.

    `key: value` / `a.b.key: value` (YAML or config keys) -> key; `NAME["key"]` -> key;
    `f(arg=)` / `Class.attr` -> f / attr.
    """
    symbol = symbol.strip()
    if ":" in symbol:
        return symbol.split(":", 1)[0].strip().split(".")[-1]
    subscript = re.fullmatch(r"[\w.]+\[\s*[\"']([^\"']+)[\"']\s*\]", symbol)
    if subscript:
        return subscript.group(1)
    return re.sub(r"\(.*\)", "", symbol).strip().split(".")[-1]


def references() -> list[tuple[str, str, int, str]]:
    """(item, path, line, symbol) for every `path:LINE` `symbol` in the code column."""
    found = []
    for row in table_rows():
        for path, line, symbol in REFERENCE.findall(row[CODE_COLUMN]):
            found.append((row["item"], path, int(line), symbol))
    return found


REFERENCES = references()


def test_enough_references_are_parsed():
    assert len(REFERENCES) >= MIN_REFERENCES, f"only {len(REFERENCES)} references parsed"


def test_every_line_reference_names_a_symbol():
    for row in table_rows():
        cell = row[CODE_COLUMN]
        bare = len(LINE_ONLY.findall(cell))
        assert bare == len(REFERENCE.findall(cell)), (
            f"{row['item']!r}: a `path:LINE` without a backticked symbol after it: {cell}"
        )


@pytest.mark.parametrize(
    ("item", "path", "line", "symbol"),
    REFERENCES,
    ids=[f"{path}:{line}:{symbol}" for _, path, line, symbol in REFERENCES],
)
def test_reference_points_at_its_symbol(item, path, line, symbol):
    file = REPO_ROOT / path
    assert file.is_file(), f"{item!r}: {path} does not exist"
    lines = file.read_text(encoding="utf-8").splitlines()
    assert 1 <= line <= len(lines), f"{item!r}: {path} has {len(lines)} lines, not {line}"
    name = symbol_name(symbol)
    pattern = rf"(?<![\w-]){re.escape(name)}(?![\w-])"
    assert re.search(pattern, lines[line - 1]), (
        f"{item!r}: {path}:{line} should hold {name!r} ({symbol}), "
        f"found {lines[line - 1].strip()!r}; the line number is stale"
    )


def test_whole_file_references_exist():
    """Backticked paths without a line (whole recipes, globs of them) name files that exist."""
    for row in table_rows():
        cell = REFERENCE.sub("", row[CODE_COLUMN])
        for path in PATH_ONLY.findall(cell):
            if any(char in path for char in "*{"):
                patterns = [path]
                braces = re.search(r"\{([^}]*)\}", path)
                if braces:
                    patterns = [
                        path[: braces.start()] + option + path[braces.end() :]
                        for option in braces.group(1).split(",")
                    ]
                matches = [hit for pattern in patterns for hit in REPO_ROOT.glob(pattern)]
                assert matches, f"{row['item']!r}: no file matches {path}"
            else:
                assert (REPO_ROOT / path).is_file(), f"{row['item']!r}: {path} does not exist"
