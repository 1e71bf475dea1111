"""The library surface the reproduction lab (`dclr_lab`, lab/) relies on, and other downstream
research code may rely on too: `from dclr.lab_api import load_config, run_training, ...`.

The lab imports the library through this module alone (`tests/package/test_lab_surface.py` lists
every name and fails when the lab reaches past it). What it promises:

* these names keep their meaning and signatures: removing or changing one is a deliberate change
  made with the lab in the same commit (the test's list changes with it), never a side effect of
  moving code inside the library;
* the modules that define them are internal and may move or split: import from here, not from
  them;
* importing a name costs what importing its module costs, and nothing more: each is loaded on
  first use (PEP 562 `__getattr__`), so `from dclr.lab_api import ConfigError` loads no torch and
  the lab's command line stays fast (`tests/test_cli_imports.py`). `import dclr` does not import
  this module.

The public API (`import dclr`: `load_encoder`, `train`, ...) promises more (it is the stable face
for users); the names here that it lacks are research hooks: the losses' pure functions, the
samplers, the run records, the command line's helpers for the lab's own commands.

The lab sits above every layer of the library, so this module sits at the top too, above the
command line whose helpers it lends (`tests/package/test_layers.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names as `_SOURCES`, for type checkers (a test keeps them equal)
    from dclr.api import load_encoder as load_encoder
    from dclr.atomic import staged_folder as staged_folder
    from dclr.atomic import write_text as write_text
    from dclr.atomic import write_with as write_with
    from dclr.cli.main import app as app
    from dclr.cli.tools import console as console
    from dclr.cli.tools import fail as fail
    from dclr.cli.tools import out as out
    from dclr.cli.tools import quiet_hf as quiet_hf
    from dclr.cli.tools import reflow_help as reflow_help
    from dclr.cli.tools import scores_table as scores_table
    from dclr.configfile import read_recipe as read_recipe
    from dclr.data.corpus import load_corpus as load_corpus
    from dclr.data.inli import inli_split as inli_split
    from dclr.data.inli import read_inli as read_inli
    from dclr.data.paraphrases import GoldIndex as GoldIndex
    from dclr.data.paraphrases import gold_paraphrase_pairs as gold_paraphrase_pairs
    from dclr.data.paraphrases import normalize_text as normalize_text
    from dclr.data.paraphrases import parse_sources as parse_sources
    from dclr.data.paths import resolve_data_dir as resolve_data_dir
    from dclr.data.sampler import build_sampler as build_sampler
    from dclr.data.sampler import training_batches as training_batches
    from dclr.data.sampling import few_shot_indices as few_shot_indices
    from dclr.data.sts import STS_TASKS as STS_TASKS
    from dclr.driver import run_training as run_training
    from dclr.errors import ConfigError as ConfigError
    from dclr.errors import DclrError as DclrError
    from dclr.errors import InputError as InputError
    from dclr.evaluation.audit import DEFAULT_PHIS as DEFAULT_PHIS
    from dclr.evaluation.audit import Scorer as Scorer
    from dclr.evaluation.audit import audit as audit
    from dclr.evaluation.retrieval import METRICS as METRICS
    from dclr.evaluation.retrieval_eval import evaluate_target as evaluate_target
    from dclr.evaluation.sts import StsEvaluator as StsEvaluator
    from dclr.losses.calibration import phi_from_random_pairs as phi_from_random_pairs
    from dclr.losses.dclr import dclr_paper_loss as dclr_paper_loss
    from dclr.losses.dclr import false_negative_weights as false_negative_weights
    from dclr.losses.dclr import noise_negatives as noise_negatives
    from dclr.losses.dclr import non_uniformity_loss as non_uniformity_loss
    from dclr.losses.dclr import pair_false_negative_weights as pair_false_negative_weights
    from dclr.losses.simcse import cosine_matrix as cosine_matrix
    from dclr.methods.dclr_calibrate import calibrate_phi as calibrate_phi
    from dclr.methods.registry import get_method as get_method
    from dclr.models.encoder import SentenceEncoder as SentenceEncoder
    from dclr.models.encoder import resolve_model as resolve_model
    from dclr.options.config import TrainConfig as TrainConfig
    from dclr.options.flat import flat_config as flat_config
    from dclr.options.flat import flat_values as flat_values
    from dclr.recipe import checked as checked
    from dclr.recipe import config_from_dict as config_from_dict
    from dclr.recipe import flat_hints as flat_hints
    from dclr.recipe import load_config as load_config
    from dclr.recipe import parse_overrides as parse_overrides
    from dclr.runlock import LockHeld as LockHeld
    from dclr.shipped_recipes import SHIPPED_RECIPES as SHIPPED_RECIPES
    from dclr.st import DCLRLoss as DCLRLoss
    from dclr.training.checkpoint import latest_checkpoint as latest_checkpoint
    from dclr.training.tracking import read_metrics as read_metrics
    from dclr.views.strategies import RATED as RATED

# name -> the module that defines it, by what the lab does with it
_SOURCES: dict[str, str] = {
    # errors, files, locks
    "ConfigError": "dclr.errors",
    "DclrError": "dclr.errors",
    "InputError": "dclr.errors",
    "LockHeld": "dclr.runlock",
    "staged_folder": "dclr.atomic",
    "write_text": "dclr.atomic",
    "write_with": "dclr.atomic",
    # recipes and configs: the runs the lab plans
    "TrainConfig": "dclr.options.config",
    "checked": "dclr.recipe",
    "config_from_dict": "dclr.recipe",
    "flat_config": "dclr.options.flat",
    "flat_hints": "dclr.recipe",
    "flat_values": "dclr.options.flat",
    "get_method": "dclr.methods.registry",
    "load_config": "dclr.recipe",
    "parse_overrides": "dclr.recipe",
    "read_recipe": "dclr.configfile",
    "SHIPPED_RECIPES": "dclr.shipped_recipes",
    # training and its records
    "latest_checkpoint": "dclr.training.checkpoint",
    "read_metrics": "dclr.training.tracking",
    "run_training": "dclr.driver",
    # data
    "GoldIndex": "dclr.data.paraphrases",
    "STS_TASKS": "dclr.data.sts",
    "build_sampler": "dclr.data.sampler",
    "few_shot_indices": "dclr.data.sampling",
    "gold_paraphrase_pairs": "dclr.data.paraphrases",
    "inli_split": "dclr.data.inli",
    "load_corpus": "dclr.data.corpus",
    "normalize_text": "dclr.data.paraphrases",
    "parse_sources": "dclr.data.paraphrases",
    "read_inli": "dclr.data.inli",
    "resolve_data_dir": "dclr.data.paths",
    "training_batches": "dclr.data.sampler",
    # models and the sentence-transformers face
    "DCLRLoss": "dclr.st",
    "SentenceEncoder": "dclr.models.encoder",
    "load_encoder": "dclr.api",
    "resolve_model": "dclr.models.encoder",
    # the objectives' maths and views, which the studies vary
    "RATED": "dclr.views.strategies",
    "calibrate_phi": "dclr.methods.dclr_calibrate",
    "cosine_matrix": "dclr.losses.simcse",
    "dclr_paper_loss": "dclr.losses.dclr",
    "false_negative_weights": "dclr.losses.dclr",
    "noise_negatives": "dclr.losses.dclr",
    "non_uniformity_loss": "dclr.losses.dclr",
    "pair_false_negative_weights": "dclr.losses.dclr",
    "phi_from_random_pairs": "dclr.losses.calibration",
    # evaluation
    "DEFAULT_PHIS": "dclr.evaluation.audit",
    "METRICS": "dclr.evaluation.retrieval",
    "Scorer": "dclr.evaluation.audit",
    "StsEvaluator": "dclr.evaluation.sts",
    "audit": "dclr.evaluation.audit",
    "evaluate_target": "dclr.evaluation.retrieval_eval",
    # the command line the lab's commands join
    "app": "dclr.cli.main",
    "console": "dclr.cli.tools",
    "fail": "dclr.cli.tools",
    "out": "dclr.cli.tools",
    "quiet_hf": "dclr.cli.tools",
    "reflow_help": "dclr.cli.tools",
    "scores_table": "dclr.cli.tools",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    if name in _SOURCES:
        return getattr(importlib.import_module(_SOURCES[name]), name)
    raise AttributeError(f"module 'dclr.lab_api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})
