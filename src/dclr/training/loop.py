"""The one training loop: config + method plugin -> model, data, objective -> steps.

The loop owns batching, resume, the NaN stop, precision, clipping, logging, checkpoints and the
evaluation hook; everything about *what* is trained comes from the method it is handed
(`Trainer(config, method)`, a `dclr.contract.MethodPlugin`, resolved once by the driver): its
model, examples, collate function and objective, called as `objective(batch) -> dict[str, Tensor]`.
The loop never looks a method up by name.

Batches are a pure function of (seed, step) (`dclr.data.sampler`: epoch e uses the permutation of a
generator seeded with seed + e, or paraphrase-dense batches), so a resumed run sees exactly the
examples the uninterrupted run would have. Under torchrun each rank takes its slice of the global
batch.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from dclr import distributed as dist
from dclr.contract import (
    Batch,
    Evaluator,
    HasDerivedSettings,
    HasStartRecords,
    HasTrainingModules,
    MethodPlugin,
    TrainResult,
    UsesBatchPlan,
)
from dclr.data.sampler import training_batches
from dclr.data.sampling import few_shot_indices, repeat_to, take
from dclr.errors import ConfigError, TrainingDiverged
from dclr.estimate import estimate, linear_weights, record, work_flops
from dclr.options.config import TrainConfig
from dclr.options.flat import flat_values
from dclr.progress import announce, progress_bar, short_number
from dclr.training.checkpoint import resume_checkpoint, save_checkpoint
from dclr.training.gradcache import GradCache
from dclr.training.phases import phase
from dclr.training.runfolder import GracefulStop, TrainingStopped, run_id
from dclr.training.tracking import MetricsLog


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """No weight decay on biases and normalisation weights (every 1-D parameter)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def to_device(features: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """Tensors (in nested dicts too) moved to `device`."""
    return {
        k: to_device(v, device) if isinstance(v, Mapping) else v.to(device)
        for k, v in features.items()
    }


def prepared(data: Sequence[Any], config: TrainConfig) -> tuple[Sequence[Any], int]:
    """The examples a run trains on: `data.dedup` (first copy of each normalised line), then the
    few-shot subset; and the number of duplicates dropped."""
    dropped = 0
    if config.data.dedup:
        from dclr.data.corpus import ListCorpus
        from dclr.data.report import dedup_lines

        kept = dedup_lines(data)
        dropped = len(data) - len(kept)
        data = ListCorpus(kept, name=f"{getattr(data, 'name', 'corpus')}+dedup")
    return few_shot(data, config), dropped


def few_shot(data: Sequence[Any], config: TrainConfig) -> Sequence[Any]:
    """The few-shot subset of `data` the config asks for (the data itself if none)."""
    d = config.data
    subset = few_shot_indices(
        len(data), d.few_shot_sentences, d.few_shot_fraction, d.few_shot_sampling, config.run.seed
    )
    return data if subset is None else take(data, subset)  # config.yaml reproduces it


def fit_small_data(
    data: Sequence[Any], batch_size: int, config: TrainConfig, world: int = 1
) -> tuple[Sequence[Any], int]:
    """(data, global batch size) for data smaller than one batch, per `data.small_data`.

    `refuse`: a ConfigError. `shrink_batch`: every step trains on all n examples (batch n; with
    n = 1 a contrastive loss has no negative and is 0). `repeat`: the examples repeated whole until
    they fill a batch (copies of a sentence then meet as negatives). A notice says which.
    """
    n = len(data)
    if n >= batch_size:
        return data, batch_size
    mode = config.data.small_data
    if mode == "refuse":
        raise ConfigError(
            f"the training data has {n} examples, fewer than one batch of {batch_size}; "
            "set data.small_data: shrink_batch (train on all of them each step) or repeat"
        )
    if mode == "shrink_batch":
        if n % world:
            raise ConfigError(f"a shrunk batch of {n} is not divisible by {world} ranks")
        warnings.warn(
            f"data.small_data: shrink_batch: {n} examples < batch_size {batch_size}; "
            f"training on batches of {n}",
            stacklevel=2,
        )
        return data, n
    warnings.warn(
        f"data.small_data: repeat: {n} examples < batch_size {batch_size}; repeating them "
        f"{-(-batch_size // n)} times",
        stacklevel=2,
    )
    return repeat_to(data, batch_size), batch_size


def _texts_of(row: Any) -> list[str]:
    """The texts one training example forwards: a sentence twice (two views), the fields of a
    tuple or dataclass row (an NLI triple's three texts); [] for anything else."""
    if isinstance(row, str):
        return [row, row]
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        values = [getattr(row, f.name) for f in dataclasses.fields(row)]
    elif isinstance(row, (tuple, list)):
        values = list(row)
    else:
        return []
    texts = [v for v in values if isinstance(v, str) and v]
    return texts


@dataclass
class _RunState:
    """What `Trainer.train` carries from step to step (and what a checkpoint restores)."""

    objective: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    extra: dict[str, torch.nn.Module]
    scaler: torch.amp.GradScaler | None
    start: int = 0
    best: float | None = None
    best_step: int | None = None
    last_ckpt: str | None = None
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0
    derived: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_records: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def derived_lines(
    derived: dict[str, Any], configured: dict[str, Any], records: dict[str, dict[str, Any]]
) -> list[str]:
    """What a run says before its first step about the options it computed (`derived`, with the
    config's value it replaces from `configured`) and what it measured for them (`records`)."""
    lines = []
    for name, value in derived.items():
        given = f"; the config's {configured[name]} is not used" if name in configured else ""
        lines.append(f"{name} = {_short(value)} (derived by this run{given})")
    for kind, values in records.items():
        lines.append(f"{kind}: " + ", ".join(f"{k} {_short(v)}" for k, v in values.items()))
    return lines


def _short(value: Any) -> str:
    """A float to 4 significant digits (`short_number`), anything else as it prints."""
    return short_number(value) if isinstance(value, float) else str(value)


@dataclass
class _Meter:
    """Examples seen since the last training record, and when that was."""

    tic: float
    seen: int = 0


class Trainer:
    """Runs `config` with `method` (the plugin of `config.method`, resolved by the caller:
    `dclr.driver.trainer_for(config)`); `model`, `data` and `evaluator` may be injected (tests,
    experiments)."""

    def __init__(
        self,
        config: TrainConfig,
        method: MethodPlugin,
        model: torch.nn.Module | None = None,
        data: Sequence[Any] | None = None,
        evaluator: Evaluator | None = None,
    ) -> None:
        if method.name != config.method:
            raise ConfigError(
                f"Trainer got method {method.name!r} for a config of method {config.method!r}"
            )
        self.config = config.validate()
        method.check(self.config)
        self.method = method
        if len(self.method.stages(config)) > 1:
            raise ConfigError(
                f"method {config.method!r} runs several stages here: run it with "
                "dclr.driver.run_schedule (or `dclr train`)"
            )
        dist.init_from_env()
        self.rank, self.world = dist.rank(), dist.world_size()
        batch_size = config.optimisation.batch_size
        if batch_size % self.world:
            raise ConfigError(f"batch_size {batch_size} is not divisible by {self.world} ranks")
        if self.world > 1 and not self.method.distributed:
            raise ConfigError(f"method {config.method!r} runs in one process (no DDP support yet)")
        self.device = torch.device(
            f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        )
        self.model = (model or self.method.build_model(config)).to(self.device)
        packing = config.model.packing
        if packing == "on" or (packing == "auto" and self.device.type == "cpu"):
            enable = getattr(self.model, "enable_packing", None)
            if enable is not None:
                enable()
        loaded = data if data is not None else self.method.load_data(config)
        self.data, dropped = prepared(loaded, config)
        reports = method.sentence_batches and self.rank == 0  # one rank tokenizes the sample
        self.data_report = self._data_report(loaded, dropped) if reports else None
        self.data, batch_size = fit_small_data(self.data, batch_size, config, self.world)
        self.batch_size = batch_size  # the global batch actually used (config's unless shrunk)
        d = config.data  # random batches, or paraphrase-dense ones (the data gains pair sentences)
        self.data, self.sampler = training_batches(
            self.data, batch_size, config.run.seed, d.paraphrase_density,
            d.paraphrase_sources, d.data_dir, d.no_duplicates,
        )  # fmt: skip
        self.evaluator = evaluator
        if evaluator is None and self.rank == 0:
            self.evaluator = self.method.dev_evaluator(config)
        self.run_dir = Path(config.run.output_dir)
        self.steps_per_epoch = self.sampler.steps_per_epoch
        epochs = config.optimisation.epochs
        self.total_steps = config.optimisation.max_steps or math.ceil(epochs * self.steps_per_epoch)

    # ---- data ---------------------------------------------------------------------------------
    def _data_report(self, loaded: Sequence[Any], dropped: int) -> dict[str, Any]:
        """`dclr.data.report.data_report` of the sentences this run trains on."""
        from dclr.data.report import data_report

        tokenizer = getattr(self.model, "tokenizer", None)
        counts = None
        if tokenizer is not None:

            def counts(texts: list[str]) -> list[int]:
                ids = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
                return [len(x) for x in ids]

        skipped = int(getattr(loaded, "n_skipped", 0))
        return data_report(self.data, skipped, counts, self.config.model.max_length, dropped)

    def global_batch(self, step: int) -> torch.Tensor:
        """Data indices of the global batch of 0-based `step`, (batch_size,)."""
        return self.sampler.global_batch(step)

    def planned_rows(self) -> list[int]:
        """Every data index some step of the run samples, each once, in order of first use."""
        seen: dict[int, None] = {}
        for step in range(self.total_steps):
            seen.update(dict.fromkeys(int(i) for i in self.global_batch(step)))
        return list(seen)

    def batch(self, step: int) -> tuple[Batch, int]:
        """The `Batch` of 0-based `step` on this rank, and its number of local examples."""
        ids = self.global_batch(step)
        local = self.batch_size // self.world
        mine = [self.data[int(i)] for i in ids[self.rank * local : (self.rank + 1) * local]]
        features, labels = self.method.collate(self.model, mine, self.config)
        batch = Batch(
            features=to_device(features, self.device),
            step=step,
            indices=ids,
            sentences=[self.data[int(i)] for i in ids],
            labels=None if labels is None else labels.to(self.device),
        )
        return batch, len(mine)

    # ---- loop ---------------------------------------------------------------------------------
    def train(self, resume: bool = False, stop_at_step: int | None = None) -> TrainResult:
        """Train to `total_steps` (or stop after `stop_at_step`, leaving a checkpoint): set up,
        resume, then step / log / evaluate / checkpoint until the end, then export."""
        main = self.rank == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = self._setup()
        self._resume(state, resume)
        if main:
            self.config.save(self.run_dir / "config.yaml")
        log = MetricsLog(self.run_dir, resume_step=state.start, tensorboard=main) if main else None
        if log is not None and state.start == 0:
            for kind, values in state.start_records.items():  # measured before step 1
                log.log(0, kind, values)
        if main:
            for line in derived_lines(state.derived, flat_values(self.config), state.start_records):
                announce(line)
        end = min(self.total_steps, stop_at_step or self.total_steps)
        work = self._announce_steps(end - state.start) if main else 0.0
        seconds_before = state.train_seconds
        bar = progress_bar(
            total=self.total_steps, initial=state.start, desc="train", unit="step", enabled=main
        )
        self.model.train()
        meter = _Meter(time.perf_counter())
        stop = GracefulStop(enabled=self.world == 1).install()  # SIGTERM: checkpoint, then stop
        try:
            for step in range(state.start, end):
                parts, local = self._step(state, step)
                done = step + 1
                meter.seen += local * self.world
                bar.update(1)
                bar.set_postfix(loss=short_number(parts["loss"].item()))
                is_last = done == self.total_steps
                self._maybe_log(state, log, meter, parts, done, is_last)
                self._maybe_evaluate(state, log, done, is_last)
                every = self.config.run.checkpoint_every
                if done % every == 0 or done == end or is_last or stop.requested:
                    self._checkpoint(state, done)
                    if stop.requested and not is_last:
                        raise TrainingStopped(done, str(state.last_ckpt), str(self.run_dir))
        finally:
            stop.restore()
            bar.close()
            if log is not None:
                log.close()
        if work:
            seconds = state.train_seconds - seconds_before
            record(f"train:{self.config.method}", work, seconds, self.device)
        return self._finish(state, end)

    # ---- the named steps of `train` ---------------------------------------------------------
    def _setup(self) -> _RunState:
        """The objective (the method builds it: its caches, its calibration), the optimizer over
        the model and the objective's own trained modules, and the schedule."""
        opt = self.config.optimisation
        model: Any = self.model
        if self.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        objective = self.method.build_objective(self.config, model, self.data, self.device)
        if isinstance(objective, UsesBatchPlan):  # e.g. encode the rows the steps will sample
            with phase("complementary_cache"):
                objective.prefill_batch_plan(self.planned_rows)
        # Modules trained with the model, checkpointed, never exported (e.g. a classifier head).
        extra = objective.training_modules() if isinstance(objective, HasTrainingModules) else {}
        groups = param_groups(self.model, opt.weight_decay)
        for module in extra.values():
            groups += param_groups(module, opt.weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=opt.learning_rate)
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(opt.warmup_ratio * self.total_steps), self.total_steps
        )
        scaler = torch.amp.GradScaler("cuda") if self._autocast_dtype() == torch.float16 else None
        state = _RunState(objective, optimizer, scheduler, extra, scaler)
        if self.batch_size != opt.batch_size:  # data.small_data: shrink_batch
            state.derived["batch_size"] = self.batch_size
        if isinstance(objective, HasDerivedSettings):
            state.derived.update(objective.derived_settings)
        if isinstance(objective, HasStartRecords):
            state.start_records = dict(objective.start_records)
        return state

    def _resume(self, state: _RunState, resume: bool) -> None:
        """From the newest intact checkpoint of this run (damaged ones are named, skipped), or
        a fresh dropout stream, distinct from the head's initialisation."""
        if not resume:
            torch.manual_seed(self.config.run.seed + 1)
            return
        last, saved = resume_checkpoint(
            self.run_dir / "checkpoints",
            self.model,
            state.optimizer,
            state.scheduler,
            state.extra,
            run_id(self.run_dir),
            self.config.to_dict(),
        )
        state.start, state.best = saved["step"], saved.get("best_metric")
        state.best_step = saved.get("best_step")
        state.train_seconds = saved.get("train_seconds", 0.0)
        state.cpu_seconds = saved.get("cpu_seconds", 0.0)
        state.last_ckpt = str(last)

    def _step(self, state: _RunState, step: int) -> tuple[dict[str, torch.Tensor], int]:
        """One optimizer step on batch `step`: (the objective's parts, this rank's examples)."""
        opt, scaler, optimizer = self.config.optimisation, state.scaler, state.optimizer
        step_start, step_cpu = time.perf_counter(), time.process_time()
        batch, local = self.batch(step)
        # DDP averages gradients while every rank's loss is already global: scale by W.
        backward_scale = float(self.world) * (scaler.get_scale() if scaler else 1.0)
        with self._autocast():
            if opt.grad_cache_chunk:
                parts = GradCache(state.objective, opt.grad_cache_chunk, backward_scale)(batch)
            else:
                parts = state.objective(batch)
        loss = parts["loss"]
        if not torch.isfinite(loss):
            raise TrainingDiverged(step + 1, state.last_ckpt)
        if not opt.grad_cache_chunk:  # GradCache ran backward itself
            (loss * backward_scale).backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if opt.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), opt.max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        state.scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state.train_seconds += time.perf_counter() - step_start
        state.cpu_seconds += time.process_time() - step_cpu  # all threads: robust to sharing
        return parts, local

    def _maybe_log(
        self,
        state: _RunState,
        log: MetricsLog | None,
        meter: _Meter,
        parts: dict[str, torch.Tensor],
        done: int,
        is_last: bool,
    ) -> None:
        """The training record every `run.log_steps` (and at the last step)."""
        if log is None or not (done % self.config.run.log_steps == 0 or is_last):
            return
        elapsed = time.perf_counter() - meter.tic
        log.log(
            done,
            "train",
            {
                **{k: v.item() for k, v in parts.items()},
                "lr": state.scheduler.get_last_lr()[0],
                "epoch": done / self.steps_per_epoch,
                "examples_per_s": meter.seen / elapsed if elapsed else 0.0,
                "train_seconds": state.train_seconds,
                "cpu_seconds": state.cpu_seconds,
            },
        )
        meter.tic, meter.seen = time.perf_counter(), 0

    def _maybe_evaluate(
        self, state: _RunState, log: MetricsLog | None, done: int, is_last: bool
    ) -> None:
        """The dev evaluation every `run.eval_steps` (rank 0); a new best is exported."""
        eval_steps = self.config.run.eval_steps
        if not eval_steps or not (done % eval_steps == 0 or is_last):
            return
        if self.rank == 0 and self.evaluator is not None:
            assert log is not None
            results = self.evaluator(self.model)
            log.log(done, "eval", results)
            if state.best is None or results["metric"] > state.best:
                state.best, state.best_step = results["metric"], done
                meta = {"step": done, "metric": state.best}
                self.method.export(self.model, self.run_dir / "best", meta)
            self.model.train()
        self._barrier()

    def _checkpoint(self, state: _RunState, done: int) -> None:
        """Model, optimizer, schedule and progress, written atomically (rank 0)."""
        if self.rank == 0:
            saved = {
                "best_metric": state.best,
                "best_step": state.best_step,
                "train_seconds": state.train_seconds,
                "cpu_seconds": state.cpu_seconds,
                "config": self.config.to_dict(),
                "run_id": run_id(self.run_dir),
            }
            path = save_checkpoint(
                self.run_dir / "checkpoints",
                done,
                self.model,
                state.optimizer,
                state.scheduler,
                saved,
                keep=self.config.run.keep_checkpoints,
                extra=state.extra,
            )
            state.last_ckpt = str(path)
        self._barrier()

    def _finish(self, state: _RunState, end: int) -> TrainResult:
        """final/ (and best/ when never evaluated) once the last step is done."""
        final_dir, best_dir = self.run_dir / "final", self.run_dir / "best"
        result = TrainResult(
            end,
            final_dir,
            best_dir,
            state.best,
            state.best_step,
            state.train_seconds,
            state.cpu_seconds,
            dict(state.derived),
            dict(state.start_records),
        )
        if end < self.total_steps:  # stopped early on purpose: resume later
            return result
        if self.rank == 0:
            self.method.export(self.model, final_dir, {"step": self.total_steps})
            if state.best is None:  # never evaluated: the final model is the one to use
                self.method.export(self.model, best_dir, {"step": self.total_steps})
        self._barrier()
        return result

    def _announce_steps(self, steps: int) -> float:
        """Say how many steps of what are coming and how long they should take (estimated from
        a sample's token count, `dclr.estimate`); returns the FLOPs (0: no estimate)."""
        if steps <= 0:
            return 0.0
        cfg = self.config
        tokens = self._tokens_per_step()
        flops = work_flops("train", linear_weights(self.model), tokens * steps) if tokens else 0.0
        guess = estimate(f"train:{cfg.method}", flops, self.device) if flops else None
        announce(f"train: {steps:,} steps of batch {self.batch_size} ({cfg.method})"
                 + (f", {guess.text()}" if guess else ""))  # fmt: skip
        return flops

    def _tokens_per_step(self, sample: int = 256) -> int:
        """Tokens one step forwards: batch x texts per example x mean tokens of the first
        `sample` examples (two dropout views of a sentence; an NLI triplet's three texts)."""
        tokenizer = getattr(self.model, "tokenizer", None)
        rows = [self.data[i] for i in range(min(sample, len(self.data)))]
        texts = [_texts_of(r) for r in rows]
        if tokenizer is None or not texts or not all(texts):
            return 0  # rows of another kind: no estimate
        limit = self.config.model.max_length
        lengths = tokenizer([t for r in texts for t in r], truncation=True, max_length=limit)
        per_example = sum(len(x) for x in lengths["input_ids"]) / len(texts)
        return int(per_example * self.config.optimisation.batch_size)

    def _barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def _autocast_dtype(self) -> torch.dtype | None:
        if self.device.type != "cuda" or self.config.optimisation.precision == "fp32":
            return None
        return torch.float16 if self.config.optimisation.precision == "fp16" else torch.bfloat16

    def _autocast(self) -> Any:
        dtype = self._autocast_dtype()
        if dtype is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast("cuda", dtype=dtype)
