"""What a method brings to the one training loop (`dclr.training.loop`).

A method is an instance of a `Method` subclass (it implements `dclr.contract.MethodPlugin`),
found by its `name` in `dclr.methods.registry`:

* `section`: its config dataclass (validated by `section.validate(config)`), read as
  `config.section(name)`; a recipe writes it under the method's name;
* `build_model(config)`: the trained model (default: a `SentenceEncoder` from `config.model`);
* `load_data(config)`: the training examples, a sequence the loop indexes (default: the corpus);
* `collate(run, examples)`: examples -> (features, labels), before moving to the device;
* `build_objective(run, model)`: an `nn.Module` called as `objective(batch) -> dict[str, Tensor]`
  with "loss" and named parts (`dclr.contract.Batch`);
* hooks with sentence-encoder defaults: `dev_evaluator` (STS dev during training), `export`
  (`final/`, `best/`), `evaluate_start` / `evaluate_final` (the test tables), `stages` (a schedule
  of several runs).

`run` is the `dclr.contract.PreparedRun` the driver prepared from the config and the first two
hooks (`dclr.training.prepare.prepare_run`): the config, the model, the examples as the batch plan
indexes them, the plan, the total steps, the device, and the methods of the config's sections
(`run.methods`, for a method built on another's objective: NLI's contrastive part). The loop never asks which method it runs,
and never looks one up: the driver resolves the method once and hands it down in the run
(`Trainer(run)`). Everything method-specific is here or in a subclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr.contract import Evaluator, PreparedRun, TrainResult
from dclr.errors import ConfigError

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig

# Config attributes that hold dropout probabilities in Hugging Face encoder configs.
DROPOUT_KEYS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "attention_dropout",
)


def dropout_overrides(config: TrainConfig) -> dict[str, Any]:
    """Hugging Face config overrides setting every dropout to `config.model.dropout` (if set)."""
    if config.model.dropout is None:
        return {}
    from transformers import AutoConfig

    from dclr.models.resolve import resolve_model

    hf = AutoConfig.from_pretrained(resolve_model(config.model.name), trust_remote_code=False)
    return {k: config.model.dropout for k in DROPOUT_KEYS if hasattr(hf, k)}


def build_encoder(config: TrainConfig, mlp_head: bool | None = None) -> nn.Module:
    """A `SentenceEncoder` from the model section, its MLP head initialised from the seed."""
    from dclr.models.encoder import SentenceEncoder

    torch.manual_seed(config.run.seed)  # the MLP head's initialisation
    return SentenceEncoder.build(
        config.model.name,
        pooler=config.model.pooler,
        mlp_head=config.model.mlp_head if mlp_head is None else mlp_head,
        eval_pooler=config.model.eval_pooler,
        **dropout_overrides(config),
    )


def sts_dev_evaluator(config: TrainConfig) -> Evaluator:
    """Dev scores of a SentenceEncoder, with "metric" = the run's `eval_metric`: STS dev (with
    alignment and uniformity), and `run.eval_retrieval`'s dev queries when set (`retrieval_*`
    keys, x 100). `eval_metric: retrieval` scores the retrieval folder alone."""
    from dclr.evaluation.retrieval_eval import RetrievalEvaluator
    from dclr.evaluation.sts import StsEvaluator

    run = config.run
    sts = None
    if run.eval_metric != "retrieval":
        sts = StsEvaluator(
            config.data.data_dir,
            mode="dev",
            geometry=True,
            released_geometry=run.released_geometry,
            text=run.sts_text,
        )
    search = None
    if run.eval_retrieval:
        search = RetrievalEvaluator(run.eval_retrieval, split=run.eval_retrieval_split)

    token_ids: dict[tuple[str, ...], list[list[int]]] = {}  # the dev texts, tokenised once

    def evaluate(model: nn.Module) -> dict[str, float]:
        def encode(sentences: list[str]) -> Any:
            return encode_dev(model, sentences, token_ids)

        results = sts(encode) if sts is not None else {}
        if search is not None:
            results.update(retrieval_dev_scores(search(encode)))
        results["metric"] = dev_metric(results, run.eval_metric)
        return results

    return evaluate


def encode_dev(
    model: Any, sentences: list[str], token_ids: dict[tuple[str, ...], list[list[int]]]
) -> Any:
    """`model.encode(sentences)` for the dev evaluation, tokenising each list of texts once per
    run (`token_ids` keeps them between evaluations): the same batches and vectors as `encode`.
    A model without `token_ids` (another method's) is asked to `encode`."""
    if not hasattr(model, "token_ids") or len(set(sentences)) != len(sentences):
        return model.encode(
            sentences,
            batch_size=128,
            normalize=False,
            show_progress=True,
            progress_label="dev eval",
        )
    key = tuple(sentences)
    if key not in token_ids:
        token_ids[key] = model.token_ids(sentences)
    pooler = model.eval_pooler or model.pooler
    out = model.encode_ids_poolers(
        token_ids[key], (pooler,), 128, show_progress=True, progress_label="dev eval"
    )
    return out[pooler]


def retrieval_dev_scores(scores: dict[str, float]) -> dict[str, float]:
    """A RetrievalEvaluator's metrics as dev keys, x 100 like the STS scores they sit beside."""
    from dclr.evaluation.retrieval import METRICS

    return {f"retrieval_{name}": 100 * scores[name] for name in METRICS}


def dev_metric(results: dict[str, float], eval_metric: str) -> float:
    """The number that picks best/, from a dev evaluation's results."""
    if eval_metric == "stsb":
        return results["STSBenchmark"]
    if eval_metric == "stsb_sick":
        return (results["STSBenchmark"] + results["SICKRelatedness"]) / 2
    return results["retrieval_ndcg@10"]


class Method:
    """A training method; subclass it and `register` an instance (see the module docstring)."""

    name: str = ""
    title: str = ""  # what a model card calls it (default: the name)
    label: str = ""  # its short name in report tables and plots (default: the name)
    section: type = object  # the config section dataclass
    supports_grad_cache: bool = False  # objective has `.model` and `.objective(z1, z2, batch)`
    distributed: bool = True  # trains under torchrun (DDP)
    sentence_batches: bool = False  # batches of corpus sentences (paraphrase-dense batches apply)
    # Defaults under every recipe of this method (nested form), e.g. DualCSE's pooler.
    defaults: dict[str, Any] = {}
    # Defaults a flat (pre-sections) recipe of this method assumed, by flat option name.
    flat_defaults: dict[str, Any] = {}

    # ---- config -------------------------------------------------------------------------------
    def section_names(self, values: dict[str, Any]) -> list[str]:
        """The method sections this method reads, given the (nested) config values."""
        return [self.name]

    def convert_flat(self, flat: dict[str, Any]) -> dict[str, Any]:
        """Rewrite a flat (pre-sections) config before conversion (e.g. rename the method)."""
        return flat

    def check(self, config: TrainConfig) -> None:
        """Whether this method can train `config` (its sections already validated): the loop's
        options it supports, then `validate`. Called by recipe loading and by `Trainer`."""
        if config.method != self.name:
            raise ConfigError(f"method {self.name!r} cannot check a {config.method!r} config")
        if config.data.paraphrase_density > 0 and not self.sentence_batches:
            raise ConfigError("paraphrase_density applies to unsupervised training only")
        if (config.data.dedup or config.data.no_duplicates) and not self.sentence_batches:
            raise ConfigError("data.dedup and data.no_duplicates apply to sentence corpora only")
        if config.optimisation.grad_cache_chunk and not self.supports_grad_cache:
            raise ConfigError(
                f"grad_cache_chunk supports unsupervised training only (not method {self.name!r})"
            )
        self.validate(config)

    def validate(self, config: TrainConfig) -> None:
        """Checks across sections (each section validates itself)."""

    # ---- builders -----------------------------------------------------------------------------
    def build_model(self, config: TrainConfig) -> nn.Module:
        """The model to train (default: the sentence encoder `config.model` describes)."""
        return build_encoder(config)

    def load_data(self, config: TrainConfig) -> Sequence[Any]:
        """The training examples (default: the corpus's sentences, `dclr.data.corpus`)."""
        from dclr.data.corpus import load_corpus

        return load_corpus(config.data.corpus, config.data.data_dir, config.data.column)

    def collate(
        self, run: PreparedRun, examples: Sequence[Any]
    ) -> tuple[dict[str, Any], torch.Tensor | None]:
        """Sentences -> one tokenization (n rows), no labels."""
        limit = run.config.model.max_length
        return run.model.tokenize(list(examples), max_length=limit), None  # type: ignore[operator]

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        """The objective around `model` (`run.model`, DDP-wrapped under torchrun)."""
        raise NotImplementedError

    # ---- hooks --------------------------------------------------------------------------------
    def dev_evaluator(self, run: PreparedRun) -> Evaluator | None:
        """Called every `eval_steps` on rank 0; its "metric" picks `best/`. None: never."""
        return sts_dev_evaluator(run.config) if run.config.run.eval_steps > 0 else None

    def export(self, model: nn.Module, path: Path, extra: dict[str, Any]) -> Path:
        """Write an inference model (no training-only parts) to `path`."""
        from dclr.models.export import save_encoder

        return save_encoder(model, path, extra=extra)  # type: ignore[arg-type]

    def inference_pooler(self, config: TrainConfig) -> str:
        """The pooler the exported model encodes with (with an MLP head, [CLS] before it, as
        SimCSE evaluates)."""
        if config.model.mlp_head:
            return "cls_before_pooler"
        return config.model.eval_pooler or config.model.pooler

    def evaluate_start(
        self, config: TrainConfig, run: PreparedRun | None = None
    ) -> dict[str, float] | None:
        """The starting model's test scores ("before"), or None; `run`: the prepared run about
        to train (None for a schedule, whose start is scored once for all its stages)."""
        if not config.run.test_eval:
            return None
        from dclr.evaluation.scores import starting_scores

        pooler = self.inference_pooler(config)
        return starting_scores(config.model.name, pooler, config.data.data_dir)

    def evaluate_final(self, config: TrainConfig, result: TrainResult) -> dict[str, Any]:
        """Test results of the trained model, merged into results.json (e.g. {"after": ...})."""
        if not config.run.test_eval:
            return {}
        from dclr.evaluation.scores import evaluate_model

        pooler = self.inference_pooler(config)
        after = evaluate_model(
            str(result.best_dir), pooler, config.data.data_dir, "encode STS (after: best model)"
        )
        return {"after": after}

    def card_settings(self, config: TrainConfig) -> list[str]:
        """The flat option names a model card lists besides the common ones: every field of
        this method's own section (so a new method's card needs no edit elsewhere)."""
        import dataclasses

        section = config.sections.get(self.name)
        if section is None or not dataclasses.is_dataclass(section):
            return []
        return [f.name for f in dataclasses.fields(section)]

    def describe(self, run: PreparedRun) -> dict[str, Any]:
        """Extra fields for results.json (e.g. DualCSE's encoder kind)."""
        return {}

    def stages(self, config: TrainConfig) -> list[TrainConfig]:
        """The runs of a schedule, in order (most methods: one)."""
        return [config]
