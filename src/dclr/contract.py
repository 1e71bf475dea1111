"""The contract between the one training loop and a method, below both.

The loop (`dclr.training.loop`) and the methods (`dclr.methods`) both import this module and
neither imports the other's registry: the method is resolved once, at the top (`dclr.driver`,
`dclr.recipe`), and handed down in the `PreparedRun` the loop trains (`Trainer(run)`).

* `Batch`: the one thing the loop hands an objective. Every method's objective is called as
  `objective(batch) -> dict[str, Tensor]` with `"loss"` and named parts to log. The loop fills
  what it knows (the step, the batch's corpus indices and examples); the method's `collate` turns
  its examples into `features` (and `labels`).
* `PreparedRun`: one run, prepared once at the top (`dclr.training.prepare.prepare_run`, called by
  `dclr.driver`): its config and method (and the methods of its other sections), the model, the examples, the batch plan, the total
  steps, the device and the run folder. The driver hands it to the method's hooks and to the loop
  (`Trainer(run)`), so neither redoes the preparation.
* `TrainResult`: what a finished (or deliberately stopped) run produced.
* `Objective` and its optional hooks, each a Protocol the loop checks with `isinstance`:
  `HasTrainingModules` (modules trained and checkpointed with the model, never exported),
  `HasStartRecords` (measurements logged at step 0, e.g. DCLR's calibration),
  `HasDerivedSettings` (options the objective computed instead of taking them as set, e.g. the
  calibrated phi: printed at the start, in results.json and in the model card) and
  `SupportsGradCache` (the loss split into encoder and objective, for `dclr.training.gradcache`).
* `MethodPlugin`: everything the loop and the driver ask of a method (`dclr.methods.base.Method`
  implements it with sentence-encoder defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn

if TYPE_CHECKING:
    from dclr.data.sampler import BatchSampler
    from dclr.options.config import TrainConfig

Evaluator = Callable[[nn.Module], dict[str, float]]


@dataclass
class Batch:
    """One optimisation step's input.

    features: what the model consumes, already on the device: a tokenization
        {"input_ids": (m, L), "attention_mask": (m, L), ...}, or one per part (DualCSE:
        {"explicit": {...}, "implicit": {...}}).
    step: the 0-based optimizer step (seeds noise and views; a run is resumable).
    indices: (B,) corpus indices of the *global* batch (all ranks), or None.
    sentences: the global batch's examples (strings for a plain corpus), or None.
    labels: (n,) integer labels (NLI pairs), or None.
    drawn: the objective's random choices for this step, drawn with the batch on the host
        (`DrawsAhead`) and moved to the device with the features, or None (the objective
        draws them itself).
    """

    features: Mapping[str, Any]
    step: int = 0
    indices: torch.Tensor | None = None
    sentences: Sequence[Any] | None = None
    labels: torch.Tensor | None = None
    drawn: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False)
class PreparedRun:
    """One run as prepared before its first step (`dclr.training.prepare.prepare_run`); the method's
    hooks and the loop read it and never prepare it again.

    model: the model that is trained and exported, on `device`.
    data: the examples the run trains on, as `plan` indexes them (deduplicated, the few-shot
        subset, repeated to fill a batch, paraphrase-dense sentences appended: as configured).
    plan: the global batch of every step, a pure function of (seed, step) (`dclr.data.sampler`).
    batch_size: the global batch actually used (the config's, unless `data.small_data` shrank it).
    total_steps: the steps the run trains (`optimisation.max_steps`, else its epochs of `plan`).
    rank, world: this process and the number of processes (torchrun).
    data_report: the summary of the training sentences (`dclr.data.report`; rank 0 of a sentence
        corpus), or None.
    methods: the method of every section the config holds, by name: `method` itself and those
        whose objectives it builds on (NLI's `nli.contrastive`), resolved by the caller
        (`dclr.driver`) as `method` is, so no method looks another up.
    saved_start: a resumed run's start as its checkpoint saved it, `{"derived": ...,
        "start_records": ..., "config": ...}` (`TrainResult`'s two fields and the config's
        `to_dict()`), or empty: a method reuses what it derived before step 1 (DCLR's calibrated
        phi) instead of measuring it again, when what it was derived from is unchanged.
    """

    config: TrainConfig
    method: MethodPlugin
    model: nn.Module
    data: Sequence[Any]
    plan: BatchSampler
    batch_size: int
    total_steps: int
    device: torch.device
    run_dir: Path
    rank: int = 0
    world: int = 1
    data_report: dict[str, Any] | None = None
    methods: Mapping[str, MethodPlugin] = field(default_factory=dict)
    saved_start: Mapping[str, Any] = field(default_factory=dict)

    @property
    def steps_per_epoch(self) -> int:
        return self.plan.steps_per_epoch

    def global_batch(self, step: int) -> torch.Tensor:
        """Data indices of the global batch of 0-based `step`, (batch_size,)."""
        return self.plan.global_batch(step)

    def planned_rows(self) -> list[int]:
        """Every data index some step of the run samples, each once, in order of first use."""
        seen: dict[int, None] = {}
        for step in range(self.total_steps):
            seen.update(dict.fromkeys(int(i) for i in self.global_batch(step)))
        return list(seen)


@dataclass
class TrainResult:
    """What a finished (or deliberately stopped) run produced."""

    steps: int
    final_dir: Path
    best_dir: Path
    best_metric: float | None
    best_step: int | None
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0
    # options the run computed rather than took as set, {flat option name: value used}
    derived: dict[str, Any] = field(default_factory=dict)
    # what the objective measured before step 1 (`HasStartRecords`), {kind: {name: value}}
    start_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what its checkpoints cost (`dclr.training.background.WriteTimes.summary`)
    checkpoint_times: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Objective(Protocol):
    """A method's objective: `objective(batch)` -> {"loss": scalar, named parts...}."""

    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class HasTrainingModules(Protocol):
    """An objective with modules of its own (e.g. an NLI classifier head): optimised and
    checkpointed with the model, never exported."""

    def training_modules(self) -> dict[str, nn.Module]: ...


@runtime_checkable
class HasStartRecords(Protocol):
    """An objective that measured something before step 1 (logged by the loop at step 0,
    `{kind: {name: value}}`)."""

    @property
    def start_records(self) -> dict[str, dict[str, Any]]: ...


@runtime_checkable
class HasDerivedSettings(Protocol):
    """An objective that computed some of its options before step 1 instead of taking them as
    set (DCLR's calibrated phi), `{flat option name: value used}`: the run prints them at the
    start and writes them to results.json (`derived`) and to the model card, in place of the
    config's value."""

    @property
    def derived_settings(self) -> dict[str, Any]: ...


@runtime_checkable
class DrawsAhead(Protocol):
    """An objective whose random choices for a step are a function of the step and its host
    batch only (ConSERT's views): the loop draws them with the batch (`draw_ahead(batch)`, on
    the host features), so on a GPU they are made in the prefetch thread, one step ahead, and
    the step reads nothing from the device to make them. They reach the objective as
    `batch.drawn`, on the device; None: nothing to draw."""

    def draw_ahead(self, batch: Batch) -> Mapping[str, Any] | None: ...


@runtime_checkable
class HasCompiledParts(Protocol):
    """An objective with maths of its own worth compiling when the step is
    (`optimisation.compile`): the loop calls `compile_parts(mode)` after compiling the backbone."""

    def compile_parts(self, mode: str) -> None: ...


@runtime_checkable
class SupportsGradCache(Protocol):
    """A two-view loss split into its encoder (`model`) and its objective on the embeddings
    (`objective(z1, z2, batch)`), so GradCache can encode in chunks."""

    model: Any

    def objective(
        self, z1: torch.Tensor, z2: torch.Tensor, batch: Batch
    ) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class MethodPlugin(Protocol):
    """What the loop (`Trainer`) and the driver ask of a method; `dclr.methods.base.Method`
    gives every hook a sentence-encoder default.

    The hooks that prepare a run (`check`, `build_model`, `load_data`) and those asked of a
    config that is not one run (`stages`, `inference_pooler`, `evaluate_final`, which also scores
    the last stage of a schedule) take the config; the hooks of a prepared run take the
    `PreparedRun`. `evaluate_start` takes both: a schedule's starting model is scored once for
    all its stages, with no run prepared (`run` None)."""

    name: str
    section: type
    distributed: bool
    supports_grad_cache: bool
    sentence_batches: bool

    def check(self, config: TrainConfig) -> None: ...

    def build_model(self, config: TrainConfig) -> nn.Module: ...

    def load_data(self, config: TrainConfig) -> Sequence[Any]: ...

    def collate(
        self, run: PreparedRun, examples: Sequence[Any]
    ) -> tuple[dict[str, Any], torch.Tensor | None]: ...

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module: ...

    def dev_evaluator(self, run: PreparedRun) -> Evaluator | None: ...

    def export(self, model: nn.Module, path: Path, extra: dict[str, Any]) -> Path: ...

    def inference_pooler(self, config: TrainConfig) -> str:
        """The pooler a model of this run is evaluated (and served) with."""
        ...

    def evaluate_start(
        self, config: TrainConfig, run: PreparedRun | None = None
    ) -> dict[str, float] | None: ...

    def evaluate_final(self, config: TrainConfig, result: TrainResult) -> dict[str, Any]: ...

    def describe(self, run: PreparedRun) -> dict[str, Any]: ...

    def stages(self, config: TrainConfig) -> list[TrainConfig]: ...
