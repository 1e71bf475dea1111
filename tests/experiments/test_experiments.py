"""Experiment specs, the runner (skip / resume / start, shared runs) and HP search, with a fake
trainer that writes what `run_training` writes: no model is trained here."""

import json
import typing
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from dclr.errors import ConfigError
from dclr.options.config import TrainConfig
from dclr.recipe import config_from_dict, load_config
from dclr.views.strategies import RATED
from dclr_lab import paper
from dclr_lab.registry import Registry
from dclr_lab.runner import (
    launcher_train,
    parse_only,
    plan,
    run_experiment,
    subset_corpus,
)
from dclr_lab.runspec import ExperimentUnavailable, default_recipes_dir
from dclr_lab.search import SearchSpace, run_search
from dclr_lab.specs import experiment_specs
from dclr_lab.studies.augmentations import VIEW_FIELD
from dclr_lab.studies.dclr_paper import ABLATIONS

RECIPES = REPO_ROOT / "recipes"


def fake_train(calls: list) -> typing.Callable:
    def train(config: TrainConfig, resume: bool) -> None:
        calls.append((Path(config.run.output_dir).name, resume))
        run = Path(config.run.output_dir)
        run.mkdir(parents=True, exist_ok=True)
        config.save(run / "config.yaml")
        (run / "env.json").write_text(json.dumps({"git_commit": None}))
        after = {"avg": 70.0 + config.run.seed - 42, "STSBenchmark": 71.0, "SICKRelatedness": 72.0}
        (run / "results.json").write_text(json.dumps({"steps": 60, "after": after}))

    return train


def test_every_experiment_resolves_to_valid_configs(tmp_path: Path) -> None:
    for name in ("main", "ablation", "uniformity", "few-shot", "sensitivity"):
        for scale in ("cpu", "paper"):
            planned = plan(name, scale, 2, tmp_path, RECIPES)
            assert planned and all(p.action == "start" for p in planned)
            for item in planned:
                item.config.validate()
                assert Path(item.config.run.output_dir) == item.run_dir


def test_ablation_rows_set_the_dclr_options() -> None:
    specs = experiment_specs("ablation", "cpu", 1)
    assert {s.labels["variant"] for s in specs} == set(paper.ABLATION_LABELS) == set(ABLATIONS)
    by_variant = {s.labels["variant"]: load_config(RECIPES / s.recipe, s.overrides) for s in specs}
    assert by_variant["no_noise"].options.noise_mode == "none"
    assert by_variant["random_noise"].options.noise_mode == "random"
    assert by_variant["self_weighting"].options.weighting == "self"
    assert by_variant["distill"].options.weighting == "distill"
    assert by_variant["no_weighting"].options.weighting == "none"
    assert by_variant["full"].options.noise_mode == "optimized"
    assert by_variant["full"].options.weighting == "complementary"


def test_identical_configs_share_one_run(tmp_path: Path) -> None:
    main = {p.run_dir for p in plan("main", "cpu", 1, tmp_path, RECIPES)}
    ablation = {
        p.labels[0]["variant"]: p.run_dir for p in plan("ablation", "cpu", 1, tmp_path, RECIPES)
    }
    assert ablation["full"] in main
    uniformity = {p.run_dir for p in plan("uniformity", "cpu", 1, tmp_path, RECIPES)}
    assert uniformity == main  # every CPU run logs a uniformity curve
    sensitivity = plan("sensitivity", "cpu", 1, tmp_path, RECIPES)
    shared = [p for p in sensitivity if len(p.labels) == 2]  # phi = 0.9 and k = 1 are one run
    assert len(shared) == 1 and shared[0].run_dir == ablation["full"]
    assert len(sensitivity) == 9


