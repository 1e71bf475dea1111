"""The package's folders read as layers: each imports only from the layers below it.

Every module belongs to one layer: a root module by its name, a module in a folder by the folder,
with no exception: every command-line face is in the `cli/` folder, the top layer (issue 45; before
it, each folder's `cli.py` was counted as the top layer by name, so `clitools.py`, a root module,
hid an import of `methods/`). Edges are counted as the cycle test counts them (deferred, `TYPE_CHECKING` and
by-name imports included), so a deferred import does not hide a layer broken upward.

The lab (`dclr_lab`, its own distribution in lab/) is the layer above everything: it imports dclr
through `dclr.lab_api` (tests/package/test_lab_surface.py), the library's top layer, which lends it
names from every layer below, the command line's included; nothing in dclr may import the lab, not
even by name (issue 36: the library without the lab).
"""

from __future__ import annotations

from test_import_cycles import import_graph

# Bottom to top. A layer may import its own modules and every layer listed before it.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (name, frozenset(members))
    for name, members in (
        (
            "base",
            {
                "errors",
                "atomic",
                "progress",
                "runlock",
                "_meta",
                "configfile",
                "shipped_recipes",
                "distributed",
                "heap",
                "jsonfile",  # JSON files read back, damaged ones named (errors only)
            },
        ),
        ("data", {"data"}),  # readers of every file format; no model
        ("estimate", {"estimate"}),  # memory and time estimates of a forward
        ("models", {"models"}),
        ("views", {"views"}),
        ("options", {"options"}),  # torch-free: the recipe schema and each method's section
        ("contract", {"contract"}),
        ("losses", {"losses"}),
        ("indexing", {"indexing"}),  # bulk encoding, shards, the search index
        ("evaluation", {"evaluation"}),
        ("training", {"training"}),  # the one loop, checkpoints, run folders
        ("dualcse", {"dualcse"}),  # DualCSE's two-embedding model and its evaluation
        ("methods", {"methods"}),
        ("recipe", {"recipe", "flat_recipe"}),
        ("driver", {"driver"}),
        ("st", {"st"}),  # the sentence-transformers face
        ("serving", {"serving"}),  # HTTP only
        ("api", {"api"}),  # the Python face of every command (`dclr.serve` included)
        ("cli", {"cli", "__main__", "__init__"}),  # every command-line face: the cli/ folder
        ("lab_api", {"lab_api"}),  # what the lab may import: names from any layer, the CLI's too
    )
)
LAB = "lab"  # every module of dclr_lab, the reproduction lab: above the command line
RANKS = {name: i for i, name in enumerate((*(name for name, _ in LAYERS), LAB))}


def layer_of(module: str) -> str:
    if module.split(".")[0] == "dclr_lab":
        return LAB
    parts = module.split(".")[1:]  # dclr.models.encoder -> models, encoder
    key = parts[0] if parts else "__init__"
    for name, members in LAYERS:
        if key in members:
            return name
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({layer_of(a)}) -> {b} ({layer_of(b)})"
        for a, deps in graph.items()
        for b in deps
        if RANKS[layer_of(b)] > RANKS[layer_of(a)]
    )


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_an_upward_import_is_found():
    graph = {"dclr.losses.dclr": {"dclr.methods.registry"}, "dclr.methods.registry": set()}
    assert upward_imports(graph) == ["dclr.losses.dclr (losses) -> dclr.methods.registry (methods)"]


def test_an_import_of_the_lab_from_the_library_is_found():
    graph = {
        "dclr.evaluation.corpus_audit": {"dclr_lab.plots"},
        "dclr.cli": {"dclr_lab.cli"},
        "dclr_lab.cli": {"dclr.cli", "dclr.cli.tools"},  # the lab may import all of dclr
        "dclr_lab.plots": set(),
    }
    assert upward_imports(graph) == [
        "dclr.cli (cli) -> dclr_lab.cli (lab)",
        "dclr.evaluation.corpus_audit (evaluation) -> dclr_lab.plots (lab)",
    ]


def test_the_graph_holds_the_lab():
    graph = import_graph()
    assert {layer_of(m) for m in graph if m.startswith("dclr_lab")} == {LAB}
    assert any(m.startswith("dclr_lab.studies") for m in graph)


def test_a_folders_cli_is_in_the_top_layer():
    assert layer_of("dclr.cli.serving") == "cli" and layer_of("dclr.serving.service") == "serving"


def test_no_import_runs_up_a_layer():
    assert upward_imports(import_graph()) == []
