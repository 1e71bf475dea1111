"""`dclr train`: evaluate the starting model, train, evaluate the best model, write results.json."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from dclr import __version__
from dclr import distributed as dist
from dclr.data.sts import STS_TASKS
from dclr.evaluation.sts import StsEvaluator
from dclr.models.encoder import SentenceEncoder
from dclr.training import runfolder
from dclr.training.config import TrainConfig
from dclr.training.trainer import Trainer


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


def evaluate_model(path: str, pooler: str, data_dir: str | None) -> dict[str, float]:
    encoder = SentenceEncoder.from_pretrained(
        path, pooler=pooler, packing=not torch.cuda.is_available()
    )
    return StsEvaluator(data_dir, mode="test")(lambda s: encoder.encode(s, show_progress=True))


def model_fingerprint(model: str, pooler: str, data_dir: str | None) -> str:
    """A key for the STS scores of (model, pooler, data): the spec, the resolved data folder, and
    the name, size and mtime of every file of a local model folder (so a retrained folder under
    the same path gets a new key). Hub ids are keyed by their name only."""
    import hashlib

    from dclr.data.paths import resolve_data_dir
    from dclr.models.encoder import resolve_model

    parts = [__version__, model, pooler, str(resolve_data_dir(data_dir).resolve())]
    folder = Path(resolve_model(model))
    if folder.is_dir():
        for file in sorted(f for f in folder.rglob("*") if f.is_file()):
            stat = file.stat()
            parts.append(f"{file.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def starting_scores(
    model: str, pooler: str, data_dir: str | None, cache_root: Path | None = None
) -> dict[str, float]:
    """STS test scores of the starting model, cached under `~/.cache/dclr/starting-scores/`:
    every run of an experiment starts from the same few models, so each is evaluated once."""
    from dclr.data.paths import default_cache_dir

    root = cache_root or default_cache_dir().parent / "starting-scores"
    cache = root / f"{model_fingerprint(model, pooler, data_dir)}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    scores = evaluate_model(model, pooler, data_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(scores, indent=2) + "\n")
    tmp.replace(cache)
    return scores


TWO_STAGE = ("sup_then_unsup", "joint_then_unsup")


def run_stages(
    config: TrainConfig, resume: bool = False, overwrite: bool = False
) -> dict[str, Any]:
    """ConSERT's two-stage schedules: each stage is a run in `<output_dir>/stage-k` (see
    `stage_configs`); a finished stage is skipped, an interrupted one resumed. The before/after
    table compares the starting model with the best model of the last stage."""
    root = Path(config.output_dir)
    with runfolder.claim(root, resume, overwrite):
        return _run_stages(config, root, resume)


def _run_stages(config: TrainConfig, root: Path, resume: bool) -> dict[str, Any]:
    import dataclasses

    from dclr.cli import scores_table
    from dclr.training.checkpoint import latest_checkpoint
    from dclr.training.trainer import stage_configs

    config.save(root / "config.yaml")
    pooler = "cls_before_pooler" if config.mlp_head else config.pooler
    before_file = root / "before.json"
    before = json.loads(before_file.read_text()) if before_file.exists() else None
    if config.test_eval and before is None:
        before = starting_scores(config.model, pooler, config.data_dir)
        before_file.write_text(json.dumps(before, indent=2) + "\n")
    stages = []
    for stage in stage_configs(config):
        stage_dir = Path(stage.output_dir)
        if not (stage_dir / "results.json").exists():
            again = resume and latest_checkpoint(stage_dir / "checkpoints") is not None
            run_training(dataclasses.replace(stage, test_eval=False), resume=again)
        stages.append(json.loads((stage_dir / "results.json").read_text()))
    summary: dict[str, Any] = {
        "schedule": config.schedule,
        "stages": stages,
        "best_dir": stages[-1]["best_dir"],
    }
    if config.test_eval:
        after = evaluate_model(stages[-1]["best_dir"], pooler, config.data_dir)
        summary.update(before=before, after=after)
        (root / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
        summary["table"] = scores_table(
            f"STS test, Spearman x100 — {config.schedule}",
            {"before": before or {}, "after": after},
            list(STS_TASKS),
        )
    else:
        (root / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def run_training(
    config: TrainConfig, resume: bool = False, overwrite: bool = False
) -> dict[str, Any]:
    """Run `config` end to end; returns a summary (and a rich table on rank 0).

    The run folder is locked for the run, and one holding another run is refused unless `resume`
    or `overwrite` (see `dclr.training.runfolder`).
    """
    if config.schedule in TWO_STAGE:
        return run_stages(config, resume, overwrite)
    run_dir = Path(config.output_dir)
    with runfolder.claim(run_dir, resume, overwrite, main=runfolder.rank_from_env() == 0):
        return _run_training(config, run_dir, resume)


def _run_training(config: TrainConfig, run_dir: Path, resume: bool) -> dict[str, Any]:
    from dclr.cli import scores_table

    trainer = Trainer(config)
    main = trainer.rank == 0
    before_file = run_dir / "before.json"
    before: dict[str, float] | None = None
    # The inference representation of the starting model: SimCSE's train-only head is not used.
    pooler = trainer.encoder.inference_pooler
    if main:
        (run_dir / "env.json").write_text(json.dumps(environment(), indent=2) + "\n")
        if config.test_eval and not (resume and before_file.exists()):
            before = starting_scores(config.model, pooler, config.data_dir)
            before_file.write_text(json.dumps(before, indent=2) + "\n")
        elif before_file.exists():
            before = json.loads(before_file.read_text())
    result = trainer.train(resume=resume)
    summary: dict[str, Any] = {
        "steps": result.steps,
        "best_step": result.best_step,
        "best_dev_metric": result.best_metric,
        "best_dir": str(result.best_dir),
        "final_dir": str(result.final_dir),
    }
    if main and config.test_eval:
        after = evaluate_model(str(result.best_dir), pooler, config.data_dir)
        summary.update(before=before, after=after)
        columns = {"before": before or {}, "after": after}
        summary_table = scores_table(
            f"STS test, Spearman x100 — {config.method} "
            f"({result.steps} steps, best at {result.best_step})",
            columns,
            list(STS_TASKS),
        )
        (run_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
        summary["table"] = summary_table
    elif main:
        (run_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
