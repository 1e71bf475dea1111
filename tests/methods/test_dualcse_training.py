"""DualCSE training on a tiny model and a synthetic INLI: parts logged, export, resume, NaN stop,
the supervised-SimCSE baseline, and every shipped recipe validates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT
from inli_data import write_inli_dir

import dclr.losses.dualcse as dualcse_module
from dclr.data.inli import read_inli
from dclr.data.sampler import build_sampler
from dclr.driver import run_training
from dclr.driver import trainer_for as DualCSETrainer  # one loop for every method
from dclr.dualcse.evaluate import SingleEmbedding, load_embedder
from dclr.dualcse.model import DualEncoder
from dclr.errors import ConfigError, TrainingDiverged
from dclr.losses.dualcse import DUALCSE_TERMS
from dclr.methods.registry import get_method
from dclr.options.config import TrainConfig
from dclr.recipe import load_config
from dclr.training.checkpoint import latest_checkpoint
from dclr.training.tracking import read_metrics


def load_dualcse_config(recipe, overrides=None):
    return load_config(recipe, overrides)


def training_items(config, examples):
    return get_method(config.method).items(config, examples)


def inli_config(**values):
    return load_config(None, {"method": "dualcse", **values})


RECIPES = sorted((REPO_ROOT / "recipes" / "dualcse").glob("*.yaml"))


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return write_inli_dir(tmp_path_factory.mktemp("inli"), n_train=24, n_eval=6)


def config(model_dir, data_root, out, **extra) -> TrainConfig:
    values = {
        "method": "dualcse",
        "model": str(model_dir),
        "data_dir": str(data_root),
        "batch_size": 4,
        "max_steps": 4,
        "save_steps": 2,
        "log_steps": 1,
        "rte_eval": False,
        "output_dir": str(out),
        **extra,
    }
    return load_dualcse_config(None, values)


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}


@pytest.mark.parametrize("kind", ["cross", "bi"])
def test_trains_logs_every_part_exports_and_evaluates(model_dir, data_root, tmp_path, kind):
    cfg = config(model_dir, data_root, tmp_path / "run", encoder=kind, rte_eval=True)
    summary_returned = run_training(cfg)
    rows = read_metrics(tmp_path / "run", "train")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert row["loss"] == pytest.approx(sum(row[k] for k in DUALCSE_TERMS), rel=1e-5)
    model = load_embedder(summary_returned["final_dir"])
    assert isinstance(model, DualEncoder) and model.kind == kind
    summary = json.loads((tmp_path / "run" / "results.json").read_text())
    assert summary["steps"] == 4 and summary["rte_test"] == summary_returned["rte_test"]
    assert set(summary["rte_test"]) >= {"explicit", "implied", "neutral", "contradiction", "avg"}


def test_training_moves_the_weights_and_lowers_the_loss_on_a_fixed_batch(model_dir, data_root, tmp_path):  # fmt: skip
    cfg = config(
        model_dir, data_root, tmp_path / "run", max_steps=8, learning_rate=1e-3, dropout=0.0
    )
    trainer = DualCSETrainer(cfg)
    batch = trainer.run.data[:4]  # one batch, seen every step
    plan = build_sampler(batch, 4, cfg.run.seed)
    trainer.run = dataclasses.replace(trainer.run, data=batch, plan=plan)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    trajectory = losses(tmp_path / "run")
    assert trajectory[8] < trajectory[1]
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_resume_reproduces_the_uninterrupted_trajectory(model_dir, data_root, tmp_path):
    DualCSETrainer(config(model_dir, data_root, tmp_path / "a")).train()
    stopped = DualCSETrainer(config(model_dir, data_root, tmp_path / "b")).train(stop_at_step=2)
    assert stopped.steps == 2 and not (tmp_path / "b" / "final").exists()
    assert latest_checkpoint(tmp_path / "b" / "checkpoints").name == "step-00000002"
    DualCSETrainer(config(model_dir, data_root, tmp_path / "b")).train(resume=True)
    assert losses(tmp_path / "b") == losses(tmp_path / "a")  # bit-identical, dropout included


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(model_dir, data_root, tmp_path, monkeypatch):  # fmt: skip
    real, calls = dualcse_module.dualcse_loss, []

    def poisoned(*args, **kwargs):
        parts = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            parts["loss"] = parts["loss"] * float("nan")
        return parts

    monkeypatch.setattr(dualcse_module, "dualcse_loss", poisoned)
    with pytest.raises(TrainingDiverged, match="step 3") as err:
        DualCSETrainer(config(model_dir, data_root, tmp_path / "run")).train()
    assert err.value.last_checkpoint.endswith("step-00000002")


def test_supervised_simcse_baseline_trains_one_embedding(model_dir, data_root, tmp_path):
    cfg = config(model_dir, data_root, tmp_path / "run", method="simcse_sup")
    result = DualCSETrainer(cfg).train()
    assert isinstance(load_embedder(str(result.final_dir)), SingleEmbedding)
    assert set(read_metrics(tmp_path / "run", "train")[0]) >= {"loss", "lr", "train_seconds"}


def test_training_items(data_root):
    examples = read_inli(data_root / "inli" / "val.csv")
    e = examples[0]
    dual = training_items(inli_config(model="m"), examples)
    assert dual[0] == (e.premise, e.explicit, e.implied, e.contradiction)
    both = training_items(inli_config(model="m", method="simcse_sup"), examples)
    assert both[:2] == [(e.premise, e.explicit, e.contradiction), (e.premise, e.implied, e.contradiction)]  # fmt: skip
    implied = training_items(inli_config(model="m", method="simcse_sup", sup_positives="implied"), examples)  # fmt: skip
    assert len(implied) == len(examples) and implied[0][1] == e.implied


def test_recipes_exist_for_both_kinds_and_the_baseline():
    names = {p.name for p in RECIPES}
    assert {
        "dualcse_cross_minilm_cpu.yaml",
        "dualcse_bi_minilm_cpu.yaml",
        "dualcse_cross_bert_base.yaml",
        "dualcse_bi_bert_base.yaml",
        "simcse_sup_inli_minilm_cpu.yaml",
    } <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_dualcse_recipe_validates(recipe):
    cfg = load_dualcse_config(recipe)
    assert isinstance(cfg, TrainConfig) and cfg.model.name
    if recipe.name.startswith("dualcse") and "_base" in recipe.name:  # the paper's settings
        cross = cfg.options.encoder == "cross"
        optimisation = cfg.optimisation
        assert (optimisation.batch_size, optimisation.learning_rate) == (
            (64, 5e-5) if cross else (32, 3e-5)
        )
        assert cfg.options.temperature == 0.05


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"encoder": "tri"}, "encoder"),
        ({"method": "dualcse2"}, "method"),
        ({"temperature": 0}, "temperature"),
        ({"batch_size": 1}, "batch_size"),
        ({"pooler": "max"}, "unknown pooler"),
        ({"intra_sentence": "maybe"}, "true or false"),
        ({"max_steps": 2.5}, "integer"),
        ({"no_such_option": 1}, "unknown option"),
    ],
)
def test_bad_options_are_rejected_with_a_reason(override, message):
    with pytest.raises(ConfigError, match=message):
        load_dualcse_config(None, {"model": "m", "method": "dualcse", **override})


def test_batch_larger_than_the_data_is_refused(model_dir, data_root, tmp_path):
    with pytest.raises(ConfigError, match="fewer than one batch"):
        DualCSETrainer(config(model_dir, data_root, tmp_path / "run", batch_size=64))


@pytest.mark.parametrize("kind", ["cross", "bi"])
def test_each_encoder_takes_the_runs_attention_mask_choice(model_dir, data_root, tmp_path, kind):
    """`model.prepared_mask` reaches DualCSE's encoders (one, or one per semantics) as it does a
    single encoder: with it on, a step's forwards make no read for transformers' mask check."""
    trainer = DualCSETrainer(
        config(model_dir, data_root, tmp_path / "run", encoder=kind, prepared_mask="on")
    )
    trainer._setup()
    encoders = list(trainer.model.encoders.values())
    assert len(encoders) == (1 if kind == "cross" else 2)
    assert all(e.prepared_mask == "on" for e in encoders)


@pytest.mark.parametrize("kind", ["cross", "bi"])
def test_length_bucket_pads_each_semantics_batch_to_its_multiple(
    model_dir, data_root, tmp_path, kind
):
    """`model.length_bucket` reaches DualCSE's tokenisation as it does a single encoder's (a
    compiled step then sees few shapes); without it a batch pads to its longest row."""
    lengths = {}
    for bucket in (0, 16):
        cfg = config(
            model_dir, data_root, tmp_path / f"b{bucket}", encoder=kind, length_bucket=bucket
        )
        trainer = DualCSETrainer(cfg)
        trainer._setup()
        features = trainer.batch(0)[0].features
        lengths[bucket] = {s: f["input_ids"].shape[1] for s, f in features.items()}
    assert all(n % 16 == 0 for n in lengths[16].values())
    assert any(n % 16 for n in lengths[0].values())  # the tiny INLI rows are not all 16 long
