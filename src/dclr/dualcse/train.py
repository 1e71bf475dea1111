"""`dclr dualcse train`: a thin loop that trains DualCSE or supervised SimCSE on INLI train.

Batches are a pure function of (seed, step): epoch e uses the permutation of a generator seeded with
seed + e. Model, optimizer, scheduler and RNG states go into atomic checkpoints
(`dclr.training.checkpoint`), so `--resume` continues the exact trajectory. A non-finite loss stops
the run, names the step and keeps the last good checkpoint. Metrics (each loss part separately) go
to `metrics.jsonl` and TensorBoard (`dclr.training.tracking`). At the end the model is exported to
`final/` and, with `rte_eval`, evaluated on INLI (`results.json`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, get_linear_schedule_with_warmup

from dclr.dualcse.config import DualCSEConfig
from dclr.dualcse.data import InliExample, inli_split, read_inli
from dclr.dualcse.evaluate import RteEvaluator, load_embedder
from dclr.dualcse.model import SEMANTICS, DualEncoder
from dclr.dualcse.simcse_sup import SupervisedSimCSELoss
from dclr.errors import ConfigError, TrainingDiverged
from dclr.losses.dualcse import DualCSELoss
from dclr.models.encoder import SentenceEncoder, resolve_model
from dclr.models.export import save_encoder
from dclr.training.checkpoint import resume_checkpoint, save_checkpoint
from dclr.training.driver import environment
from dclr.training.tracking import MetricsLog
from dclr.training.trainer import DROPOUT_KEYS, param_groups

RESULTS_FILE = "results.json"


@dataclass
class TrainResult:
    steps: int
    final_dir: Path
    train_seconds: float
    rte: dict[str, float] | None


def training_items(config: DualCSEConfig, examples: Sequence[InliExample]) -> list[tuple[str, ...]]:
    """dualcse: (premise, explicit, implied, contradiction) per premise; simcse_sup: (anchor,
    positive, hard negative) triples, one per entailment named by `sup_positives`."""
    if config.method == "dualcse":
        return [(e.premise, e.explicit, e.implied, e.contradiction) for e in examples]
    kinds = ("explicit", "implied") if config.sup_positives == "both" else (config.sup_positives,)
    return [(e.premise, e.hypothesis(k), e.contradiction) for e in examples for k in kinds]


def build_model(config: DualCSEConfig) -> DualEncoder | SentenceEncoder:
    torch.manual_seed(config.seed)
    overrides: dict[str, Any] = {}
    if config.dropout is not None:
        hf = AutoConfig.from_pretrained(resolve_model(config.model), trust_remote_code=False)
        overrides = {k: config.dropout for k in DROPOUT_KEYS if hasattr(hf, k)}
    if config.method == "dualcse":
        return DualEncoder.build(config.model, config.encoder, config.pooler, **overrides)
    return SentenceEncoder.build(config.model, pooler=config.pooler, mlp_head=False, **overrides)


def build_loss(config: DualCSEConfig, model: torch.nn.Module) -> torch.nn.Module:
    if config.method == "dualcse":
        return DualCSELoss(
            model,
            temperature=config.temperature,
            contradiction_negatives=config.contradiction_negatives,
            intra_sentence=config.intra_sentence,
        )
    return SupervisedSimCSELoss(model, temperature=config.temperature)


class DualCSETrainer:
    """Runs `config`; `model` and `examples` (INLI train) may be injected (tests, experiments)."""

    def __init__(
        self,
        config: DualCSEConfig,
        model: DualEncoder | SentenceEncoder | None = None,
        examples: Sequence[InliExample] | None = None,
    ) -> None:
        self.config = config.validate()
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if examples is None:
            examples = read_inli(inli_split(config.data_dir, "train"))
        self.items = training_items(config, examples)
        if len(self.items) < config.batch_size:
            raise ConfigError(
                f"{len(self.items)} training items, fewer than one batch of {config.batch_size}"
            )
        self.model = (model or build_model(config)).to(self.device)
        self.run_dir = Path(config.output_dir)
        self.steps_per_epoch = len(self.items) // config.batch_size
        self.total_steps = config.max_steps or math.ceil(config.epochs * self.steps_per_epoch)
        self._perm_epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def batch(self, step: int) -> list[tuple[str, ...]]:
        """The training items of 0-based `step`."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._perm_epoch:
            gen = torch.Generator().manual_seed(self.config.seed + epoch)
            self._perm, self._perm_epoch = torch.randperm(len(self.items), generator=gen), epoch
        size = self.config.batch_size
        return [self.items[int(i)] for i in self._perm[index * size : (index + 1) * size]]

    def features(self, items: Sequence[tuple[str, ...]]) -> Any:
        """Tokenized inputs of the loss: column-major sentences (all premises first, ...)."""
        sentences = [s for column in zip(*items, strict=True) for s in column]
        limit = self.config.max_length
        if isinstance(self.model, DualEncoder):
            return {
                semantics: _to(self.model.tokenize(sentences, semantics, limit), self.device)
                for semantics in SEMANTICS
            }
        return _to(self.model.tokenize(sentences, max_length=limit), self.device)

    def train(self, resume: bool = False, stop_at_step: int | None = None) -> TrainResult:
        """Train to `total_steps` (or stop early after `stop_at_step`, leaving a checkpoint)."""
        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        loss_fn = build_loss(cfg, self.model)
        optimizer = torch.optim.AdamW(
            param_groups(self.model, cfg.weight_decay), lr=cfg.learning_rate
        )
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(cfg.warmup_ratio * self.total_steps), self.total_steps
        )
        ckpt_root = self.run_dir / "checkpoints"
        start, train_seconds, cpu_seconds, last_ckpt = 0, 0.0, 0.0, None
        if resume:
            last, state = resume_checkpoint(ckpt_root, self.model, optimizer, scheduler)
            start, last_ckpt = state["step"], str(last)
            train_seconds, cpu_seconds = state["train_seconds"], state.get("cpu_seconds", 0.0)
        else:
            torch.manual_seed(cfg.seed + 1)  # the dropout stream
        cfg.save(self.run_dir / "config.yaml")
        (self.run_dir / "env.json").write_text(json.dumps(environment(), indent=2) + "\n")
        log = MetricsLog(self.run_dir, resume_step=start)
        end = min(self.total_steps, stop_at_step or self.total_steps)
        bar = tqdm(total=self.total_steps, initial=start, desc="train", unit="step")
        self.model.train()
        tic, seen = time.perf_counter(), 0
        try:
            for step in range(start, end):
                step_start, step_cpu = time.perf_counter(), time.process_time()
                items = self.batch(step)
                parts = loss_fn(self.features(items))
                loss = parts["loss"]
                if not torch.isfinite(loss):
                    raise TrainingDiverged(step + 1, last_ckpt)
                loss.backward()
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                done, seen = step + 1, seen + len(items)
                train_seconds += time.perf_counter() - step_start
                cpu_seconds += time.process_time() - step_cpu  # all threads: robust to sharing
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}")
                if done % cfg.log_steps == 0 or done == self.total_steps:
                    elapsed = time.perf_counter() - tic
                    values = {k: v.item() for k, v in parts.items()}
                    values |= {
                        "lr": scheduler.get_last_lr()[0],
                        "epoch": done / self.steps_per_epoch,
                        "items_per_s": seen / elapsed if elapsed else 0.0,
                        "train_seconds": train_seconds,
                        "cpu_seconds": cpu_seconds,
                    }
                    log.log(done, "train", values)
                    tic, seen = time.perf_counter(), 0
                if done % cfg.save_steps == 0 or done in (end, self.total_steps):
                    state = {
                        "train_seconds": train_seconds,
                        "cpu_seconds": cpu_seconds,
                        "config": cfg.to_dict(),
                    }
                    path = save_checkpoint(
                        ckpt_root,
                        done,
                        self.model,
                        optimizer,
                        scheduler,
                        state,
                        cfg.keep_checkpoints,
                    )
                    last_ckpt = str(path)
        finally:
            bar.close()
            log.close()
        final_dir = self.run_dir / "final"
        if end < self.total_steps:  # stopped early on purpose: resume later
            return TrainResult(end, final_dir, train_seconds, None)
        info = {"step": self.total_steps, "method": cfg.method}
        if isinstance(self.model, DualEncoder):
            self.model.save(final_dir, extra=info)
        else:
            save_encoder(self.model, final_dir, extra=info)
        rte = None
        if cfg.rte_eval:
            evaluator = RteEvaluator.from_data_dir(cfg.data_dir)
            rte = evaluator(load_embedder(final_dir), batch_size=cfg.eval_batch_size)
            log = MetricsLog(self.run_dir, resume_step=self.total_steps)
            log.log(self.total_steps, "rte_test", rte)
            log.close()
        summary = {
            "method": cfg.method,
            "encoder": cfg.encoder if cfg.method == "dualcse" else "single",
            "steps": self.total_steps,
            "train_seconds": train_seconds,
            "cpu_seconds": cpu_seconds,
            "final_dir": str(final_dir),
            "rte_test": rte,
        }
        (self.run_dir / RESULTS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        return TrainResult(self.total_steps, final_dir, train_seconds, rte)


def _to(features: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in features.items()}
