"""`dclr train`: evaluate the starting model, train, evaluate the trained model, write results.json.

The layer above the training loop. It looks the config's methods up by name (`section_methods`,
the only call of `dclr.methods.registry.get_method` here: the config's method and that of every
section it holds, such as NLI's contrastive part), prepares each run once
(`dclr.training.prepare.prepare_run`: the model, the examples, the batch plan, the total steps,
the device and the run folder) and hands that `PreparedRun`, with those methods, to the method's
hooks and to the loop (`Trainer(run)`). The core returns data (the summary written to results.json); the command line
renders it. A method whose schedule has several stages (`Method.stages`) runs each as its own run
folder under the output folder.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dclr import atomic
from dclr import distributed as dist
from dclr._meta import __version__
from dclr.contract import Evaluator, MethodPlugin, PreparedRun, TrainResult
from dclr.errors import ConfigError
from dclr.evaluation.retrieval_runs import retrieval_test_scores, starting_retrieval
from dclr.methods.registry import get_method
from dclr.models.card import write_run_cards
from dclr.options.config import TrainConfig
from dclr.options.flat import flat_values
from dclr.runlock import FolderLock
from dclr.training import runfolder
from dclr.training.checkpoint import latest_checkpoint
from dclr.training.loop import Trainer
from dclr.training.phases import PhaseTimes, breakdown, phase
from dclr.training.prepare import prepare_run

Runs = list[tuple[TrainConfig, MethodPlugin]]  # the runs of a config, each with its method


def section_methods(config: TrainConfig) -> dict[str, MethodPlugin]:
    """The method of `config` and of every section it holds (`config.sections`), by name: the
    driver's one look-up of methods by name (`PreparedRun.methods`)."""
    return {name: get_method(name) for name in dict.fromkeys([config.method, *config.sections])}


def resolve(config: TrainConfig) -> tuple[MethodPlugin, Runs]:
    """`config`'s method, and its runs each with its own method: `config` itself, or the stages of
    its schedule (`Method.stages`), each checked by its method (`Method.check`) before the first
    trains."""
    method = section_methods(config)[config.method]
    stages = method.stages(config)
    if len(stages) == 1:
        return method, [(config, method)]
    runs = [run for stage in stages for run in resolve(stage)[1]]
    for stage, stage_method in runs:
        stage_method.check(stage)
    return method, runs


def prepared(config: TrainConfig, method: MethodPlugin, **injected: Any) -> PreparedRun:
    """`prepare_run` of `config` with `method` and the methods of its sections (`model` and `data`
    may be injected, as `prepare_run` takes them)."""
    return prepare_run(config, method, methods=section_methods(config), **injected)


def trainer_for(
    config: TrainConfig, evaluator: Evaluator | None = None, **injected: Any
) -> Trainer:
    """A `Trainer` for `config`, its method looked up and its run prepared (`model` and `data` may
    be injected, as `prepare_run` takes them, and `evaluator`, as `Trainer` does)."""
    return Trainer(prepared(config, resolve(config)[0], **injected), evaluator)


def run_schedule(config: TrainConfig) -> list[TrainResult]:
    """Train every stage of the method's schedule (`Method.stages`), in order, without the
    before/after evaluation of `run_training`."""
    return [Trainer(prepared(stage, method)).train() for stage, method in resolve(config)[1]]


def _version_of(distribution: str) -> str | None:
    """An installed distribution's version from its metadata (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Versions, device and the git commit of the tool, saved with every run."""
    import transformers

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).parent,
                timeout=5,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "dclr": __version__,
        "git_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        # its version without importing it (~280 MB of imports a run otherwise never needs)
        "sentence_transformers": _version_of("sentence-transformers"),
        "device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or "cpu",
        "world_size": dist.world_size(),
        "torch_threads": torch.get_num_threads(),
    }


def write_json(path: Path, data: Any) -> None:
    """Written to a temp name and renamed: a cut-off results.json never marks a run finished."""
    atomic.write_text(path, json.dumps(data, indent=2) + "\n")


