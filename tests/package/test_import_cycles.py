"""No import cycle inside `dclr` and its lab (`dclr_lab`, lab/src: one graph, so an import from the
library into the lab is an edge too; tests/package/test_layers.py refuses it).

The rule: module A depends on module B when A imports B anywhere: at module level, inside a
function (a deferred import only hides a cycle, it does not remove it), under
`if TYPE_CHECKING:` (an annotation that needs B is a dependency of the design too), or by name
(a string literal that is a dclr module, or `module:attribute`, as the method registry's
`BUILTIN` table and the CLI's command groups load them through `importlib`). `from P import name`
depends on P.name when that is a module, else on P; a package is its `__init__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGES = {"dclr": SRC, "dclr_lab": ROOT / "lab" / "src"}  # package -> the folder holding it


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST, modules: set[str]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = node.value.split(":", 1)[0]  # "dclr.methods.simcse:SIMCSE" loads the module
            if named in modules and named.startswith(("dclr.", "dclr_lab")):
                found.add(named)
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # noqa: SIM102
            if node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {
        module_name(p, src): p
        for package, src in PACKAGES.items()
        for p in (src / package).rglob("*.py")
    }
    modules = set(files)
    return {
        name: {m for m in imports(ast.parse(path.read_text()), modules) if m != name}
        for name, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "dclr.training.loop" in graph and "dclr.cli" in graph
    assert "dclr.options.config" in graph["dclr.training.prepare"]
    assert "dclr.lab_api" in graph["dclr_lab.cli"]  # the lab's modules, and their edges to dclr
    assert "dclr.cli.tools" in graph["dclr.lab_api"]  # names it lends by module name are edges


def test_a_cycle_is_detected():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_dclr():
    assert cycles(import_graph()) == []


def test_type_checking_and_by_name_imports_are_edges():
    modules = {"dclr.a", "dclr.b", "dclr.c"}
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dclr.a import Thing\n"
        "TABLE = {'x': 'dclr.b:OBJECT'}\n"
        "def f():\n    import importlib\n    return importlib.import_module('dclr.c')\n"
    )
    assert imports(tree, modules) == modules


def test_the_loop_and_the_core_config_never_import_the_registry():
    graph = import_graph()
    core = ("dclr.training.loop", "dclr.training.prepare", "dclr.options.config", "dclr.contract")
    for module in core:
        assert "dclr.methods.registry" not in reach(graph, module), module


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` depends on, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_core_never_imports_the_command_line():
    graph = import_graph()
    cli = {m for m in graph if m == "dclr.cli" or m.startswith("dclr.cli.") or m.endswith(".cli")}
    core = [m for m in graph if m.startswith(("dclr.training", "dclr.methods", "dclr.losses"))]
    assert {m: sorted(graph[m] & cli) for m in core if graph[m] & cli} == {}