def test_a_moved_root_keeps_its_run_names(tmp_path: Path) -> None:
    """Configs hold paths under the root (few-shot corpus subsets, paper-scale complementary
    models); the names hash them with the root replaced, so a moved root finds its runs."""
    for name, scale in (("few-shot", "cpu"), ("main", "paper")):
        here, there = (
            [p.run_dir.name for p in plan(name, scale, 1, tmp_path / root, RECIPES)]
            for root in ("a", "moved")
        )
        assert here == there


def test_paper_scale_dclr_uses_the_simcse_run_as_complementary(tmp_path: Path) -> None:
    planned = plan("ablation", "paper", 1, tmp_path, RECIPES)
    simcse = planned[0]
    assert simcse.config.method == "simcse" and simcse.labels == []  # a dependency, trained first
    for item in planned[1:]:
        assert item.config.section("dclr").complementary_model == str(simcse.run_dir / "best")


def test_augmentations_needs_the_view_option() -> None:
    from dclr.recipe import flat_hints

    if VIEW_FIELD in flat_hints():  # the option lives in a section; flat names still address it
        specs = experiment_specs("augmentations", "cpu", 1)
        offered = set(typing.get_args(flat_hints()[VIEW_FIELD]))
        assert {s.overrides[VIEW_FIELD] for s in specs} == offered - {"adversarial"}
        for spec in specs:  # every one resolves to a valid config, cutoffs with a rate > 0
            config = load_config(RECIPES / spec.recipe, spec.overrides)
            assert (config.options.view2_rate > 0) == (config.options.view2 in RATED)
    else:
        with pytest.raises(ExperimentUnavailable, match="not available yet"):
            experiment_specs("augmentations", "cpu", 1)


def test_runner_skips_done_resumes_interrupted_and_registers(tmp_path: Path) -> None:
    calls: list = []
    first = run_experiment("main", "cpu", 2, tmp_path, RECIPES, train=fake_train(calls), log=str)
    assert sorted(calls) == sorted((p.run_dir.name, False) for p in first) and len(calls) == 4
    calls.clear()
    # an interrupted run: results gone, a checkpoint left behind
    victim = first[0].run_dir
    (victim / "results.json").unlink()
    (victim / "checkpoints" / "step-00000020").mkdir(parents=True)
    (victim / "checkpoints" / "step-00000020" / "state.json").write_text("{}")
    run_experiment("main", "cpu", 2, tmp_path, RECIPES, train=fake_train(calls), log=str)
    assert calls == [(victim.name, True)]
    with Registry(tmp_path) as registry:
        rows = registry.experiment_runs("main")
        assert len(rows) == 4 and all(r["status"] == "complete" for r, _ in rows)
        assert {(lab["method"], r["seed"]) for r, lab in rows} == {
            (m, s) for m in ("simcse", "dclr") for s in (42, 43)
        }
        live = registry.snapshot()
    with Registry(tmp_path, db_path=tmp_path / "rebuilt.sqlite") as rebuilt:
        rebuilt.rebuild()
        assert rebuilt.snapshot() == live