def starting_scores(
    folder: Path, reuse: bool, evaluate: Callable[[], dict[str, float] | None]
) -> dict[str, float] | None:
    """The starting model's scores ("before") of a run or a schedule in `folder`: its before.json
    when `reuse` and it is there, else `evaluate()`, written to before.json (unless None)."""
    file = folder / "before.json"
    if reuse and file.exists():
        return json.loads(file.read_text())
    with phase("before_eval"):
        before = evaluate()
    if before is not None:
        write_json(file, before)
    return before


def run_stages(
    config: TrainConfig,
    method: MethodPlugin,
    stages: Runs,
    resume: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """A schedule of several runs (`Method.stages`, resolved with their methods): each stage is a
    run in its own folder; a finished stage is skipped, an interrupted one resumed. The
    before/after scores compare the starting model with the best model of the last stage. The
    root folder is locked for the schedule (`dclr.training.runfolder`)."""
    root = Path(config.run.output_dir)
    single = [m.name for _, m in stages if not m.distributed]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and single:  # torchrun's, before any group
        raise ConfigError(  # said first: the other ranks would wait for it in vain
            f"method {config.method!r} runs a schedule of stages, and {', '.join(single)} runs in "
            "one process: run it without torchrun"
        )
    main = runfolder.rank_from_env() == 0  # under torchrun rank 0 holds the folder, scores, writes
    if main:  # before the root is claimed (--overwrite clears the stages) and the ranks meet (a
        # stage refused later would leave the others in DDP's set-up): a stage in use elsewhere
        for stage, _ in stages:
            FolderLock(stage.run.output_dir, "dclr train").check()
    with runfolder.claim(root, resume, overwrite, main=main):
        before = None
        if main:
            config.save(root / "config.yaml")
            # scored once for the schedule and kept across its reruns, as its finished stages are
            before = starting_scores(root, True, lambda: method.evaluate_start(config))
        dist.init_from_env()
        dist.barrier()  # the other ranks wait here for rank 0's claim (and --overwrite) and
        # scores: NCCL's group set-up is no barrier, and a rank that looked at the stages early
        # could skip one that --overwrite then cleared
        done = []
        for stage, stage_method in stages:
            stage_dir = Path(stage.run.output_dir)
            if not (stage_dir / "results.json").exists():
                again = resume and latest_checkpoint(stage_dir / "checkpoints") is not None
                try:
                    run_one(stage.updated({"run.test_eval": False}), stage_method, resume=again)
                except runfolder.TrainingStopped as stop:  # resumed as a schedule, from its root
                    raise runfolder.TrainingStopped(stop.step, stop.checkpoint, str(root)) from None
            dist.barrier()  # rank 0 has written the stage's results.json
            done.append(json.loads((stage_dir / "results.json").read_text()))
        summary: dict[str, Any] = {"method": config.method, "stages": done}
        summary["best_dir"] = done[-1]["best_dir"]
        if main:
            if config.run.test_eval:
                last, last_method = stages[-1]
                final = last_method.evaluate_final(
                    last.updated({"run.test_eval": True}), _result_of(done[-1])
                )
                summary.update(before=before, **final)
            write_json(root / "results.json", summary)
        return summary


def _result_of(summary: dict[str, Any]) -> TrainResult:
    return TrainResult(
        summary["steps"],
        Path(summary["final_dir"]),
        Path(summary["best_dir"]),
        summary.get("best_dev_metric"),
        summary.get("best_step"),
    )


Notify = Callable[[str, dict[str, Any]], None]  # (event, data): e.g. ("data", data report)


def run_training(
    config: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    notify: Notify | None = None,
) -> dict[str, Any]:
    """Run `config` end to end; returns the summary written to results.json (rank 0).

    The run folder is locked for the run, and one holding another run is refused unless `resume`
    or `overwrite` (see `dclr.training.runfolder`). `notify(event, data)` hears what the run
    learns before training ("data": the data report), for a caller that shows it.
    """
    method, runs = resolve(config)  # looked up once, here, and handed down
    if len(runs) > 1:
        return run_stages(config, method, runs, resume, overwrite)
    return run_one(config, method, resume, overwrite, notify)


def run_one(
    config: TrainConfig,
    method: MethodPlugin,
    resume: bool = False,
    overwrite: bool = False,
    notify: Notify | None = None,
) -> dict[str, Any]:
    """`run_training` of one run with its method (a config of one stage)."""
    run_dir = Path(config.run.output_dir)
    with runfolder.claim(run_dir, resume, overwrite, main=runfolder.rank_from_env() == 0):
        if resume:  # before the model and data load: a run folder never mixes two methods
            runfolder.check_resume(run_dir, config.to_dict())
        times, start = PhaseTimes(), time.perf_counter()
        with times.active():
            summary, main = _run_phases(config, method, resume, notify)
        if main:  # the phase times of this process (a resumed run: since the resume)
            total = time.perf_counter() - start
            summary["phase_seconds"] = breakdown(times, total)
            write_json(run_dir / "results.json", summary)
        return summary


def _run_phases(
    config: TrainConfig, method: MethodPlugin, resume: bool, notify: Notify | None = None
) -> tuple[dict[str, Any], bool]:
    """Prepare the run, score the starting model, train, score the trained model, write the
    cards; returns the summary and whether this process is the main one."""
    with phase("setup"):
        run = prepared(config, method)
        trainer = Trainer(run)
    if notify is not None and run.data_report is not None:
        notify("data", run.data_report)
    main = run.rank == 0
    before, before_search = None, None
    if main:
        write_json(run.run_dir / "env.json", environment())
        before = starting_scores(run.run_dir, resume, lambda: method.evaluate_start(config, run))
        if config.run.test_retrieval:
            with phase("before_eval"):
                before_search = starting_retrieval(
                    config.model.name,
                    method.inference_pooler(config),
                    config.run.test_retrieval,
                    config.data.data_dir,
                )
    with phase("train"):
        result = trainer.train(resume=resume)
    summary = _train_summary(run, result)
    if main:
        with phase("after_eval"):
            final = _final_scores(run, result, before_search)
        if before is not None or "after" in final:
            summary["before"] = before
        summary.update(final)
        write_run_cards(
            config,
            flat_values(config),
            result.steps,
            result.best_dir,
            result.final_dir,
            before,
            final.get("after"),
            method=method,
            derived=result.derived,
        )
        if not config.run.keep_checkpoints_at_end and result.steps >= run.total_steps:
            drop_checkpoints(run.run_dir)
    return summary, main


def _train_summary(run: PreparedRun, result: TrainResult) -> dict[str, Any]:
    """What results.json says of the training itself."""
    summary: dict[str, Any] = {
        "method": run.config.method,
        **run.method.describe(run),
        "steps": result.steps,
        "best_step": result.best_step,
        "best_dev_metric": result.best_metric,
        "best_dir": str(result.best_dir),
        "final_dir": str(result.final_dir),
        "train_seconds": result.train_seconds,
        "cpu_seconds": result.cpu_seconds,
    }
    if result.derived:  # e.g. the calibrated phi, used in place of the config's
        summary["derived"] = result.derived
    if result.start_records:
        summary["start_records"] = result.start_records
    if result.checkpoint_times.get("written"):
        summary["checkpoint_times"] = result.checkpoint_times
    if run.data_report is not None:
        summary["data"] = run.data_report
    return summary


def _final_scores(
    run: PreparedRun, result: TrainResult, before_search: dict[str, float] | None
) -> dict[str, Any]:
    """The trained model's test scores (the method's, and `run.test_retrieval`'s)."""
    config, method = run.config, run.method
    final = method.evaluate_final(config, result)
    if config.run.test_retrieval:
        final["retrieval"] = {
            "task": config.run.test_retrieval,
            "split": "test",
            "before": before_search,
            "after": retrieval_test_scores(
                str(result.best_dir),
                method.inference_pooler(config),
                config.run.test_retrieval,
                config.data.data_dir,
                f"encode {config.run.test_retrieval} (after: best model)",
            ),
        }
    return final


def drop_checkpoints(run_dir: Path) -> None:
    """Delete a finished run's checkpoints/ (renamed first, so it is never half there)."""
    folder = run_dir / "checkpoints"
    if folder.is_dir():
        doomed = folder.with_name("checkpoints.deleting")
        folder.rename(doomed)
        shutil.rmtree(doomed)
