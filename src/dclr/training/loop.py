"""The one training loop: a prepared run -> objective -> steps.

The loop owns each rank's slice of the planned batches, resume, the NaN stop, precision,
clipping, logging, checkpoints and the evaluation hook; everything about *what* is trained comes
from the run it is handed (`Trainer(run)`, a `dclr.contract.PreparedRun`, prepared once by the
driver: `dclr.training.prepare`): its method (a `dclr.contract.MethodPlugin`), model, examples
and batch plan; the method collates the examples and builds the objective, called as
`objective(batch) -> dict[str, Tensor]`. The loop never looks a method up by name and never loads
or plans the data.

Batches are a pure function of (seed, step) (`dclr.data.sampler`: epoch e uses the permutation of a
generator seeded with seed + e, or paraphrase-dense batches), so a resumed run sees exactly the
examples the uninterrupted run would have. Under torchrun each rank takes its slice of the global
batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers import get_linear_schedule_with_warmup

from dclr import distributed as dist
from dclr.contract import (
    Batch,
    DrawsAhead,
    Evaluator,
    HasCompiledParts,
    HasDerivedSettings,
    HasStartRecords,
    HasTrainingModules,
    PreparedRun,
    TrainResult,
)
from dclr.data.text import clip_all
from dclr.errors import ConfigError
from dclr.estimate import estimate, linear_weights, record, work_flops
from dclr.heap import release_freed_memory, trim_heap
from dclr.models.encoder import SentenceEncoder
from dclr.models.export import link_export
from dclr.options.flat import flat_values
from dclr.progress import announce, progress_bar, short_number
from dclr.training.background import CheckpointWriter, room_for_copy
from dclr.training.checkpoint import (
    capture,
    checkpoint_path,
    host_copy,
    rank_rng_states,
    resume_checkpoint,
    saved_start,
    write_checkpoint,
)
from dclr.training.finite import FiniteGuard
from dclr.training.gradcache import GradCache
from dclr.training.lean import densify_grads, sparse_embedding_grads
from dclr.training.phases import phase
from dclr.training.phases import record as record_phase
from dclr.training.prefetch import Prefetcher
from dclr.training.runfolder import GracefulStop, TrainingStopped, run_id
from dclr.training.tracking import MetricsLog

# Seeds of the ranks' dropout streams (`Trainer._dropout_seed`) and of a stream drawn anew on a
# resume with another number of ranks, kept apart from run.seed's neighbours.
RANK_SEED_STRIDE = 1 << 20
RESEED_STRIDE = 1 << 40


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """No weight decay on biases and normalisation weights (every 1-D parameter)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def to_device(
    features: Mapping[str, Any], device: torch.device, non_blocking: bool = False
) -> dict[str, Any]:
    """Tensors (in nested dicts too) moved to `device` (`non_blocking`: from pinned memory)."""
    return {
        k: to_device(v, device, non_blocking)
        if isinstance(v, Mapping)
        else v.to(device, non_blocking=non_blocking)
        for k, v in features.items()
    }