def test_subset_corpus_is_seeded_and_at_least_a_batch(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {i}\n" for i in range(1000)))
    config = load_config(None, {"model": "m", "corpus": str(corpus), "batch_size": 64})
    path = Path(subset_corpus(config, 0.1, 7, tmp_path / "root"))
    lines = path.read_text().splitlines()
    assert len(lines) == 100 and len(set(lines)) == 100
    assert set(lines) <= {f"sentence {i}" for i in range(1000)}
    other = Path(subset_corpus(config, 0.1, 8, tmp_path / "root")).read_text().splitlines()
    assert other != lines
    tiny = Path(subset_corpus(config, 0.003, 7, tmp_path / "root")).read_text().splitlines()
    assert len(tiny) == 64  # 3 sentences would not fill one batch


def test_search_grid_and_random(tmp_path: Path) -> None:
    space = SearchSpace.parse(["learning_rate=1e-5,3e-5", "noise_steps=1,4"], [], [], None)
    assert len(space.points()) == 4
    assert {p["learning_rate"] for p in space.points()} == {1e-5, 3e-5}
    random = SearchSpace.parse([], [], ["noise_step_size=1e-4:1e-2"], 5, seed=1)
    values = [p["noise_step_size"] for p in random.points()]
    assert len(values) == 5 and all(1e-4 <= v <= 1e-2 for v in values)
    assert values == [p["noise_step_size"] for p in random.points()]  # seeded
    other = SearchSpace.parse([], [], ["noise_step_size=1e-4:1e-2"], 5, seed=2)
    assert [p["noise_step_size"] for p in other.points()] != values  # by its own seed
    # log-uniform: half the draws under the geometric midpoint 1e-3 (a linear draw: 9 %)
    many = SearchSpace.parse([], [], ["noise_step_size=1e-4:1e-2"], 400, seed=1).points()
    assert 0.4 < sum(p["noise_step_size"] < 1e-3 for p in many) / 400 < 0.6
    linear = SearchSpace.parse([], ["noise_step_size=1e-4:1e-2"], [], 400, seed=1).points()
    assert sum(p["noise_step_size"] < 1e-3 for p in linear) / 400 < 0.2
    # a grid with ranges: each trial takes a random grid point; an int field draws ints
    mixed = SearchSpace.parse(["learning_rate=1e-5,3e-5"], ["noise_steps=1:9"], [], 20).points()
    assert {p["learning_rate"] for p in mixed} == {1e-5, 3e-5}
    assert all(type(p["noise_steps"]) is int and 1 <= p["noise_steps"] <= 9 for p in mixed)


def test_search_trials_are_registered_runs(tmp_path: Path) -> None:
    calls: list = []
    train = fake_train(calls)

    def worker(values: dict, resume: bool, threads: int) -> str:
        config = config_from_dict(values)
        train(config, resume)
        return config.run.output_dir

    space = SearchSpace.parse(["seed=42,44"], [], [], None)
    recipe = RECIPES / "dclr_minilm_cpu.yaml"
    best = run_search(recipe, space, tmp_path, "seeds", train=worker, log=str)
    assert len(calls) == 2 and "avg 72.00" in best
    assert run_search(recipe, space, tmp_path, "seeds", train=worker, log=str) == best
    assert len(calls) == 2  # finished trials are skipped
    with Registry(tmp_path) as registry:
        trials = sorted(
            lab["params"]["seed"] for _, lab in registry.experiment_runs("search:seeds")
        )
    assert trials == [42, 44]


def test_launcher_runs_dclr_train_in_a_subprocess(tmp_path: Path) -> None:
    commands: list = []
    train = launcher_train(
        "torchrun --nproc_per_node 4", run=lambda cmd, check: commands.append(cmd)
    )
    config = load_config(None, {"model": "m", "output_dir": str(tmp_path / "run")})
    train(config, False)
    train(config, True)
    recipe = tmp_path / "run" / "requested.yaml"
    assert commands == [
        ["torchrun", "--nproc_per_node", "4", "-m", "dclr", "train", str(recipe)],
        [
            "torchrun",
            "--nproc_per_node",
            "4",
            "-m",
            "dclr",
            "train",
            "--resume",
            str(tmp_path / "run"),
        ],
    ]
    assert load_config(recipe).to_dict() == config.to_dict()


def test_experiment_commands(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dclr_lab.cli import app_with_lab

    app = app_with_lab()

    runner = CliRunner()
    result = runner.invoke(app, ["experiment", "list"])
    assert result.exit_code == 0 and "few-shot" in result.stdout
    args = ["experiment", "run", "ablation", "--root", str(tmp_path), "--dry-run",
            "--recipes-dir", str(RECIPES), "--seeds", "2"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("start ") == 12 and not (tmp_path / "runs").exists()
    summary = " ".join(result.stdout.split())
    assert "12 runs: 12 to start, 0 to resume, 0 done; seeds 42, 43; steps per run 60" in summary
    assert "no finished run here to estimate the time from" in summary
    halves = []
    for k in (0, 1):  # --dry-run of a shard lists that shard's runs, as `run --shard` trains
        result = runner.invoke(app, [*args, "--shard", f"{k}/2"])
        assert result.exit_code == 0, result.output
        halves.append([line.split()[1] for line in result.stdout.splitlines() if "start " in line])
    assert len(halves[0]) == len(halves[1]) == 6 and not set(halves[0]) & set(halves[1])
    # and refuses what the run would refuse: a shard's DCLR run whose SimCSE is not complete
    paper = ["experiment", "run", "main", "--scale", "paper", "--seeds", "1", "--root",
             str(tmp_path), "--dry-run"]  # fmt: skip
    assert runner.invoke(app, [*paper, "--shard", "0/2"]).exit_code == 0
    result = runner.invoke(app, [*paper, "--shard", "1/2"])
    assert result.exit_code == 2 and "train the dependencies first" in result.output
    args = ["experiment", "run", "augmentations", "--root", str(tmp_path), "--dry-run",
            "--recipes-dir", str(RECIPES)]  # fmt: skip
    result = runner.invoke(app, args)
    from dclr.recipe import flat_hints

    if VIEW_FIELD not in flat_hints():
        assert result.exit_code == 2 and "not available yet" in result.output
    else:
        # 7 views x 2 methods x 3 seeds (the default, the least for a paired 95 % interval)
        assert result.exit_code == 0 and result.stdout.count("start ") == 42, result.output
    result = runner.invoke(app, ["experiment", "run", "nope", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "unknown experiment" in result.output


def test_shards_split_the_plan(tmp_path: Path) -> None:
    calls: list = []
    overrides = {"data_dir": "/nowhere"}
    for k in (0, 1):
        run_experiment("dense", "cpu", 3, tmp_path, RECIPES, overrides, train=fake_train(calls),
                       log=lambda _: None, shard=(k, 2))  # fmt: skip
    trained = [name for name, _ in calls]
    everything = [p.run_dir.name for p in plan("dense", "cpu", 3, tmp_path, RECIPES, overrides)]
    # per seed: [CLS] 3 variants x 4 rho + 2 (calibrated); mean pooling 5 variants x 4 rho
    assert sorted(trained) == sorted(everything) and len(set(trained)) == len(trained) == 102


def test_only_keeps_the_runs_with_those_labels(tmp_path: Path) -> None:
    overrides = {"data_dir": "/nowhere"}
    only = parse_only(["setting=mean", "density=0.5,0"])
    assert only == {"setting": ["mean"], "density": ["0.5", "0"]}
    picked = plan("dense", "cpu", 3, tmp_path, RECIPES, overrides, only=only)
    cells = [lab for p in picked for lab in p.labels]
    assert len(picked) == 3 * 2 * 5 and len(cells) == len(picked)
    assert {c["setting"] for c in cells} == {"mean"} and {c["density"] for c in cells} == {0, 0.5}
    every = {p.run_dir for p in plan("dense", "cpu", 3, tmp_path, RECIPES, overrides)}
    assert {p.run_dir for p in picked} < every  # the same folders as the whole plan's
    for bad in (["density"], ["=0.5"]):
        with pytest.raises(ConfigError, match="LABEL=VALUE"):
            parse_only(bad)
    with pytest.raises(ConfigError, match="no run"):
        plan("dense", "cpu", 1, tmp_path, RECIPES, overrides, only={"setting": ["nope"]})
    with pytest.raises(ConfigError, match="no run"):  # a label no run has matches none
        plan("dense", "cpu", 1, tmp_path, RECIPES, overrides, only={"phi": ["0.9"]})
    one_seed = plan("dense", "cpu", 3, tmp_path, RECIPES, overrides, only={**only, "seed": ["44"]})
    assert len(one_seed) == 2 * 5 and {p.config.run.seed for p in one_seed} == {44}


def test_issue16_experiments_resolve_to_valid_configs() -> None:
    counts = {"consert-augmentations": 7 * 3, "consert-few-shot": 4 * 3, "dualcse-inli": 2 * 3}
    for name, count in counts.items():
        specs = experiment_specs(name, "cpu", 3)
        assert len(specs) == count
        for spec in specs:
            config = load_config(RECIPES / spec.recipe, spec.overrides)
            if name != "dualcse-inli":
                assert config.model.pooler == "mean" and config.model.eval_pooler == "avg_top2"
    few = [load_config(RECIPES / s.recipe, s.overrides) for s in experiment_specs("consert-few-shot", "cpu", 1)]  # fmt: skip
    assert [c.data.few_shot_sentences for c in few] == [1, 10, 100, 1000]
    assert {c.data.corpus for c in few} == {"sts_all"} and {c.data.small_data for c in few} == {"shrink_batch"}  # fmt: skip
    # at paper scale also 10,000 texts and all 89,192 (the recipe's corpus, no subset drawn)
    paper = [load_config(RECIPES / s.recipe, s.overrides) for s in experiment_specs("consert-few-shot", "paper", 1)]  # fmt: skip
    assert [c.data.few_shot_sentences for c in paper] == [1, 10, 100, 1000, 10_000, None]
    assert {c.data.corpus for c in paper} == {"sts_all"}
    inli = [load_config(RECIPES / s.recipe, s.overrides) for s in experiment_specs("dualcse-inli", "cpu", 1)]  # fmt: skip
    assert [(c.method, c.optimisation.epochs, c.optimisation.max_steps) for c in inli] == [
        ("dualcse", 1.0, None), ("simcse_sup", 1.0, None)]  # fmt: skip


def test_cli_help_names_every_experiment() -> None:
    from dclr_lab.cli import EXPERIMENT_NAMES
    from dclr_lab.specs import EXPERIMENTS

    assert tuple(EXPERIMENTS) == EXPERIMENT_NAMES


def test_a_run_another_process_trains_is_left_for_later(tmp_path: Path) -> None:
    """Two experiments sharing a run (the ablation's full row is main's DCLR run), each split
    into shards: the second found the run locked by the first and stopped the whole experiment.
    Now the locked run is left for later and the rest of the shard is trained."""
    from dclr.runlock import LockHeld

    calls: list = []
    train = fake_train(calls)
    locked: list = []

    def sometimes_locked(config: TrainConfig, resume: bool) -> None:
        if not locked:  # the first run: another process holds its folder
            locked.append(Path(config.run.output_dir).name)
            raise LockHeld(f"{config.run.output_dir} is in use by pid 1 on vm\n  fix: wait")
        train(config, resume)

    logs: list[str] = []
    runs = run_experiment("main", "cpu", 2, tmp_path, RECIPES, {"data_dir": "/nowhere"},
                          train=sometimes_locked, log=logs.append)  # fmt: skip
    assert [r.action for r in runs].count("busy") == 1 and len(calls) == len(runs) - 1
    assert any("busy, left for later" in line for line in logs)
    assert "run this command again" in logs[-1] and locked[0] in logs[-1]
    again = run_experiment("main", "cpu", 2, tmp_path, RECIPES, {"data_dir": "/nowhere"},
                           train=train, log=lambda _: None)  # fmt: skip
    assert [r.action for r in again].count("start") == 1  # the busy one, now free


def test_the_lab_finds_the_recipes_from_any_folder(tmp_path, monkeypatch):
    """Outside the checkout (or with the lab installed from wheels) the runs plan from the recipes
    dclr ships; a ./recipes folder comes first."""
    from dclr.shipped_recipes import SHIPPED_RECIPES

    monkeypatch.chdir(tmp_path)
    assert default_recipes_dir() == SHIPPED_RECIPES
    assert (default_recipes_dir() / "dclr_minilm_cpu.yaml").is_file()
    (tmp_path / "recipes").mkdir()
    assert default_recipes_dir() == tmp_path / "recipes"
