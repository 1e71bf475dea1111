"""The SQLite run index: live inserts equal a rebuild from folders; queries; the `dclr runs` CLI."""

import json
from pathlib import Path

import pytest
from experiment_runs import write_run
from typer.testing import CliRunner

from dclr_lab.cli import app_with_lab
from dclr_lab.registry import Registry, compare, config_hash, find_run_dirs

app = app_with_lab()  # dclr's command line with the lab's commands

MAIN = "main"


def _cell(method: str) -> dict:
    return {MAIN: [{"backbone": "minilm", "method": method, "scale": "cpu"}]}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "exp"


def test_rebuilt_index_equals_live_index(root: Path, tmp_path: Path) -> None:
    with Registry(root) as live:
        # runs registered as they finish, one later completed and re-registered
        for i, (method, avg) in enumerate([("simcse", 70.0), ("dclr", 72.0), ("dclr", None)]):
            live.register(write_run(root, f"r{i}", method=method, seed=42 + i, avg=avg,
                                    labels=_cell(method)))  # fmt: skip
        late = root / "runs" / "r2"
        (late / "results.json").write_text(json.dumps({"steps": 60, "after": {"avg": 71.5}}))
        live.register(late)
        live_rows = live.snapshot()
    with Registry(root, db_path=tmp_path / "rebuilt.sqlite") as rebuilt:
        assert rebuilt.rebuild() == 3
        assert rebuilt.snapshot() == live_rows
    assert len([r for r in live_rows if r[0] == "run"]) == 3
    assert len([r for r in live_rows if r[0] == "label"]) == 3


def test_stale_index_differs_from_rebuild(root: Path, tmp_path: Path) -> None:
    """The equality above is not vacuous: a folder changed after indexing shows up."""
    with Registry(root) as live:
        live.register(write_run(root, "a", avg=None, labels=_cell("dclr")))
        (root / "runs" / "a" / "results.json").write_text(json.dumps({"after": {"avg": 1.0}}))
        stale = live.snapshot()
    with Registry(root, db_path=tmp_path / "other.sqlite") as rebuilt:
        rebuilt.rebuild()
        assert rebuilt.snapshot() != stale
        assert rebuilt.get("runs/a")["status"] == "complete"
    assert stale[0][:2] == ("run", "runs/a")


def test_rebuild_skips_models_and_checkpoints(root: Path) -> None:
    run = write_run(root, "a")
    for inner in ("best", "final", "checkpoints/step-00000010"):
        (run / inner).mkdir(parents=True)
        (run / inner / "config.yaml").write_text("model: x\n")
        (run / inner / "env.json").write_text("{}")
    assert list(find_run_dirs(root)) == [run]


def test_queries(root: Path) -> None:
    with Registry(root) as reg:
        reg.register(write_run(root, "s", method="simcse", avg=70.0, labels=_cell("simcse")))
        reg.register(write_run(root, "d", method="dclr", avg=73.5, labels=_cell("dclr")))
        reg.register(write_run(root, "x", method="dclr", avg=None))
        assert [r["run_id"] for r in reg.list()] == ["runs/d", "runs/s", "runs/x"]
        assert [r["run_id"] for r in reg.list(experiment=MAIN)] == ["runs/d", "runs/s"]
        assert [r["run_id"] for r in reg.list(method="dclr", status="complete")] == ["runs/d"]
        assert reg.get("runs/d")["sts_avg"] == pytest.approx(73.5)
        assert reg.get("runs/") is None  # ambiguous prefix
        assert reg.get(reg.get("runs/s")["config_hash"][:8])["run_id"] == "runs/s"
        # the folder's name as `dclr runs list` shows it under runs/, or a unique part of it
        reg.register(write_run(root, "simcse_sup-m-0a1b2c", method="simcse", avg=71.0))
        reg.register(write_run(root, "simcse-sup-x", method="simcse", avg=71.0))
        assert reg.get("simcse_sup-m-0a1b2c")["run_id"] == "runs/simcse_sup-m-0a1b2c"
        assert reg.get("0a1b2c")["run_id"] == "runs/simcse_sup-m-0a1b2c"
        assert reg.get("simcse_sup")["run_id"] == "runs/simcse_sup-m-0a1b2c"  # "_" is itself
        assert reg.get("simcse") is None  # two runs hold it: no guess
        diff, scores = compare(reg.get("runs/s"), reg.get("runs/d"))
    # the method and folder differ; the DCLR run also has a dclr section the SimCSE run lacks
    assert diff["method"] == ("simcse", "dclr")
    assert diff["output_dir"] == (str(root / "runs/s"), str(root / "runs/d"))
    assert {k for k, (a, _) in diff.items() if a is None} >= {"noise_mode", "weighting"}
    assert all(a is None for k, (a, _) in diff.items() if k not in ("method", "output_dir"))
    assert ("avg", 70.0, 73.5, 3.5) in scores


def test_config_hash_ignores_locations_only() -> None:
    base = {"model": "m", "seed": 1, "output_dir": "a", "data_dir": "x"}
    assert config_hash(base) == config_hash({**base, "output_dir": "b", "data_dir": None})
    assert config_hash(base) != config_hash({**base, "seed": 2})


