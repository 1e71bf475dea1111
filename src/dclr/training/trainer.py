"""The training loop: config -> encoder, corpus, loss -> steps with eval, checkpoints and export.

Batches are a pure function of (seed, step): epoch e uses the permutation of a generator seeded with
seed + e, so a resumed run sees exactly the sentences the uninterrupted run would have. Under
torchrun each rank takes its slice of the global batch.
"""

from __future__ import annotations

import dataclasses
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
from dclr.data.corpus import ListCorpus, load_corpus
from dclr.data.nli import NliTriple, nli_triples, read_senteval_nli, read_simcse_csv
from dclr.data.sampler import BatchSampler, training_batches
from dclr.errors import ConfigError, TrainingDiverged
from dclr.evaluation.sts import StsEvaluator
from dclr.losses.complementary import (
    CachedComplementary,
    OnTheFlyComplementary,
    TwoViewComplementary,
)
from dclr.losses.consert import ConSERTLoss
from dclr.losses.dclr import DCLRLoss
from dclr.losses.gradcache import GradCache
from dclr.losses.simcse import SimCSELoss
from dclr.losses.supervised import AdversarialView, NLIHead, SupervisedNLILoss
from dclr.models.encoder import SentenceEncoder, resolve_model
from dclr.models.export import save_encoder
from dclr.training.checkpoint import resume_checkpoint, save_checkpoint
from dclr.training.config import TrainConfig
from dclr.training.runfolder import GracefulStop, TrainingStopped, run_id
from dclr.training.tracking import MetricsLog
from dclr.views.pair import PositiveViews, ViewSpec

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
    if is_supervised(config):  # a supervised stage scores no unlabelled corpus
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


def build_views(config: TrainConfig, rank: int = 0) -> PositiveViews | None:
    """The configured positive views, or None for the default two dropout views."""
    if (config.view1, config.view2) == ("dropout", "dropout"):
        return None
    return PositiveViews(
        ViewSpec(config.view1, config.view1_rate),
        ViewSpec(config.view2, config.view2_rate),
        seed=config.seed,
        rank=rank,
    )


def few_shot_indices(size: int, config: TrainConfig) -> list[int] | None:
    """Corpus indices of the few-shot subset (first or seeded-random N, or a fraction); None: all.

    A fraction keeps max(2, round(fraction * size)) sentences (contrastive training needs two).
    """
    if config.few_shot_sentences is None and config.few_shot_fraction is None:
        return None
    count = config.few_shot_sentences
    if count is None:
        assert config.few_shot_fraction is not None
        count = max(2, round(config.few_shot_fraction * size))
    if count > size:
        raise ConfigError(f"few_shot_sentences {count} is more than the corpus's {size} sentences")
    if config.few_shot_sampling == "first":
        return list(range(count))
    gen = torch.Generator().manual_seed(config.seed)
    return sorted(torch.randperm(size, generator=gen)[:count].tolist())


SUPERVISED_STAGE = {
    "sup": "sup",
    "joint": "joint",
    "sup_then_unsup": "sup",
    "joint_then_unsup": "joint",
}


def is_supervised(config: TrainConfig) -> bool:
    """This config trains on labelled NLI data (a single supervised or joint stage)."""
    return config.schedule in ("sup", "joint")


def stage_configs(config: TrainConfig) -> list[TrainConfig]:
    """ConSERT's schedules as a list of single-stage configs, run one after the other.

    `sup_then_unsup` / `joint_then_unsup`: stage 1 (`sup` / `joint`) on the NLI data writes
    `<output_dir>/stage-1`; stage 2 (`unsup`) starts from its final model and trains on `corpus`
    in `<output_dir>/stage-2`. Other schedules are one stage.
    """
    if config.schedule not in ("sup_then_unsup", "joint_then_unsup"):
        return [config]
    root = Path(config.output_dir)
    first = dataclasses.replace(
        config, schedule=SUPERVISED_STAGE[config.schedule], output_dir=str(root / "stage-1")
    )
    second = dataclasses.replace(
        config,
        schedule="unsup",
        model=str(root / "stage-1" / "final"),
        output_dir=str(root / "stage-2"),
    )
    return [first.validate(), second]


def run_schedule(config: TrainConfig) -> list[TrainResult]:
    """Train every stage of `config.schedule` (see `stage_configs`) and return their results."""
    return [Trainer(stage).train() for stage in stage_configs(config)]


def load_nli_examples(config: TrainConfig) -> list[Any]:
    """The labelled examples of a supervised stage: NliTriples (supervised SimCSE) or NliPairs."""
    path = Path(config.nli_data or "")
    if not path.exists() and not path.is_absolute():
        from dclr.data.paths import resolve_data_dir

        path = resolve_data_dir(config.data_dir) / path  # e.g. senteval/SNLI under the data root
    wants_pairs = config.schedule == "joint" or config.supervised_loss == "nli_head"
    if path.is_dir():
        pairs = read_senteval_nli(path, config.nli_split)
        return pairs if wants_pairs else nli_triples(pairs)
    triples = read_simcse_csv(path)
    if wants_pairs:
        raise ConfigError(
            f"{path}: the NLI head needs labelled pairs; a SimCSE CSV has none "
            "(use a SentEval-layout folder with s1/s2/labels files)"
        )
    return triples