def pinned(features: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors (in nested dicts too) in page-locked memory, so a GPU copy can be asynchronous."""
    return {k: pinned(v) if isinstance(v, Mapping) else v.pin_memory() for k, v in features.items()}


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
    finite: FiniteGuard
    clipped: list[torch.nn.Parameter]  # what max_grad_norm bounds (`clipped_parameters`)
    world_scalar: torch.Tensor | None = None  # fp16: the world size on the device, made once
    start: int = 0
    best: float | None = None
    best_step: int | None = None
    last_ckpt: str | None = None
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0
    derived: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_records: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def clipped_parameters(
    model: torch.nn.Module, extra: dict[str, torch.nn.Module], scope: str
) -> list[torch.nn.Parameter]:
    """The parameters whose gradients' norm `max_grad_norm` bounds: the model's (scope "model"),
    or every trained one ("all": the objective's own modules too, e.g. the NLI head)."""
    modules = [model, *extra.values()] if scope == "all" else [model]
    return [p for module in modules for p in module.parameters()]


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


def checkpoint_due(done: int, end: int, total: int, every: int) -> bool:
    """Whether the loop writes a checkpoint after step `done` of `total`, the run stopping at
    `end` (< total: a planned pause, `stop_at_step`): every `every` steps (`run.checkpoint_every`),
    at the pause and after the last step; with every = 0 only at a pause. A stop signal adds
    one either way. `benchmarks/paper_run_cost.py` counts a paper run's checkpoints with it."""
    if every == 0:
        return done == end < total
    return done % every == 0 or done in (end, total)


class Trainer:
    """Trains a `PreparedRun` (`dclr.training.prepare.prepare_run`; `dclr.driver.trainer_for(config)`
    looks the method up and prepares the run); `evaluator` may be injected in place of the
    method's dev evaluator (tests, experiments)."""

    def __init__(self, run: PreparedRun, evaluator: Evaluator | None = None) -> None:
        self.run = run
        self.config, self.method, self.model = run.config, run.method, run.model
        self.device, self.rank, self.world = run.device, run.rank, run.world
        self.run_dir = run.run_dir
        self.evaluator = evaluator
        self._warned_copy = False  # "no room for a checkpoint's host copy", said once
        self._stop_group: Any = None  # torchrun: the gloo group the ranks agree on a stop in
        self._draw_ahead: Callable[[Batch], Mapping[str, Any] | None] | None = None  # _setup's
        if evaluator is None and self.rank == 0:
            self.evaluator = self.method.dev_evaluator(run)

    def batch(self, step: int) -> tuple[Batch, int]:
        """The `Batch` of 0-based `step` on this rank, and its number of local examples."""
        return self._on_device(self.host_batch(step))

    def host_batch(self, step: int) -> tuple[Batch, int]:
        """`batch(step)` before its tensors move to the device (pinned when they will go to a
        GPU asynchronously): what the prefetch thread prepares one step ahead."""
        run = self.run
        ids = run.global_batch(step)
        local = run.batch_size // self.world
        rows = ids.tolist()  # one read of the plan's ids, not one per id
        mine = [run.data[i] for i in rows[self.rank * local : (self.rank + 1) * local]]
        features, labels = self.method.collate(run, mine)
        if self._async_copy:
            features = pinned(features)
            labels = None if labels is None else labels.pin_memory()
        batch = Batch(
            features=features,
            step=step,
            indices=ids,
            sentences=[run.data[i] for i in rows],
            labels=labels,
        )
        if self._draw_ahead is not None:  # the objective's random choices, from host tensors
            drawn = self._draw_ahead(batch)
            batch.drawn = pinned(drawn) if drawn is not None and self._async_copy else drawn
        return batch, len(mine)

    def _on_device(self, prepared: tuple[Batch, int]) -> tuple[Batch, int]:
        batch, local = prepared
        blocking = not self._async_copy
        moved = dataclasses.replace(
            batch,
            features=to_device(batch.features, self.device, non_blocking=not blocking),
            labels=None
            if batch.labels is None
            else batch.labels.to(self.device, non_blocking=not blocking),
            drawn=None
            if batch.drawn is None
            else to_device(batch.drawn, self.device, non_blocking=not blocking),
        )
        return moved, local

    @property
    def _async_copy(self) -> bool:
        """Pinned batches and asynchronous copies: on a GPU with prefetch on."""
        return self.device.type == "cuda" and self._prefetch_on

    @property
    def _prefetch_on(self) -> bool:
        choice = self.config.optimisation.prefetch
        return choice == "on" or (choice == "auto" and self.device.type == "cuda")

    # ---- loop ---------------------------------------------------------------------------------
    def train(self, resume: bool = False, stop_at_step: int | None = None) -> TrainResult:
        """Train to `total_steps` (or stop after `stop_at_step`, leaving a checkpoint): set up,
        resume, then step / log / evaluate / checkpoint until the end, then export."""
        main = self.rank == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:  # what the run derived before step 1 (DCLR's phi), from its checkpoint
            start = saved_start(self.run_dir / "checkpoints", run_id(self.run_dir))
            self.run = dataclasses.replace(self.run, saved_start=start)
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
        end = min(self.run.total_steps, stop_at_step or self.run.total_steps)
        work = self._announce_steps(end - state.start) if main else 0.0
        seconds_before = state.train_seconds
        bar = progress_bar(
            total=self.run.total_steps, initial=state.start, desc="train", unit="step", enabled=main
        )
        self.model.train()
        meter = _Meter(time.perf_counter())
        batches = Prefetcher(self.host_batch, enabled=self._prefetch_on)
        stop = GracefulStop(speak=main).install()  # SIGTERM: checkpoint, then stop
        writer = CheckpointWriter(background=self._background_checkpoints)
        try:
            for step in range(state.start, end):
                tic = time.perf_counter()  # the batch's wait (tokenising, or its prefetch) is
                prepared = batches.get(step, then=step + 1 if step + 1 < end else None)
                state.train_seconds += time.perf_counter() - tic  # the step's time too
                parts, local = self._step(state, step, prepared)
                done = step + 1
                meter.seen += local * self.world
                bar.update(1)
                if not state.finite.lazy:  # the CPU: reading the loss costs nothing
                    bar.set_postfix(loss=short_number(parts["loss"].item()))
                is_last = done == self.run.total_steps
                every = self.config.run.checkpoint_every
                due = checkpoint_due(done, end, self.run.total_steps, every)
                waits = due or self._log_due(done, is_last) or self._eval_due(done, is_last)
                stopping = self._stop_agreed(stop)  # every rank the same answer
                checkpoint = due or stopping
                if checkpoint or waits:
                    self._settle(state)  # the one wait on the device, and the NaN stop
                logged = self._maybe_log(state, log, meter, parts, done, is_last)
                if logged is not None and state.finite.lazy:
                    bar.set_postfix(loss=short_number(logged["loss"]))  # read for the log
                if self._eval_due(done, is_last):
                    batches.settle()  # the tokenizer is not safe in two threads at once
                self._maybe_evaluate(state, log, done, is_last)
                if checkpoint:  # on disk before the loop stops (the end, a pause, a signal)
                    self._checkpoint(state, done, writer, wait=stopping or done == end)
                    if stopping and not is_last:
                        raise TrainingStopped(done, str(state.last_ckpt), str(self.run_dir))
        finally:
            writer.close()  # a write in flight when an error stopped the loop completes
            batches.close()
            stop.restore()
            bar.close()
            if log is not None:
                log.close()
        seconds = state.train_seconds - seconds_before  # this process's steps
        record_phase("train_steps", seconds)
        if work:
            record(f"train:{self.config.method}", work, seconds, self.device)
        result = self._finish(state, end)
        result.checkpoint_times = writer.times.summary()
        stop.pass_on()  # a signal of the last step, the run now complete, to the caller's handler
        return result

    def _stop_agreed(self, stop: GracefulStop) -> bool:
        """Whether the run stops after this step for a signal. In one process, as soon as one
        came. Under torchrun the ranks agree (any rank's signal stops all, after the same step,
        with one checkpoint) at every step, through a gloo group of host-memory flags: on a GPU
        the step never waits on the device for it, and a stop lands within the step that heard
        it (torchrun waits 30 s before it kills)."""
        if self.world == 1:
            return stop.requested
        if self._stop_group is None:  # every rank reaches step 1's check: a collective
            self._stop_group = torch.distributed.new_group(backend="gloo")
        flag = torch.tensor([float(stop.requested)])  # host memory: the device is not waited on
        torch.distributed.all_reduce(
            flag, op=torch.distributed.ReduceOp.MAX, group=self._stop_group
        )
        return bool(flag.item())

    # ---- the named steps of `train` ---------------------------------------------------------
    def _setup(self) -> _RunState:
        """The objective (the method builds it: its caches, its calibration), the optimizer over
        the model and the objective's own trained modules, and the schedule."""
        opt = self.config.optimisation
        model: Any = self.model
        if opt.low_memory:
            if self.world > 1:
                raise ConfigError(
                    "optimisation.low_memory trains in one process (its sparse embedding "
                    "gradients are not reduced across ranks); drop it, or train with one process"
                )
            sparse_embedding_grads(self.model.backbone)
        if self.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        objective = self.method.build_objective(self.run, model)
        if isinstance(objective, DrawsAhead):  # drawn with each batch, ahead of its step
            self._draw_ahead = objective.draw_ahead
        release_freed_memory()  # what calibration and the objective's caches freed (dclr.heap)
        # Modules trained with the model, checkpointed, never exported (e.g. a classifier head).
        extra = objective.training_modules() if isinstance(objective, HasTrainingModules) else {}
        groups = param_groups(self.model, opt.weight_decay)
        for module in extra.values():
            groups += param_groups(module, opt.weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=opt.learning_rate, fused=self._fused_adamw())
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(opt.warmup_ratio * self.run.total_steps), self.run.total_steps
        )
        half = self._autocast_dtype() == torch.float16
        scaler = torch.amp.GradScaler(self.device.type) if half else None
        if half:  # fp16's first steps, while the scale backs off, skip the optimizer (inf
            # gradients) and the schedule moves on, as in PyTorch's AMP recipe (knowing whether it
            # skipped would read the GPU every step): torch's warning that the scheduler stepped
            # before the optimizer says nothing here
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
        finite = FiniteGuard(lazy=self.device.type == "cuda")
        clipped = clipped_parameters(self.model, extra, opt.clip_scope)
        state = _RunState(objective, optimizer, scheduler, extra, scaler, finite, clipped)
        if half:
            state.world_scalar = torch.full((), float(self.world), device=self.device)
        for encoder in self.model.modules():  # the model, or each of DualCSE's encoders
            if isinstance(encoder, SentenceEncoder):
                encoder.prepared_mask = self.config.model.prepared_mask
                if self.config.model.length_bucket:
                    encoder.length_bucket = self.config.model.length_bucket
        if opt.compile != "off":
            compile_backbone(self.model, opt.compile)
            if isinstance(objective, HasCompiledParts):
                objective.compile_parts(opt.compile)
        if self.run.batch_size != opt.batch_size:  # data.small_data: shrink_batch
            state.derived["batch_size"] = self.run.batch_size
        if isinstance(objective, HasDerivedSettings):
            state.derived.update(objective.derived_settings)
        if isinstance(objective, HasStartRecords):
            state.start_records = dict(objective.start_records)
        return state

    def _resume(self, state: _RunState, resume: bool) -> None:
        """From the newest intact checkpoint of this run (damaged ones are named, skipped), or
        a fresh dropout stream, distinct from the head's initialisation."""
        if not resume:
            torch.manual_seed(self._dropout_seed())
            return
        last, saved = resume_checkpoint(
            self.run_dir / "checkpoints",
            self.model,
            state.optimizer,
            state.scheduler,
            state.extra,
            run_id(self.run_dir),
            self.config.to_dict(),
            state.scaler,
        )
        state.start, state.best = saved["step"], saved.get("best_metric")
        state.best_step = saved.get("best_step")
        state.train_seconds = saved.get("train_seconds", 0.0)
        state.cpu_seconds = saved.get("cpu_seconds", 0.0)
        state.last_ckpt = str(last)
        if self.rank == 0:  # said once under torchrun
            left = (f"continuing at step {state.start + 1} of {self.run.total_steps}"
                    if state.start < self.run.total_steps else "no step left to train")  # fmt: skip
            announce(f"resume: from checkpoint {last.name} (step {state.start}), {left}")
        written_by = saved.get("world_size")  # absent: written before checkpoints said
        if (written_by or 1) != self.world:  # no saved stream for this layout of ranks
            torch.manual_seed(self._dropout_seed() + RESEED_STRIDE * state.start)
            cause = (
                f"the checkpoint was written by {written_by} process(es), this run has {self.world}"
                if written_by is not None
                else "the checkpoint predates per-rank dropout streams"
            )
            if self.rank == 0:
                announce(
                    f"resume: {cause}: dropout is drawn anew from step {state.start + 1}, so "
                    "the steps after it differ from an uninterrupted run's"
                )

    def _dropout_seed(self) -> int:
        """The seed of this rank's dropout stream: run.seed + 1 (distinct from the head's
        initialisation), and under torchrun one stream per rank (rank 0's as in one process),
        so equal-shaped local batches do not share their dropout masks across ranks."""
        return self.config.run.seed + 1 + RANK_SEED_STRIDE * self.rank

    def _step(
        self, state: _RunState, step: int, prepared: tuple[Batch, int] | None = None
    ) -> tuple[dict[str, torch.Tensor], int]:
        """One optimizer step on batch `step` (`prepared`: its host batch, made ahead):
        (the objective's parts, this rank's examples)."""
        opt, scaler, optimizer = self.config.optimisation, state.scaler, state.optimizer
        step_start, step_cpu = time.perf_counter(), time.process_time()
        batch, local = self._on_device(prepared or self.host_batch(step))
        # DDP averages gradients while every rank's loss is already global: scale by W; in fp16
        # by the loss scale too, through `scaler.scale` (it makes the scale its `unscale_` needs)
        # as a device scalar: no read of it on the host per step
        backward_scale: float | torch.Tensor = float(self.world)
        if scaler is not None and state.world_scalar is not None:
            backward_scale = scaler.scale(state.world_scalar)  # W x the scale, one multiply
        with self._autocast():
            if opt.grad_cache_chunk:
                parts = GradCache(state.objective, opt.grad_cache_chunk, backward_scale)(batch)
            else:
                parts = state.objective(batch)
        loss = parts["loss"]
        state.finite.observe(loss, step, state.last_ckpt)
        if not opt.grad_cache_chunk:  # GradCache ran backward itself
            (loss * backward_scale).backward()
        if opt.low_memory:  # dclr.training.lean: the passes' freed memory back, then one dense
            trim_heap(0.0)
            densify_grads(self.model.parameters())
        if self.world > 1 and state.extra:  # DDP averaged the model's; the objective's own too
            dist.average_gradients(list(state.extra.values()))
        if scaler is not None:
            scaler.unscale_(optimizer)
        if opt.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(state.clipped, opt.max_grad_norm)
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
    ) -> dict[str, float] | None:
        """The training record every `run.log_steps` (and at the last step): what it wrote."""
        if log is None or not self._log_due(done, is_last):
            return None
        elapsed = time.perf_counter() - meter.tic
        values = {
            **{k: v.item() for k, v in parts.items()},
            "lr": state.scheduler.get_last_lr()[0],
            "epoch": done / self.run.steps_per_epoch,
            "examples_per_s": meter.seen / elapsed if elapsed else 0.0,
            "train_seconds": state.train_seconds,
            "cpu_seconds": state.cpu_seconds,
        }
        log.log(done, "train", values)
        meter.tic, meter.seen = time.perf_counter(), 0
        return values

    def _log_due(self, done: int, is_last: bool) -> bool:
        return done % self.config.run.log_steps == 0 or is_last

    def _eval_due(self, done: int, is_last: bool) -> bool:
        eval_steps = self.config.run.eval_steps
        return bool(eval_steps) and (done % eval_steps == 0 or is_last)

    def _settle(self, state: _RunState) -> None:
        """Wait for the device's queued work (counted as training time: the steps' own work)
        and stop on a non-finite loss seen since the last settle. A no-op wait on the CPU."""
        if self.device.type == "cuda":
            tic = time.perf_counter()
            torch.cuda.synchronize(self.device)
            state.train_seconds += time.perf_counter() - tic
        state.finite.check(state.last_ckpt)

    def _maybe_evaluate(
        self, state: _RunState, log: MetricsLog | None, done: int, is_last: bool
    ) -> None:
        """The dev evaluation every `run.eval_steps` (rank 0); a new best is exported."""
        if not self._eval_due(done, is_last):
            return
        if self.rank == 0 and self.evaluator is not None:
            assert log is not None
            with phase("dev_eval"), eager_when_compiled(self.config.optimisation.compile):
                results = self.evaluator(self.model)
            log.log(done, "eval", results)
            if state.best is None or results["metric"] > state.best:
                state.best, state.best_step = results["metric"], done
                meta = {"step": done, "metric": state.best}
                self.method.export(self.model, self.run_dir / "best", meta)
            self.model.train()
        self._barrier()

    @property
    def _background_checkpoints(self) -> bool:
        """Checkpoints written on a thread (`run.async_checkpoints`; auto: on a GPU)."""
        choice = self.config.run.async_checkpoints
        return choice == "on" or (choice == "auto" and self.device.type == "cuda")

    def _checkpoint(
        self, state: _RunState, done: int, writer: CheckpointWriter, wait: bool
    ) -> None:
        """Model, optimizer, schedule and progress, written atomically (rank 0), by `writer`: in
        the loop, or in the background from a host copy (`wait`: on disk before returning). The
        loop's time, the copy and any wait for the write before, is the run's "checkpoints"
        phase. Without the host memory for the copy, the checkpoint is written in the loop."""
        rng_ranks = rank_rng_states()  # every rank's dropout stream (torchrun; a collective)
        if self.rank == 0:
            with phase("checkpoints"):
                writer.wait()  # the write before: one in flight, one copy of the state in memory
                tic = time.perf_counter()
                content = capture(self.model, state.optimizer, state.scheduler, state.extra,
                                  state.scaler, rng_ranks)  # fmt: skip
                copy = writer.background and self._room_for_copy(content.bytes)
                if copy:
                    content = host_copy(content)
                wait = wait or not copy  # no copy: the write reads the live tensors
                writer.times.capture_seconds.append(time.perf_counter() - tic)
                saved = {
                    "best_metric": state.best,
                    "best_step": state.best_step,
                    "train_seconds": state.train_seconds,
                    "cpu_seconds": state.cpu_seconds,
                    "derived": state.derived,  # what the run measured before step 1 (DCLR's
                    "start_records": state.start_records,  # phi): a resume reuses it
                    "config": self.config.to_dict(),
                    "run_id": run_id(self.run_dir),
                    "world_size": self.world,  # a resume with another number of ranks says so
                }
                root, keep = self.run_dir / "checkpoints", self.config.run.keep_checkpoints
                writer.submit(lambda: write_checkpoint(root, done, content, saved, keep))
                if wait:
                    writer.wait()
        self._barrier()
        # every rank names it (a NaN on rank 1 said "no checkpoint had been written yet")
        state.last_ckpt = str(checkpoint_path(self.run_dir / "checkpoints", done))

    def _room_for_copy(self, needed: int) -> bool:
        """Whether the host has the memory for a checkpoint's copy of `needed` bytes; warned
        about once when not."""
        if room_for_copy(needed):
            return True
        if not self._warned_copy:
            self._warned_copy = True
            warnings.warn(
                f"run.async_checkpoints: a host copy of the checkpoint needs {needed / 1e9:.1f} "
                "GB, more than the memory available; checkpoints are written in the loop until "
                "there is room (set run.async_checkpoints: off to say so)",
                stacklevel=2,
            )
        return False

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
        if end < self.run.total_steps:  # stopped early on purpose: resume later
            return result
        # No step follows: the optimizer's moments (2x the weights) make room for the export
        # (which imports sentence-transformers, ~280 MB) instead of adding to the peak.
        state.optimizer.state.clear()
        release_freed_memory()
        if self.rank == 0:
            self.method.export(self.model, final_dir, {"step": self.run.total_steps})
            if state.best is None or state.best_step == self.run.total_steps:
                # the final model is the best one (never evaluated, or best at the last step):
                # best/ shares final/'s files instead of a second copy of the weights
                link_export(final_dir, best_dir)
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
        announce(f"train: {steps:,} steps of batch {self.run.batch_size} ({cfg.method})"
                 + (f", {guess.text()}" if guess else ""))  # fmt: skip
        return flops

    def _tokens_per_step(self, sample: int = 256) -> int:
        """Tokens one step forwards: batch x texts per example x mean tokens of the first
        `sample` examples (two dropout views of a sentence; an NLI triplet's three texts)."""
        tokenizer = getattr(self.model, "tokenizer", None)
        rows = [self.run.data[i] for i in range(min(sample, len(self.run.data)))]
        texts = [_texts_of(r) for r in rows]
        if tokenizer is None or not texts or not all(texts):
            return 0  # rows of another kind: no estimate
        limit = self.config.model.max_length
        flat = clip_all([t for r in texts for t in r], limit)  # bounded work per text
        lengths = tokenizer(flat, truncation=True, max_length=limit)
        per_example = sum(len(x) for x in lengths["input_ids"]) / len(texts)
        return int(per_example * self.run.batch_size)  # small_data may have shrunk it

    def _barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def _fused_adamw(self) -> bool | None:
        """AdamW's implementation: fused (one kernel for every tensor) on a GPU, or with
        `optimisation.low_memory`, unless `optimisation.fused_optimizer: off`; elsewhere torch's
        default, which the recorded CPU trajectories used (`on` there asks torch for its fused
        CPU kernel)."""
        choice = self.config.optimisation.fused_optimizer
        lean = self.config.optimisation.low_memory  # no temporaries of a parameter's size
        if choice == "on" or (choice == "auto" and (self.device.type == "cuda" or lean)):
            return True
        return None

    def _autocast_dtype(self) -> torch.dtype | None:
        if self.device.type != "cuda" or self.config.optimisation.precision == "fp32":
            return None
        return torch.float16 if self.config.optimisation.precision == "fp16" else torch.bfloat16

    def _autocast(self) -> Any:
        dtype = self._autocast_dtype()
        if dtype is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast(self.device.type, dtype=dtype)


def eager_when_compiled(mode: str) -> Any:
    """The dev evaluation in eager PyTorch when the step is compiled: its batches have other
    shapes than training's (and eval mode), each of which would compile again (minutes on a
    BERT-base, until torch's recompile limit), and a CUDA graph's outputs are overwritten by its
    next replay. Where torch has no `set_stance` (before 2.6) it compiles as before."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if mode == "off" or set_stance is None:
        return contextlib.nullcontext()
    return set_stance("force_eager")


def compile_backbone(model: torch.nn.Module, mode: str) -> None:
    """`torch.compile` the encoder's backbone in place (`nn.Module.compile`: parameter names,
    checkpoints and exports are unchanged); `mode` is torch.compile's (reduce-overhead records
    CUDA graphs). Shapes vary with each batch's token length: `model.length_bucket` limits them."""
    backbone = getattr(model, "backbone", model)
    backbone.compile(mode=None if mode == "default" else mode, dynamic=False)