def test_options_added_later_at_their_defaults_keep_a_recorded_runs_hash() -> None:
    """A run recorded before an option existed has no key for it; a new run writes its default."""
    recorded = {"model": "m", "seed": 1}
    new = {**recorded, "prefetch": "auto", "fused_optimizer": "auto", "compile": "off",
           "length_bucket": 0, "low_memory": False, "noise_gradient": "auto",
           "noise_objective": "auto"}  # fmt: skip
    assert config_hash(recorded) == config_hash(new)
    assert config_hash(recorded) != config_hash({**new, "low_memory": True})
    assert config_hash(recorded) != config_hash({**new, "noise_objective": "released"})


def test_runs_cli(root: Path) -> None:
    write_run(root, "s", method="simcse", avg=70.0, labels=_cell("simcse"))
    write_run(root, "d", method="dclr", avg=73.5, labels=_cell("dclr"))
    runner = CliRunner()
    result = runner.invoke(app, ["runs", "rebuild", "--root", str(root)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["runs", "list", "--root", str(root), "--json"])
    assert result.exit_code == 0, result.output
    listed = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [(r["run_id"], r["sts_avg"], r["experiments"]) for r in listed] == [
        ("runs/d", 73.5, [MAIN]),
        ("runs/s", 70.0, [MAIN]),
    ]
    result = runner.invoke(app, ["runs", "compare", "runs/s", "runs/d", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "+3.50" in result.stdout and "method" in result.stdout
    result = runner.invoke(app, ["runs", "show", "runs/d", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "noise_ratio" in result.stdout
    result = runner.invoke(app, ["runs", "show", "nope", "--root", str(root)])
    assert result.exit_code == 2
    assert "no run 'nope'" in " ".join(result.output.split())


def test_runs_show_of_a_schedule_root_shows_its_stages_in_order(root: Path) -> None:
    """A schedule (`sup_then_unsup`, ...) writes ROOT/stage-1 and ROOT/stage-2: its root's name
    matches both runs, which `runs show` used to refuse as ambiguous."""
    for k in (1, 2, 10):  # stage 10 sorts by number, after 2
        write_run(root, f"sched/stage-{k}", method="simcse", avg=70.0 + k)
    write_run(root, "sched-other", method="dclr", avg=73.0)  # holds "sched", no stage of it
    runner = CliRunner()
    for name in ("sched", "runs/sched", "runs/sched/"):
        result = runner.invoke(app, ["runs", "show", name, "--root", str(root)])
        assert result.exit_code == 0, result.output
        said = result.stdout
        assert "runs/sched: a schedule of 3 stages" in said
        places = [said.index(f"runs/sched/stage-{k}  status") for k in (1, 2, 10)]
        assert places == sorted(places)
        assert "runs/sched-other" not in said
    # one stage by its id, as before
    result = runner.invoke(app, ["runs", "show", "runs/sched/stage-2", "--root", str(root)])
    assert result.exit_code == 0 and "a schedule" not in result.stdout
    assert "stage-1" not in result.stdout


def test_an_ambiguous_run_names_the_runs_it_matches(root: Path) -> None:
    for k in range(7):
        write_run(root, f"seed-{k}", seed=k)
    with Registry(root) as reg:
        assert [r["run_id"] for r in reg.matches("seed")] == [f"runs/seed-{k}" for k in range(7)]
        assert reg.stages("seed") == []  # runs, no schedule
    for schedule in ("a/sched", "b/sched"):  # one name, two schedules' roots: no guess
        for k in (1, 2):
            write_run(root, f"{schedule}/stage-{k}")
    with Registry(root, db_path=root / "other.sqlite") as reg:
        assert reg.stages("sched") == []
        assert [r["run_id"] for r in reg.stages("a/sched")] == ["runs/a/sched/stage-1",
                                                               "runs/a/sched/stage-2"]  # fmt: skip
    result = CliRunner().invoke(app, ["runs", "show", "seed", "--root", str(root)])
    said = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "7 runs match 'seed': runs/seed-0, runs/seed-1" in said
    assert "runs/seed-4 and 2 more; name one of them" in said


def test_runs_list_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: `dclr runs list` created ./experiments/index.sqlite and missed `dclr train -o`
    runs. Now a missing root is said so and left absent, and any folder of run folders (here
    runs/, as `dclr train -o runs/NAME` writes them) is listed from an in-memory index."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DCLR_EXPERIMENTS_DIR", raising=False)
    write_run(tmp_path, "my-run", method="dclr", avg=73.5)  # tmp_path/runs/my-run
    runner = CliRunner()
    result = runner.invoke(app, ["runs", "list"])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "experiments does not exist" in said
    assert "--root runs" in said and not (tmp_path / "experiments").exists()
    result = runner.invoke(app, ["runs", "list", "--root", "runs", "--json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["sts_avg"] for line in result.output.splitlines()] == [73.5]
    assert not (tmp_path / "runs" / "index.sqlite").exists()


def test_a_run_config_nested_100000_deep_is_a_named_error(root: Path) -> None:
    """Issue 39 item 4: run folders' config.yaml was read with yaml.safe_load, whose composer
    recursed once per level (a RecursionError); it is read as a recipe now."""
    from dclr.errors import ConfigError
    from dclr_lab.registry import read_run

    run_dir = write_run(root, "deep")
    (run_dir / "config.yaml").write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="config.yaml, line 1: nested deeper than"):
        read_run(run_dir, "r")
