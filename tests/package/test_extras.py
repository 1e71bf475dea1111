"""dclr's dependencies (issue 36): the `serve` extra holds only what the server and its siblings
(encode-bulk, index, search) run, every package in it imported by dclr's own code, the tests' tools
not in it; matplotlib is no dependency of dclr, only of the lab (lab/pyproject.toml, dclr-lab)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT_NAMES = {"faiss-cpu": "faiss"}  # distribution -> module, where they differ


def _names(requirements: list[str]) -> list[str]:
    return [re.split(r"[<>=\[; ]", r, maxsplit=1)[0] for r in requirements]


def _project(folder: Path = ROOT) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _extra(name: str) -> list[str]:
    return _names(_project()["optional-dependencies"][name])


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


def test_pip_install_dclr_does_not_install_matplotlib():
    assert "matplotlib" not in _names(_project()["dependencies"])
    # nor does any module of dclr import it at module level: `import dclr.X` never needs it
    top_level = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "src" / "dclr").rglob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            name.split(".")[0] == "matplotlib"
            for name in (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
        )
    ]
    assert top_level == []


def test_the_lab_depends_on_dclr_and_on_matplotlib():
    lab = _project(ROOT / "lab")
    assert lab["name"] == "dclr-lab"
    assert {"dclr", "matplotlib"} <= set(_names(lab["dependencies"]))
