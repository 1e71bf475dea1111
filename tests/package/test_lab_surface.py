"""What the lab (`dclr_lab`, lab/) may import from the library (issue 45 item 7): `dclr.lab_api`,
the facade that names the surface and what it promises, and the public API (`dclr`).

Imports are counted as the cycle test counts them (module level, deferred, `TYPE_CHECKING` or by
name). A lab change that needs another library name adds it to `dclr.lab_api` and to `LAB_API`
below, deliberately: the list is the surface the library keeps stable for the lab (lab/README.md).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from test_import_cycles import ROOT, import_graph, is_type_checking

import dclr.lab_api

LAB_MAY_IMPORT = frozenset({"dclr", "dclr.lab_api"})
LAB_API = frozenset({
    # errors, files, locks
    "ConfigError", "DclrError", "InputError", "LockHeld", "staged_folder", "write_text", "write_with",
    # recipes and configs: the runs the lab plans
    "TrainConfig", "checked", "config_from_dict", "flat_config", "flat_hints", "flat_values",
    "get_method", "load_config", "parse_overrides", "read_recipe", "SHIPPED_RECIPES",
    # training and its records
    "latest_checkpoint", "read_metrics", "run_training",
    # data
    "GoldIndex", "STS_TASKS", "build_sampler", "few_shot_indices", "gold_paraphrase_pairs",
    "inli_split", "load_corpus", "normalize_text", "parse_sources", "read_inli",
    "resolve_data_dir", "training_batches",
    # models and the sentence-transformers face
    "DCLRLoss", "SentenceEncoder", "load_encoder", "resolve_model",
    # the objectives' maths and views, which the studies vary
    "RATED", "calibrate_phi", "cosine_matrix", "dclr_paper_loss", "false_negative_weights",
    "noise_negatives", "non_uniformity_loss", "pair_false_negative_weights",
    "phi_from_random_pairs",
    # evaluation
    "DEFAULT_PHIS", "METRICS", "Scorer", "StsEvaluator", "audit", "evaluate_target",
    # the command line the lab's commands join
    "app", "console", "fail", "out", "quiet_hf", "reflow_help", "scores_table",
})  # fmt: skip
LAB = ROOT / "lab" / "src" / "dclr_lab"


def test_the_lab_imports_only_the_lab_api():
    reached = {
        f"{module} -> {dep}"
        for module, deps in import_graph().items()
        if module.startswith("dclr_lab")
        for dep in deps
        if dep.split(".")[0] == "dclr" and dep not in LAB_MAY_IMPORT
    }
    assert sorted(reached) == []


def test_the_lab_api_exports_the_listed_names():
    assert set(dclr.lab_api.__all__) == LAB_API


def test_the_lab_uses_every_name_of_its_api():
    """No name is kept for the lab that the lab does not use."""
    used = {
        alias.name
        for path in LAB.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "dclr.lab_api"
        for alias in node.names
    }
    assert used == LAB_API


def test_each_name_is_its_modules_object():
    sources = dclr.lab_api._SOURCES
    for name in LAB_API:
        assert getattr(dclr.lab_api, name) is getattr(importlib.import_module(sources[name]), name)


def test_the_type_checking_imports_are_the_table():
    """Type checkers read the `if TYPE_CHECKING:` imports, Python the lazy table: the same."""
    tree = ast.parse(Path(dclr.lab_api.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and is_type_checking(node))
    imported = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name  # `as` itself: a re-export
    }
    assert imported == dclr.lab_api._SOURCES


def test_a_name_costs_only_its_module():
    """`import dclr` never loads the facade, and a light name through it loads no torch."""
    code = (
        "import sys, dclr\n"
        "assert 'dclr.lab_api' not in sys.modules\n"
        "from dclr.lab_api import ConfigError, STS_TASKS, console, read_recipe\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
