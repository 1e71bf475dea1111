"""`dclr runs archive` / `restore`: an experiment's run records without models, a root of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from experiment_runs import write_run
from typer.testing import CliRunner

from dclr.errors import InputError
from dclr_lab.archive import RECORD_FILES, archive_experiment, restore_records
from dclr_lab.cli import app_with_lab
from dclr_lab.registry import Registry
from dclr_lab.report import build_report
from dclr_lab.runner import action_for, plan

app = app_with_lab()  # dclr's command line with the lab's commands

LABEL = "consert-augmentations"


def _cells(**labels: object) -> dict:
    return {"scale": "cpu", "backbone": "minilm", "method": "consert", **labels}


def _experiment_root(root: Path) -> None:
    for view, offset in (("none", 0.0), ("token_shuffle", 1.5)):
        for seed in (42, 43, 44):
            run = write_run(root, f"v-{view}-{seed}", method="consert", seed=seed,
                            avg=70.0 + offset + (seed - 42) * 0.25,
                            labels={LABEL: [_cells(view=view)]})  # fmt: skip
            (run / "best").mkdir()
            (run / "best" / "model.safetensors").write_bytes(b"\0" * 1000)
            (run / "before.json").write_text(json.dumps({"avg": 60.0}))
    write_run(root, "unfinished", method="consert", avg=None, labels={LABEL: [_cells(view="none")]})
    write_run(root, "other-experiment", method="consert", labels={"main": [_cells()]})


def test_archive_keeps_records_only_and_rebuilds_the_same_report(tmp_path: Path) -> None:
    root, dest = tmp_path / "exp", tmp_path / "archive"
    _experiment_root(root)
    done = archive_experiment(LABEL, root, dest)
    assert len(done.runs) == 6 and done.skipped_incomplete == ("unfinished",)
    kept = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert "runs/v-none-42/before.json" in kept and "runs/v-none-42/results.json" in kept
    assert not any("safetensors" in p or "unfinished" in p or "other" in p for p in kept)
    assert {Path(p).name for p in kept if p.startswith("runs/")} <= set(RECORD_FILES)
    with Registry(root) as live:
        live.rebuild()
        original = build_report(LABEL, live, tmp_path / "r1").read_text()
    assert "index.sqlite" not in kept  # a binary, rebuilt from the records on first use
    with Registry(dest) as archived:
        again = build_report(LABEL, archived, tmp_path / "r2").read_text()
    table = [line for line in original.splitlines() if line.startswith("| ")]
    assert table and table == [line for line in again.splitlines() if line.startswith("| ")]
    assert "+1.50 [+1.50, +1.50]" in again


def test_archive_of_an_experiment_with_no_complete_run_names_the_fix(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    write_run(root, "unfinished", method="consert", avg=None, labels={LABEL: [_cells(view="none")]})
    with pytest.raises(InputError, match=r"no complete run of experiment .* \(1 incomplete\)"):
        archive_experiment(LABEL, root, tmp_path / "archive")
    assert not (tmp_path / "archive").exists()


def test_restored_records_are_skipped_by_the_runner(tmp_path: Path) -> None:
    """The real plan of dualcse-inli: archive the first seed's two runs, restore them into a
    fresh root, and the runner skips exactly those and starts the rest."""
    first = tmp_path / "first"
    runs = plan("dualcse-inli", "cpu", 3, first)
    for item in runs[:2]:  # seed 42: DualCSE-cross and SimCSE-sup
        item.run_dir.mkdir(parents=True)
        item.config.save(item.run_dir / "config.yaml")
        (item.run_dir / "env.json").write_text("{}")
        (item.run_dir / "results.json").write_text(json.dumps({"rte_test": {"avg": 70.0}}))
        (item.run_dir / "labels.json").write_text(json.dumps({"dualcse-inli": item.labels}))
    archive_experiment("dualcse-inli", first, tmp_path / "archive")
    second = tmp_path / "second"
    assert len(restore_records(tmp_path / "archive", second)) == 2
    assert restore_records(tmp_path / "archive", second) == []  # already there: kept
    assert [p.action for p in plan("dualcse-inli", "cpu", 3, second)] == ["skip"] * 2 + [
        "start"
    ] * 4
    assert action_for(second / "runs" / runs[0].run_dir.name) == "skip"


def test_cli_archive_and_restore(tmp_path: Path) -> None:
    root, dest = tmp_path / "exp", tmp_path / "archive"
    _experiment_root(root)
    runner = CliRunner()
    result = runner.invoke(app, ["runs", "archive", LABEL, "-o", str(dest), "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "archived 6 complete run(s)" in result.output and "unfinished" in result.output
    result = runner.invoke(app, ["runs", "restore", str(dest), "--root", str(tmp_path / "new")])
    assert result.exit_code == 0 and "restored 6 run record(s)" in result.output
    result = runner.invoke(app, ["runs", "restore", str(tmp_path), "--root", str(tmp_path / "n")])
    assert result.exit_code == 2 and "holds no runs/ folder" in result.output


ARCHIVES = Path(__file__).resolve().parents[2] / "docs" / "results" / "cpu-scale"


def test_every_committed_archive_is_planned_under_its_own_folder_names(tmp_path: Path) -> None:
    """The docs say `dclr runs restore docs/results/.../records` then `experiment run` skips those
    runs: every archived run's folder is one the experiment's plan names today. An option added
    since is hash-neutral at the default that reproduces them (registry.LATER_DEFAULTS); without
    async_checkpoints and prepared_mask there every DualCSE archive was planned anew."""
    checked = 0
    for runs in sorted(ARCHIVES.glob("*/records/runs")):
        by_experiment: dict[str, set[str]] = {}
        for folder in runs.iterdir():
            labels = folder / "labels.json"
            for name in json.loads(labels.read_text()) if labels.is_file() else []:
                by_experiment.setdefault(name, set()).add(folder.name)
        for name, archived in by_experiment.items():
            planned = {item.run_dir.name for item in plan(name, "cpu", 5, tmp_path / name)}
            assert archived <= planned, (runs, name, sorted(archived - planned)[:3])
            checked += len(archived)
    assert checked >= 200  # the archives of main, ablation, dense, dup-corpus, ... (204 runs)


def test_a_folder_named_before_an_option_became_hash_neutral_is_still_that_run(
    tmp_path: Path,
) -> None:
    """Runs named while the pair rules' options, async_checkpoints and prepared_mask were hashed
    at their defaults (runner.HASHED_BEFORE) are found under those names, not started again."""
    from dclr_lab.runner import HASHED_BEFORE, portable_hash, run_dir_for

    root = tmp_path / "root"
    item = plan("main", "cpu", 1, root)[-1]  # a DCLR run (CPU scale: no complementary run)
    assert item.config.method == "dclr" and item.action == "start"
    for hashed in HASHED_BEFORE:
        older = portable_hash(item.config, root, hashed)
        assert older != item.run_dir.name.rsplit("-", 1)[1]  # named apart from today's
    stem = item.run_dir.name.rsplit("-", 1)[0]
    older_dir = root / "runs" / f"{stem}-{portable_hash(item.config, root, HASHED_BEFORE[-1])}"
    older_dir.mkdir(parents=True)
    (older_dir / "results.json").write_text("{}")
    again = plan("main", "cpu", 1, root)[-1]
    assert again.run_dir == older_dir.resolve() and again.action == "skip"
    assert run_dir_for(again.config, root) == older_dir.resolve()


def test_a_dependent_run_is_found_with_the_complementary_run_it_was_trained_on(
    tmp_path: Path,
) -> None:
    """Paper scale: DCLR's complementary model is a SimCSE run of the plan. A SimCSE run under
    today's name (S0) and its retrained copy under the older naming (S3), with the DCLR run
    trained on S3 (D3): D3 is that DCLR run (its config points at S3, so it is named with S3's
    path under that naming); without D3 a new DCLR run starts on the SimCSE run found first."""
    import shutil

    from dclr_lab.runner import HASHED_BEFORE, portable_hash

    root = tmp_path / "root"
    items = plan("main", "paper", 1, root)
    dclr = next(i for i in items if i.spec.complementary_from is not None)
    complementary = Path(dclr.config.section("dclr").complementary_model)
    simcse = next(i for i in items if i.run_dir == complementary.parent)
    era = HASHED_BEFORE[-1]
    s0 = simcse.run_dir
    s3 = s0.with_name(f"{s0.name.rsplit('-', 1)[0]}-{portable_hash(simcse.config, root, era)}")
    on_s3 = dclr.config.updated({"dclr.complementary_model": str(s3 / "best")})
    d3 = dclr.run_dir.with_name(
        f"{dclr.run_dir.name.rsplit('-', 1)[0]}-{portable_hash(on_s3, root, era)}"
    )
    for folder in (s0, s3, d3):
        folder.mkdir(parents=True)
        (folder / "results.json").write_text("{}")
    again = {i.run_dir: i for i in plan("main", "paper", 1, root)}
    assert again[d3].action == "skip"  # not trained again beside it
    assert again[d3].config.section("dclr").complementary_model == str(s3 / "best")
    assert again[s0].action == "skip" and s3 not in again  # today's name first among complete
    (d3 / "results.json").unlink()
    (d3 / "checkpoints" / "step-00000010").mkdir(parents=True)  # interrupted: resumed there
    (d3 / "checkpoints" / "step-00000010" / "state.json").write_text("{}")
    (dclr.run_dir / "checkpoints").mkdir(parents=True)  # today's name, not one step in
    assert {i.run_dir: i.action for i in plan("main", "paper", 1, root)}[d3] == "resume"
    shutil.rmtree(dclr.run_dir)
    shutil.rmtree(d3)
    fresh = next(i for i in plan("main", "paper", 1, root) if i.spec.complementary_from)
    assert fresh.action == "start" and fresh.run_dir == dclr.run_dir  # on S0, today's name