def build_supervised_loss(
    config: TrainConfig, model: Any, hidden_size: int, hard_negatives: bool
) -> torch.nn.Module:
    """The loss of a supervised or joint stage (see `SupervisedNLILoss`)."""
    kind = "joint" if config.schedule == "joint" else config.supervised_loss
    head = None
    if kind in ("nli_head", "joint"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)  # the head's initialisation
            head = NLIHead(hidden_size)
    contrastive, adversarial = None, None
    if kind == "joint":
        plain = dataclasses.replace(config, schedule="unsup")
        if "adversarial" in (config.view1, config.view2):
            first = config.view1 == "adversarial"
            other = ViewSpec(
                *((config.view2, config.view2_rate) if first else (config.view1, config.view1_rate))
            )
            adversarial = AdversarialView(
                config.adversarial_epsilon, other, first, seed=config.seed, rank=dist.rank()
            )
            plain = dataclasses.replace(plain, view1="dropout", view2="dropout")
        contrastive = build_loss(plain, model)
    return SupervisedNLILoss(
        model,
        kind,
        temperature=config.temperature,
        head=head,
        contrastive=contrastive,
        joint_weight=config.joint_weight,
        hard_negatives=hard_negatives,
        adversarial=adversarial,
    )


def build_loss(config: TrainConfig, model: Any, complementary: Any = None) -> torch.nn.Module:
    views = build_views(config, dist.rank())
    if config.method == "simcse":
        return SimCSELoss(model, temperature=config.temperature, views=views)
    if config.method == "consert":
        return ConSERTLoss(model, temperature=config.temperature, views=views)
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
            views=views,
        )
    raise ConfigError(f"unknown method {config.method!r}")


