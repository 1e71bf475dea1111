"""The `serve` extra holds only what the server and its siblings (encode-bulk, index, search) run
(issue 36): every package in it is imported by dclr's own code, and the tests' tools are not in it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT_NAMES = {"faiss-cpu": "faiss"}  # distribution -> module, where they differ


def _extra(name: str) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        re.split(r"[<>=\[; ]", r, maxsplit=1)[0] for r in project["optional-dependencies"][name]
    ]


def _imported_by_src() -> set[str]:
    found: set[str] = set()
    pattern = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.MULTILINE)
    for path in (ROOT / "src" / "dclr").rglob("*.py"):
        found.update(pattern.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_package_of_the_serve_extra_is_run_by_dclr():
    imported = _imported_by_src()
    unused = [
        d for d in _extra("serve") if IMPORT_NAMES.get(d, d.replace("-", "_")) not in imported
    ]
    assert not unused, f"the serve extra installs packages dclr never imports: {unused}"


def test_the_tests_tools_are_not_in_the_serve_extra():
    assert {"httpx", "playwright", "pytest"}.isdisjoint(_extra("serve"))
    assert {"httpx", "playwright"} <= set(_extra("dev"))
