"""A run prepared once, before its first step: config + method -> `dclr.contract.PreparedRun`.

`prepare_run` checks the config against the method and the processes (torchrun), picks the
device, builds the model, loads the examples and prepares them (`data.dedup`, the few-shot subset,
`data.small_data`), and plans the batches (`dclr.data.sampler`: random or paraphrase-dense, with
or without duplicates) and the number of steps. The driver calls it once per run and hands the
result to the method's hooks and to the loop; nothing after it loads or plans the data again.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from dclr import distributed as dist
from dclr.contract import MethodPlugin, PreparedRun
from dclr.data.sampler import training_batches
from dclr.data.sampling import few_shot_indices, repeat_to, take
from dclr.data.text import clip_all
from dclr.errors import ConfigError
from dclr.options.config import TrainConfig


def prepare_run(
    config: TrainConfig,
    method: MethodPlugin,
    model: torch.nn.Module | None = None,
    data: Sequence[Any] | None = None,
    methods: Mapping[str, MethodPlugin] | None = None,
) -> PreparedRun:
    """`config` prepared to train with `method` (its plugin, resolved by the caller); `model` and
    `data` may be injected (tests, experiments) in place of the method's. `methods`: the method
    of each of the config's sections, by name (`PreparedRun.methods`; `method` alone if None)."""
    if method.name != config.method:
        raise ConfigError(f"got method {method.name!r} for a config of method {config.method!r}")
    config = config.validate()
    method.check(config)
    if len(method.stages(config)) > 1:
        raise ConfigError(
            f"method {config.method!r} runs several stages here: run it with "
            "dclr.driver.run_schedule (or `dclr train`)"
        )
    dist.init_from_env()
    rank, world = dist.rank(), dist.world_size()
    batch_size = config.optimisation.batch_size
    if batch_size % world:
        raise ConfigError(f"batch_size {batch_size} is not divisible by {world} ranks")
    if world > 1 and not method.distributed:
        raise ConfigError(f"method {config.method!r} runs in one process (no DDP support yet)")
    device = torch.device(
        f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    )
    model = (model or method.build_model(config)).to(device)
    packing = config.model.packing  # auto: on a CPU, unless compiled (packed batches vary in
    # shape, and each new shape compiles again)
    compiled = config.optimisation.compile != "off"
    if packing == "on" or (packing == "auto" and device.type == "cpu" and not compiled):
        enable = getattr(model, "enable_packing", None)
        if enable is not None:
            enable()
    loaded = data if data is not None else method.load_data(config)
    examples, dropped = prepared(loaded, config)
    report = None
    if method.sentence_batches and rank == 0:  # one rank tokenizes the sample
        report = sentence_report(examples, loaded, dropped, model, config.model.max_length)
    examples, batch_size = fit_small_data(examples, batch_size, config, world)
    d = config.data  # random batches, or paraphrase-dense ones (the data gains pair sentences)
    examples, plan = training_batches(
        examples, batch_size, config.run.seed, d.paraphrase_density,
        d.paraphrase_sources, d.data_dir, d.no_duplicates,
    )  # fmt: skip
    opt = config.optimisation
    total_steps = opt.max_steps or math.ceil(opt.epochs * plan.steps_per_epoch)
    run_dir = Path(config.run.output_dir)
    return PreparedRun(
        config, method, model, examples, plan, batch_size, total_steps, device, run_dir,
        rank, world, report, {**(methods or {}), method.name: method},
    )  # fmt: skip


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
            f"the training data ({config.data.corpus}) has {n} examples, fewer than one batch of "
            f"{batch_size}; add `--set data.small_data=shrink_batch` (train on all of them each "
            "step) or `--set data.small_data=repeat`, or a smaller `--set "
            "optimisation.batch_size=N` (data.small_data and optimisation.batch_size in a recipe)"
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


def sentence_report(
    examples: Sequence[Any],
    loaded: Sequence[Any],
    dropped: int,
    model: torch.nn.Module,
    max_length: int,
) -> dict[str, Any]:
    """`dclr.data.report.data_report` of the sentences a run trains on (`examples`, prepared from
    `loaded`), their tokens counted with the model's tokenizer."""
    from dclr.data.report import data_report

    tokenizer = getattr(model, "tokenizer", None)
    counts = None
    if tokenizer is not None:

        def counts(texts: list[str]) -> list[int]:
            # only "longer than max_length?" is reported: a text cut to what holds
            # max_length + 1 tokens answers it in bounded memory (dclr.data.text)
            texts = clip_all(texts, max_length + 1)
            ids = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
            return [len(x) for x in ids]

    skipped = int(getattr(loaded, "n_skipped", 0))
    report = data_report(examples, skipped, counts, max_length, dropped)
    cut = int(getattr(loaded, "n_cut", 0))  # lines over the reader's bound (dclr.data.corpus)
    if cut:
        report["long_lines_cut"] = cut
    return report
