"""`dclr train`: evaluate the starting model, train, evaluate the trained model, write results.json.

The layer above the training loop: it resolves the config's method once
(`dclr.methods.registry.get_method`) and hands it down (`Trainer(config, method)`, the method's
hooks). The core returns data (the summary written to results.json); the command line renders
it. A method whose schedule has several stages (`Method.stages`) runs each as its own run folder
under the output folder.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dclr import distributed as dist
from dclr._meta import __version__
from dclr.contract import MethodPlugin, TrainResult
from dclr.evaluation.retrieval_runs import retrieval_test_scores, starting_retrieval
from dclr.methods.registry import get_method
from dclr.models.card import write_run_cards
from dclr.options.config import TrainConfig
from dclr.options.flat import flat_values
from dclr.training import runfolder
from dclr.training.checkpoint import latest_checkpoint
from dclr.training.loop import Trainer
from dclr.training.phases import PhaseTimes, breakdown, phase, timed


def trainer_for(config: TrainConfig, **injected: Any) -> Trainer:
    """A `Trainer` for `config` with its method looked up by name (`model`, `data` and
    `evaluator` may be injected, as `Trainer` takes them)."""
    return Trainer(config, get_method(config.method), **injected)


def run_schedule(config: TrainConfig) -> list[TrainResult]:
    """Train every stage of the method's schedule (`Method.stages`), in order, without the
    before/after evaluation of `run_training`."""
    return [trainer_for(stage).train() for stage in get_method(config.method).stages(config)]


def environment() -> dict[str, Any]:
    """Versions, device and the git commit of the tool, saved with every run."""
    import sentence_transformers
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
        "sentence_transformers": sentence_transformers.__version__,
        "device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or "cpu",
        "world_size": dist.world_size(),
        "torch_threads": torch.get_num_threads(),
    }


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def run_stages(
    config: TrainConfig, resume: bool = False, overwrite: bool = False
) -> dict[str, Any]:
    """A schedule of several runs (`Method.stages`): each stage is a run in its own folder; a
    finished stage is skipped, an interrupted one resumed. The before/after scores compare the
    starting model with the best model of the last stage. The root folder is locked for the
    schedule (`dclr.training.runfolder`)."""
    root = Path(config.run.output_dir)
    with runfolder.claim(root, resume, overwrite):
        return _run_stages(config, root, resume)


def _run_stages(config: TrainConfig, root: Path, resume: bool) -> dict[str, Any]:
    method = get_method(config.method)  # the schedule's method; each stage resolves its own
    config.save(root / "config.yaml")
    before_file = root / "before.json"
    before = json.loads(before_file.read_text()) if before_file.exists() else None
    if before is None:
        before = method.evaluate_start(config)
        if before is not None:
            write_json(before_file, before)
    stages, last = [], None
    for stage in method.stages(config):
        stage_dir = Path(stage.run.output_dir)
        if not (stage_dir / "results.json").exists():
            again = resume and latest_checkpoint(stage_dir / "checkpoints") is not None
            run_training(stage.updated({"run.test_eval": False}), resume=again)
        stages.append(json.loads((stage_dir / "results.json").read_text()))
        last = stage
    assert last is not None
    summary: dict[str, Any] = {
        "method": config.method,
        "stages": stages,
        "best_dir": stages[-1]["best_dir"],
    }
    if config.run.test_eval:
        final = get_method(last.method)
        result = _result_of(stages[-1])
        summary.update(
            before=before, **final.evaluate_final(last.updated({"run.test_eval": True}), result)
        )
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
    method = get_method(config.method)  # resolved once, here, and handed down
    if len(method.stages(config)) > 1:
        return run_stages(config, resume, overwrite)
    run_dir = Path(config.run.output_dir)
    with runfolder.claim(run_dir, resume, overwrite, main=runfolder.rank_from_env() == 0):
        if resume:  # before the model and data load: a run folder never mixes two methods
            runfolder.check_resume(run_dir, config.to_dict())
        return _run_training(config, method, run_dir, resume, notify)


def _run_training(
    config: TrainConfig,
    method: MethodPlugin,
    run_dir: Path,
    resume: bool,
    notify: Notify | None = None,
) -> dict[str, Any]:
    times, start = PhaseTimes(), time.perf_counter()
    with times.active():
        summary, main = _run_phases(config, method, run_dir, resume, notify)
    if main:  # the phase times of this process (a resumed run: since the resume)
        total = time.perf_counter() - start
        summary["phase_seconds"] = breakdown(times, summary["train_seconds"], total)
        write_json(run_dir / "results.json", summary)
    return summary


def _run_phases(
    config: TrainConfig,
    method: MethodPlugin,
    run_dir: Path,
    resume: bool,
    notify: Notify | None = None,
) -> tuple[dict[str, Any], bool]:
    with phase("setup"):
        trainer = Trainer(config, method)
    if notify is not None and trainer.data_report is not None and trainer.rank == 0:
        notify("data", trainer.data_report)
    if trainer.evaluator is not None:
        trainer.evaluator = timed(trainer.evaluator, "dev_eval")
    main = trainer.rank == 0
    before_file = run_dir / "before.json"
    before: dict[str, float] | None = None
    before_search: dict[str, float] | None = None
    if main:
        write_json(run_dir / "env.json", environment())
        if not (resume and before_file.exists()):
            with phase("before_eval"):
                before = method.evaluate_start(config)
            if before is not None:
                write_json(before_file, before)
        elif before_file.exists():
            before = json.loads(before_file.read_text())
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
    summary: dict[str, Any] = {
        "method": config.method,
        **method.describe(config),
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
    if trainer.data_report is not None:
        summary["data"] = trainer.data_report
    if main:
        with phase("after_eval"):
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
        if not config.run.keep_checkpoints_at_end and result.steps >= trainer.total_steps:
            drop_checkpoints(run_dir)
    return summary, main


def drop_checkpoints(run_dir: Path) -> None:
    """Delete a finished run's checkpoints/ (renamed first, so it is never half there)."""
    folder = run_dir / "checkpoints"
    if folder.is_dir():
        doomed = folder.with_name("checkpoints.deleting")
        folder.rename(doomed)
        shutil.rmtree(doomed)
