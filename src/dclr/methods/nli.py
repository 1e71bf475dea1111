"""Supervised NLI training as a method: supervised SimCSE, the NLI head, ConSERT's joint objective
and its two-stage schedules (`sup_then_unsup`, `joint_then_unsup`).

The recipe names the contrastive method used by the joint objective and by the unsupervised second
stage (`nli.contrastive: consert`); that method's own section holds its options (views, tau, ...).
It is any registered `ContrastiveMethod`, built-in or installed: the driver looks it up by name
with the run's own (`PreparedRun.methods`; a schedule's stages, `dclr.driver.resolve`), and this
module never looks a method up itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr import distributed as dist
from dclr.errors import ConfigError
from dclr.methods.base import Method
from dclr.methods.simcse import ContrastiveMethod
from dclr.options.contrastive import ADVERSARIAL_NEEDS_LABELS, ContrastiveSection
from dclr.options.nli import SUPERVISED_STAGE, TWO_STAGE, NLISection

if TYPE_CHECKING:
    from dclr.contract import PreparedRun
    from dclr.options.config import TrainConfig


def load_nli_examples(config: TrainConfig) -> list[Any]:
    """The labelled examples: NliTriples (supervised SimCSE) or NliPairs (NLI head, joint)."""
    from dclr.data.nli import nli_triples, read_senteval_nli, read_simcse_csv

    section: NLISection = config.section("nli")
    path = Path(section.nli_data or "")
    if not path.exists() and not path.is_absolute():
        from dclr.data.paths import resolve_data_dir

        path = resolve_data_dir(config.data.data_dir) / path  # e.g. senteval/SNLI
    wants_pairs = section.schedule == "joint" or section.supervised_loss == "nli_head"
    if path.is_dir():
        pairs = read_senteval_nli(path, section.nli_split)
        return pairs if wants_pairs else nli_triples(pairs)
    triples = read_simcse_csv(path)
    if wants_pairs:
        raise ConfigError(
            f"{path}: the NLI head needs labelled pairs; a SimCSE CSV has none "
            "(use a SentEval-layout folder with s1/s2/labels files)"
        )
    return triples


def nli_texts(examples: Sequence[Any]) -> tuple[list[str], torch.Tensor | None]:
    """Sentences to encode and labels (n,) or None: NliTriples give [anchors; positives; hard
    negatives]; NliPairs give [premises; hypotheses] and their labels."""
    from dclr.data.nli import NliTriple

    if isinstance(examples[0], NliTriple):
        texts = [t.anchor for t in examples] + [t.positive for t in examples]
        if examples[0].hard_negative is not None:
            texts += [str(t.hard_negative) for t in examples]
        return texts, None
    texts = [p.premise for p in examples] + [p.hypothesis for p in examples]
    return texts, torch.tensor([p.label for p in examples])


def has_hard_negatives(examples: Sequence[Any]) -> bool:
    return getattr(examples[0], "hard_negative", None) is not None


def contrastive_part(run: PreparedRun, name: str) -> ContrastiveMethod:
    """The contrastive method `nli.contrastive` names (the joint objective's part), as the driver
    resolved it with the run (`PreparedRun.methods`): a built-in or an installed one alike."""
    method = run.methods.get(name)
    if method is None:
        raise ConfigError(
            f"nli.contrastive: method {name!r} was not handed down with the run (prepare it with "
            "dclr.driver, which resolves the method of every section the config holds)"
        )
    if not isinstance(method, ContrastiveMethod):
        raise ConfigError(
            f"nli.contrastive: method {name!r} is not a contrastive method "
            "(a dclr.methods.simcse.ContrastiveMethod, whose `loss_module` NLI builds)"
        )
    return method


def supervised_objective(
    config: TrainConfig,
    model: Any,
    hidden_size: int,
    kind: str,
    hard_negatives: bool,
    temperature: float,
    contrastive_method: ContrastiveMethod | None = None,
) -> nn.Module:
    """A `SupervisedNLILoss` of `kind` (simcse | nli_head | joint), its head seeded from the run;
    the joint kind's contrastive part is `contrastive_method`'s loss, configured by its section."""
    from dclr.losses.supervised import AdversarialView, NLIHead, SupervisedNLILoss
    from dclr.views.pair import ViewSpec

    head = None
    if kind in ("nli_head", "joint"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.run.seed)  # the head's initialisation
            head = NLIHead(hidden_size)
    contrastive, adversarial = None, None
    if kind == "joint":
        assert contrastive_method is not None
        views: ContrastiveSection = config.section(contrastive_method.name)
        if "adversarial" in (views.view1, views.view2):
            first = views.view1 == "adversarial"
            other = ViewSpec(*((views.view2, views.view2_rate) if first else (views.view1, views.view1_rate)))  # fmt: skip
            epsilon = config.section("nli").adversarial_epsilon
            adversarial = AdversarialView(
                epsilon, other, first, seed=config.run.seed, rank=dist.rank()
            )
            views = dataclasses.replace(views, view1="dropout", view2="dropout")
        contrastive = contrastive_method.loss_module(config, model, views, None)
    return SupervisedNLILoss(
        model,
        kind,  # type: ignore[arg-type]
        temperature=temperature,
        head=head,
        contrastive=contrastive,
        joint_weight=config.section("nli").joint_weight if kind == "joint" else 1.0,
        hard_negatives=hard_negatives,
        adversarial=adversarial,
    )


class NLI(Method):
    name = "nli"
    title = "NLI-supervised contrastive learning (ConSERT / SimCSE)"
    label = "NLI-supervised"
    section = NLISection

    def section_names(self, values: dict[str, Any]) -> list[str]:
        contrastive = (values.get("nli") or {}).get("contrastive", "simcse")
        return ["nli", str(contrastive)]

    def validate(self, config: TrainConfig) -> None:
        """The contrastive part's options that only NLI training can judge: an adversarial view
        needs the joint schedule's labels; what the part's section refuses as another method's
        part (`ContrastiveSection.validate_as_part`: DCLR's phi calibration)."""
        section: NLISection = config.section("nli")
        contrastive: ContrastiveSection = config.section(section.contrastive)
        if contrastive.adversarial and section.schedule != "joint":
            raise ConfigError(ADVERSARIAL_NEEDS_LABELS)
        contrastive.validate_as_part(config)

    def load_data(self, config: TrainConfig) -> Sequence[Any]:
        return load_nli_examples(config)

    def collate(
        self, run: PreparedRun, examples: Sequence[Any]
    ) -> tuple[dict[str, Any], torch.Tensor | None]:
        texts, labels = nli_texts(examples)
        limit = run.config.model.max_length
        return run.model.tokenize(texts, max_length=limit), labels  # type: ignore[operator]

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        config = run.config
        section: NLISection = config.section("nli")
        if section.schedule in TWO_STAGE:
            raise ConfigError(
                f"schedule {section.schedule!r} has two stages: run it with "
                "dclr.driver.run_schedule (or `dclr train`)"
            )
        kind = "joint" if section.schedule == "joint" else section.supervised_loss
        part = contrastive_part(run, section.contrastive) if kind == "joint" else None
        encoder: Any = run.model  # the model itself, never wrapped (`model` may be)
        hidden, hard = encoder.hidden_size, has_hard_negatives(run.data)
        loss = supervised_objective(config, model, hidden, kind, hard, section.temperature, part)
        return loss.to(run.device)

    def stages(self, config: TrainConfig) -> list[TrainConfig]:
        """`sup_then_unsup` / `joint_then_unsup`: stage 1 (`sup` / `joint`) on the NLI data writes
        `<output_dir>/stage-1`; stage 2 trains the `contrastive` method from its final model on
        `data.corpus` in `<output_dir>/stage-2` (the driver checks it with that method, looked up
        by name as every method is). Other schedules are one stage."""
        from dclr.options.config import build_config

        section: NLISection = config.section("nli")
        if section.schedule not in TWO_STAGE:
            return [config]
        root = Path(config.run.output_dir)
        first = config.updated(
            {
                "nli.schedule": SUPERVISED_STAGE[section.schedule],
                "nli.second_stage_learning_rate": None,  # stage 2's own options
                "nli.second_stage_epochs": None,
                "run.output_dir": str(root / "stage-1"),
            }
        )
        values = config.to_dict()
        values.pop("nli")
        values["method"] = section.contrastive
        values["model"]["name"] = str(root / "stage-1" / "final")
        values["run"]["output_dir"] = str(root / "stage-2")
        if section.second_stage_learning_rate is not None:
            values["optimisation"]["learning_rate"] = section.second_stage_learning_rate
        if section.second_stage_epochs is not None:
            values["optimisation"]["epochs"] = section.second_stage_epochs
            values["optimisation"]["max_steps"] = None
        # stage 2 reads the contrastive method's section only (this config holds it already)
        own = {name: cls for name, cls in config.section_types().items() if name != "nli"}
        second = build_config(values, lambda _m, _n: own, "stage 2").validate()
        return [first, second]


NLI_METHOD = NLI()