def batch_texts(examples: Sequence[Any]) -> tuple[list[str], torch.Tensor | None]:
    """Sentences to encode for a batch, and labels (n,) or None.

    Plain sentences pass through; NliTriples give [anchors; positives; hard negatives];
    NliPairs give [premises; hypotheses] and their labels.
    """
    if not examples or isinstance(examples[0], str):
        return list(examples), None
    if isinstance(examples[0], NliTriple):
        texts = [t.anchor for t in examples] + [t.positive for t in examples]
        if examples[0].hard_negative is not None:
            texts += [str(t.hard_negative) for t in examples]
        return texts, None
    texts = [p.premise for p in examples] + [p.hypothesis for p in examples]
    return texts, torch.tensor([p.label for p in examples])


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
        if config.schedule in ("sup_then_unsup", "joint_then_unsup"):
            raise ConfigError(
                f"schedule {config.schedule!r} has two stages: run it with "
                "dclr.training.trainer.run_schedule"
            )
        if is_supervised(config) and self.world > 1:
            raise ConfigError("supervised NLI training runs in one process (no DDP support yet)")
        if corpus is None:
            corpus = (
                load_nli_examples(config)
                if is_supervised(config)
                else load_corpus(config.corpus, config.data_dir)
            )
        self.corpus = corpus
        subset = few_shot_indices(len(self.corpus), config)
        if subset is not None:  # the options (and seed) saved in config.yaml reproduce it
            full = self.corpus
            self.corpus = (
                [full[i] for i in subset]
                if is_supervised(config)
                else ListCorpus([full[i] for i in subset], name="few-shot")
            )
        if len(self.corpus) < config.batch_size:
            raise ConfigError(
                f"the corpus has {len(self.corpus)} sentences, fewer than one batch "
                f"of {config.batch_size}"
            )
        self.evaluator = evaluator
        if evaluator is None and config.eval_steps > 0 and self.rank == 0:
            self.evaluator = StsEvaluator(config.data_dir, mode="dev", geometry=True)
        self.run_dir = Path(config.output_dir)
        self.sampler = self._build_sampler()
        self.steps_per_epoch = self.sampler.steps_per_epoch
        self.total_steps = config.max_steps or math.ceil(config.epochs * self.steps_per_epoch)

    def _build_sampler(self) -> BatchSampler:
        """Random batches, or paraphrase-dense ones (the corpus then gains the pair sentences)."""
        cfg = self.config
        self.corpus, sampler = training_batches(
            self.corpus,
            cfg.batch_size,
            cfg.seed,
            cfg.paraphrase_density,
            cfg.paraphrase_sources,
            cfg.data_dir,
        )
        return sampler

    # ---- data -------------------------------------------------------------------------------
    def batch_sentences(self, step: int) -> list[str]:
        """This rank's sentences for 0-based `step`."""
        ids = self.global_batch(step)
        local = self.config.batch_size // self.world
        return [self.corpus[int(i)] for i in ids[self.rank * local : (self.rank + 1) * local]]

    def global_batch(self, step: int) -> torch.Tensor:
        """Corpus indices of the global batch of 0-based `step`, (batch_size,)."""
        return self.sampler.global_batch(step)

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
        if is_supervised(cfg):
            hard = (
                isinstance(self.corpus[0], NliTriple) and self.corpus[0].hard_negative is not None
            )
            loss_fn = build_supervised_loss(cfg, model, self.encoder.hidden_size, hard)
            loss_fn.to(self.device)
        else:
            loss_fn = build_loss(cfg, model, complementary)
        calibration = self._calibrate() if cfg.phi_calibration != "none" else None
        if calibration is not None:
            loss_fn.threshold = calibration["phi"]
        groups = param_groups(self.encoder, cfg.weight_decay)
        head = getattr(loss_fn, "head", None)
        extra = {}  # modules checkpointed with the encoder
        if head is not None:  # the NLI head trains with the encoder (checkpointed, never exported)
            groups += param_groups(head, cfg.weight_decay)
            extra["nli_head"] = head
        optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate)
        scheduler = get_linear_schedule_with_warmup(
            optimizer, int(cfg.warmup_ratio * self.total_steps), self.total_steps
        )
        ckpt_root = self.run_dir / "checkpoints"
        start, best, best_step = 0, None, None
        last_ckpt: str | None = None
        if resume:  # the newest intact checkpoint of this run (damaged ones are named, skipped)
            last, state = resume_checkpoint(
                ckpt_root, self.encoder, optimizer, scheduler, extra, run_id(self.run_dir)
            )
            start, best, best_step = state["step"], state.get("best_metric"), state.get("best_step")
            last_ckpt = str(last)
        else:
            torch.manual_seed(cfg.seed + 1)  # dropout stream, distinct from the head's init
        if main:
            cfg.save(self.run_dir / "config.yaml")
        log = MetricsLog(self.run_dir, resume_step=start, tensorboard=main) if main else None
        if log is not None and calibration is not None and start == 0:
            log.log(0, "calibration", calibration)
        scaler = torch.amp.GradScaler("cuda") if self._autocast_dtype() == torch.float16 else None
        bar = tqdm(
            total=self.total_steps, initial=start, desc="train", unit="step", disable=not main
        )
        self.encoder.train()
        tic, seen = time.perf_counter(), 0
        stop = GracefulStop(enabled=self.world == 1).install()  # SIGTERM: checkpoint, then stop
        try:
            for step in range(start, self.total_steps):
                global_ids = self.global_batch(step)
                sentences = self.batch_sentences(step)
                texts, labels = batch_texts(sentences)
                features = self.encoder.tokenize(texts, max_length=cfg.max_length)
                features = {k: v.to(self.device) for k, v in features.items()}
                context: dict[str, Any] = {
                    "indices": global_ids,
                    "step": step,
                    "sentences": [self.corpus[int(i)] for i in global_ids]
                    if cfg.method == "dclr" and not is_supervised(cfg)
                    else None,
                }
                if is_supervised(cfg):
                    context = {
                        "step": step,
                        "labels": None if labels is None else labels.to(self.device),
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
                if done % cfg.checkpoint_every == 0 or is_last or stop.requested:
                    if main:
                        path = save_checkpoint(
                            ckpt_root,
                            done,
                            self.encoder,
                            optimizer,
                            scheduler,
                            {
                                "best_metric": best,
                                "best_step": best_step,
                                "config": cfg.to_dict(),
                                "run_id": run_id(self.run_dir),
                            },
                            keep=cfg.keep_checkpoints,
                            extra=extra,
                        )
                        last_ckpt = str(path)
                    self._barrier()
                    if stop.requested and not is_last:
                        raise TrainingStopped(done, str(last_ckpt), str(self.run_dir))
        finally:
            stop.restore()
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

    def _calibrate(self) -> dict[str, Any]:
        """phi from the complementary model's own similarities (`dclr.losses.calibration`)."""
        from dclr.data.paraphrases import gold_paraphrase_pairs, parse_sources
        from dclr.data.paths import resolve_data_dir
        from dclr.training.calibrate import calibrate_phi

        cfg = self.config
        spec = cfg.complementary_model or cfg.model
        scorer = SentenceEncoder.from_pretrained(spec, pooler=cfg.complementary_pooler)
        scorer = scorer.to(self.device)
        pairs: list[tuple[str, str]] = []
        if cfg.phi_calibration == "paraphrase_recall":
            gold = gold_paraphrase_pairs(
                resolve_data_dir(cfg.data_dir), parse_sources(cfg.paraphrase_sources)
            )
            pairs = [(p.first, p.second) for p in gold]
        return calibrate_phi(
            cfg.phi_calibration,
            cfg.phi_calibration_target,
            scorer,
            self.corpus,
            pairs,
            max_length=cfg.max_length,
            seed=cfg.seed,
        )

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
