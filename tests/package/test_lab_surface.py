"""What the lab (`dclr_lab`, lab/) may import from the library (issue 45 item 7, a first step).

The lab is a separate distribution above the library; these are the library modules it reaches
(any import: module level, deferred, `TYPE_CHECKING` or by name, as the cycle test counts them).
A lab change that reaches a module not listed here fails this test: add the module here only if
the library means to keep it stable for the lab, else use one already listed. The list is the
surface documented in lab/README.md.
"""

from __future__ import annotations

from test_import_cycles import import_graph

LAB_MAY_IMPORT = frozenset({
    # the public API, the command line, and the run driver
    "dclr.api", "dclr.cli.main", "dclr.cli.tools", "dclr.driver", "dclr.recipe",
    # files, locks, errors
    "dclr.atomic", "dclr.configfile", "dclr.errors", "dclr.runlock",
    # data
    "dclr.data.corpus", "dclr.data.inli", "dclr.data.paraphrases", "dclr.data.paths",
    "dclr.data.sampler", "dclr.data.sampling", "dclr.data.sts",
    # evaluation
    "dclr.evaluation.audit", "dclr.evaluation.retrieval", "dclr.evaluation.retrieval_eval",
    "dclr.evaluation.sts",
    # losses, methods, options (the studies vary them)
    "dclr.losses.calibration", "dclr.losses.dclr", "dclr.losses.simcse",
    "dclr.methods.dclr_calibrate", "dclr.methods.registry", "dclr.options.config",
    "dclr.options.flat",
    # models, views, training records, the sentence-transformers face
    "dclr.models.encoder", "dclr.views.strategies", "dclr.training.checkpoint",
    "dclr.training.tracking", "dclr.st",
})  # fmt: skip


def test_the_lab_imports_only_its_surface():
    graph = import_graph()
    reached = {
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith("dclr_lab")
        for dep in deps
        if dep.startswith("dclr.") and dep not in LAB_MAY_IMPORT
    }
    assert sorted(reached) == []


def test_every_listed_module_exists():
    assert set(import_graph()) >= LAB_MAY_IMPORT
