"""The training loop: config -> encoder, corpus, loss -> steps with eval, checkpoints and export.

Batches are a pure function of (seed, step): epoch e uses the permutation of a generator seeded with
seed + e, so a resumed run sees exactly the sentences the uninterrupted run would have. Under
torchrun each rank takes its slice of the global batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from dclr import distributed as dist
from dclr.data.corpus import load_corpus
from dclr.errors import ConfigError, TrainingDiverged
from dclr.evaluation.sts import StsEvaluator
from dclr.losses.complementary import (
    CachedComplementary,
    OnTheFlyComplementary,
    TwoViewComplementary,
)
from dclr.losses.dclr import DCLRLoss
from dclr.losses.gradcache import GradCache
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder, resolve_model
from dclr.models.export import save_encoder
from dclr.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from dclr.training.config import TrainConfig
from dclr.training.tracking import MetricsLog

# Config attributes that hold dropout probabilities in Hugging Face encoder configs.
DROPOUT_KEYS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "attention_dropout",
)


@dataclass
class TrainResult:
    steps: int
    final_dir: Path
    best_dir: Path
    best_metric: float | None
    best_step: int | None


def build_encoder(config: TrainConfig) -> SentenceEncoder:
    torch.manual_seed(config.seed)  # the MLP head's initialisation
    overrides: dict[str, Any] = {}
    if config.dropout is not None:
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(resolve_model(config.model), trust_remote_code=False)
        overrides = {k: config.dropout for k in DROPOUT_KEYS if hasattr(hf, k)}
    return SentenceEncoder.build(
        config.model, pooler=config.pooler, mlp_head=config.mlp_head, **overrides
    )


def build_complementary(
    config: TrainConfig, corpus: Sequence[str], device: torch.device, show_progress: bool = True
) -> Any:
    """The frozen complementary model of DCLR, in the configured mode (None if not needed)."""
    if config.method != "dclr" or config.weighting not in ("complementary", "distill"):
        return None
    spec = config.complementary_model or config.model
    encoder = SentenceEncoder.from_pretrained(spec, pooler=config.complementary_pooler)
    encoder = encoder.to(device)
    if config.complementary_mode == "cached":
        cache = Path(config.complementary_cache) if config.complementary_cache else None
        return CachedComplementary.build_or_load(
            cache,
            encoder,
            corpus,
            spec,
            config.max_length,
            device=device,
            show_progress=show_progress,
        )
    if config.complementary_mode == "on_the_fly":
        return OnTheFlyComplementary(encoder, config.max_length)
    return TwoViewComplementary(encoder, config.max_length)


def build_loss(config: TrainConfig, model: Any, complementary: Any = None) -> torch.nn.Module:
    if config.method == "simcse":
        return SimCSELoss(model, temperature=config.temperature)
    if config.method == "dclr":
        return DCLRLoss(
            model,
            complementary,
            temperature=config.temperature,
            noise_ratio=config.noise_ratio,
            noise_std=config.noise_std,
            noise_steps=config.noise_steps,
            noise_step_size=config.noise_step_size,
            noise_temperature=config.noise_temperature,
            noise_mode=config.noise_mode,
            false_negative_threshold=config.false_negative_threshold,
            weighting=config.weighting,
            form=config.dclr_form,
            seed=config.seed,
        )
    raise ConfigError(f"unknown method {config.method!r}")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """No weight decay on biases and normalisation weights (every 1-D parameter)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class Trainer:
    """Runs `config`; `encoder`, `corpus` and `evaluator` may be injected (tests, experiments)."""

    def __init__(
        self,
        config: TrainConfig,
        encoder: SentenceEncoder | None = None,
        corpus: Sequence[str] | None = None,
        evaluator: StsEvaluator | None = None,
    ) -> None:
        self.config = config.validate()
        dist.init_from_env()
        self.rank, self.world = dist.rank(), dist.world_size()
        if config.batch_size % self.world:
            raise ConfigError(
                f"batch_size {config.batch_size} is not divisible by {self.world} ranks"
            )
        self.device = torch.device(
            f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        )
        self.encoder = (encoder or build_encoder(config)).to(self.device)
        if config.packing == "on" or (config.packing == "auto" and self.device.type == "cpu"):
            self.encoder.enable_packing()
        self.corpus = corpus if corpus is not None else load_corpus(config.corpus, config.data_dir)
        if len(self.corpus) < config.batch_size:
            raise ConfigError(
                f"the corpus has {len(self.corpus)} sentences, fewer than one batch "
                f"of {config.batch_size}"
            )
        self.evaluator = evaluator
        if evaluator is None and config.eval_steps > 0 and self.rank == 0:
            self.evaluator = StsEvaluator(config.data_dir, mode="dev", geometry=True)
        self.run_dir = Path(config.output_dir)
        self.steps_per_epoch = len(self.corpus) // config.batch_size
        self.total_steps = config.max_steps or math.ceil(config.epochs * self.steps_per_epoch)
        self._perm_epoch, self._perm = -1, torch.empty(0)

    # ---- data -------------------------------------------------------------------------------
    def batch_sentences(self, step: int) -> list[str]:
        """This rank's sentences for 0-based `step`."""
        ids = self.global_batch(step)
        local = self.config.batch_size // self.world
        return [self.corpus[int(i)] for i in ids[self.rank * local : (self.rank + 1) * local]]

    def global_batch(self, step: int) -> torch.Tensor:
        """Corpus indices of the global batch of 0-based `step`, (batch_size,)."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._perm_epoch:
            gen = torch.Generator().manual_seed(self.config.seed + epoch)
            self._perm, self._perm_epoch = torch.randperm(len(self.corpus), generator=gen), epoch
        size = self.config.batch_size
        return self._perm[index * size : (index + 1) * size]

    # ---- evaluation -------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        assert self.evaluator is not None
        results = self.evaluator(lambda s: self.encoder.encode(s, batch_size=128))
        if self.config.eval_metric == "stsb":
            results["metric"] = results["STSBenchmark"]
        else:
            results["metric"] = (results["STSBenchmark"] + results["SICKRelatedness"]) / 2
        return results

    # ---- loop -------------------------------------------------------------------------------
    def train(self, resume: bool = False) -> TrainResult:
        cfg, main = self.config, self.rank == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model: Any = self.encoder
        if self.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                self.encoder, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        # Rank 0 builds the complementary cache first; the other ranks then load it.
        complementary = build_complementary(cfg, self.corpus, self.device) if main else None
        self._barrier()
        if not main:
            complementary = build_complementary(cfg, self.corpus, self.device, show_progress=False)
        loss_fn = build_loss(cfg, model, complementary)
        optimizer = torch.optim.AdamW(
            param_groups(self.encoder, cfg.weight_decay), lr=cfg.learning_rate
        )
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(cfg.warmup_ratio * self.total_steps), self.total_steps
        )
        ckpt_root = self.run_dir / "checkpoints"
        start, best, best_step = 0, None, None
        last_ckpt: str | None = None
        if resume:
            last = latest_checkpoint(ckpt_root)
            if last is None:
                raise ConfigError(f"--resume: no checkpoint under {ckpt_root}")
            state = load_checkpoint(last, self.encoder, optimizer, scheduler)
            start, best, best_step = state["step"], state.get("best_metric"), state.get("best_step")
            last_ckpt = str(last)
        else:
            torch.manual_seed(cfg.seed + 1)  # dropout stream, distinct from the head's init
        if main:
            cfg.save(self.run_dir / "config.yaml")
        log = MetricsLog(self.run_dir, resume_step=start, tensorboard=main) if main else None
        scaler = torch.amp.GradScaler("cuda") if self._autocast_dtype() == torch.float16 else None
        bar = tqdm(
            total=self.total_steps, initial=start, desc="train", unit="step", disable=not main
        )
        self.encoder.train()
        tic, seen = time.perf_counter(), 0
        try:
            for step in range(start, self.total_steps):
                global_ids = self.global_batch(step)
                sentences = self.batch_sentences(step)
                features = self.encoder.tokenize(sentences, max_length=cfg.max_length)
                features = {k: v.to(self.device) for k, v in features.items()}
                context = {
                    "indices": global_ids,
                    "step": step,
                    "sentences": [self.corpus[int(i)] for i in global_ids]
                    if cfg.method == "dclr"
                    else None,
                }
                # DDP averages gradients while every rank's loss is already global: scale by W.
                backward_scale = float(self.world) * (scaler.get_scale() if scaler else 1.0)
                with self._autocast():
                    if cfg.grad_cache_chunk:
                        cached = GradCache(loss_fn, cfg.grad_cache_chunk, backward_scale)
                        parts = cached(features, **context)  # runs backward itself
                    else:
                        parts = loss_fn(features, **context)
                loss = parts["loss"]
                if not torch.isfinite(loss):
                    raise TrainingDiverged(step + 1, last_ckpt)
                if not cfg.grad_cache_chunk:
                    (loss * backward_scale).backward()
                if scaler is not None:
                    scaler.unscale_(optimizer)
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.encoder.parameters(), cfg.max_grad_norm)
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                done = step + 1
                seen += len(sentences) * self.world
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}")
                if log is not None and (done % cfg.log_steps == 0 or done == self.total_steps):
                    elapsed = time.perf_counter() - tic
                    log.log(
                        done,
                        "train",
                        {
                            **{k: v.item() for k, v in parts.items()},
                            "lr": scheduler.get_last_lr()[0],
                            "epoch": done / self.steps_per_epoch,
                            "sentences_per_s": seen / elapsed if elapsed else 0.0,
                        },
                    )
                    tic, seen = time.perf_counter(), 0
                is_last = done == self.total_steps
                if cfg.eval_steps and (done % cfg.eval_steps == 0 or is_last):
                    if main:
                        results = self.evaluate()
                        assert log is not None
                        log.log(done, "eval", results)
                        if best is None or results["metric"] > best:
                            best, best_step = results["metric"], done
                            save_encoder(
                                self.encoder,
                                self.run_dir / "best",
                                extra={"step": done, "metric": best},
                            )
                        self.encoder.train()
                    self._barrier()
                if done % cfg.checkpoint_every == 0 or is_last:
                    if main:
                        path = save_checkpoint(
                            ckpt_root,
                            done,
                            self.encoder,
                            optimizer,
                            scheduler,
                            {"best_metric": best, "best_step": best_step, "config": cfg.to_dict()},
                            keep=cfg.keep_checkpoints,
                        )
                        last_ckpt = str(path)
                    self._barrier()
        finally:
            bar.close()
            if log is not None:
                log.close()
        final_dir = self.run_dir / "final"
        if main:
            save_encoder(self.encoder, final_dir, extra={"step": self.total_steps})
            if best is None:  # never evaluated: the final model is the one to use
                save_encoder(self.encoder, self.run_dir / "best", extra={"step": self.total_steps})
        self._barrier()
        return TrainResult(self.total_steps, final_dir, self.run_dir / "best", best, best_step)

    def _barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def _autocast_dtype(self) -> torch.dtype | None:
        if self.device.type != "cuda" or self.config.precision == "fp32":
            return None
        return torch.float16 if self.config.precision == "fp16" else torch.bfloat16

    def _autocast(self) -> Any:
        dtype = self._autocast_dtype()
        if dtype is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast("cuda", dtype=dtype)
