"""DualCSE (Oda et al., 2025) and its single-embedding baseline, supervised SimCSE on INLI, as
methods. `dclr.dualcse` keeps the model (`DualEncoder`), the INLI data and the RTE/EIS evaluation.

Both train on INLI train (from `data.data_dir`) and, with `rte_eval`, finish with the RTE table on
INLI test. Their recipes live in recipes/dualcse/.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr.methods.base import Method, build_encoder, dropout_overrides
from dclr.options.dualcse import DualCSESection, SupervisedINLISection

if TYPE_CHECKING:
    from dclr.contract import PreparedRun, TrainResult
    from dclr.options.config import TrainConfig

# Every DualCSE-family recipe starts from these. Our choices, not the paper's: it gives only the
# backbones, batch sizes, learning rates and tau (../shared/papers/dualcse.txt l.110-113).
INLI_DEFAULTS: dict[str, Any] = {
    "model": {"pooler": "mean", "mlp_head": False, "max_length": 80, "packing": "off"},
    "optimisation": {"learning_rate": 5e-5},  # paper: 5e-5 cross, 3e-5 bi
    "run": {"eval_steps": 0, "test_eval": False, "save_steps": 100, "output_dir": "runs/dualcse"},
}


def column_major(items: Sequence[tuple[str, ...]]) -> list[str]:
    """Tuples of k sentences -> k blocks: all first sentences, then all second ones, ..."""
    return [s for column in zip(*items, strict=True) for s in column]


class INLIMethod(Method):
    """Shared by DualCSE and its baseline: INLI data, RTE at the end, no STS evaluation."""

    defaults = INLI_DEFAULTS

    def load_data(self, config: TrainConfig) -> Sequence[Any]:
        from dclr.data.inli import inli_split, read_inli

        return self.items(config, read_inli(inli_split(config.data.data_dir, "train")))

    def items(self, config: TrainConfig, examples: Sequence[Any]) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def dev_evaluator(self, run: PreparedRun) -> None:
        return None

    def evaluate_start(self, config: TrainConfig, run: PreparedRun | None = None) -> None:
        return None

    def evaluate_final(self, config: TrainConfig, result: TrainResult) -> dict[str, Any]:
        """{"rte_test": accuracies} of the final model (also logged to metrics.jsonl)."""
        section = config.section(self.name)
        if not section.rte_eval:
            return {"rte_test": None}
        from dclr.dualcse.evaluate import RteEvaluator, load_embedder
        from dclr.training.tracking import MetricsLog

        evaluator = RteEvaluator.from_data_dir(config.data.data_dir)
        rte = evaluator(load_embedder(result.final_dir), batch_size=section.eval_batch_size)
        log = MetricsLog(Path(config.run.output_dir), resume_step=result.steps, tensorboard=False)
        log.log(result.steps, "rte_test", rte)
        log.close()
        return {"rte_test": rte}


class DualCSE(INLIMethod):
    name = "dualcse"
    title = "DualCSE, explicit and implicit sentence embeddings"
    label = "DualCSE"
    section = DualCSESection

    def items(self, config: TrainConfig, examples: Sequence[Any]) -> list[tuple[str, ...]]:
        """(premise, explicit, implied, contradiction) per premise."""
        return [(e.premise, e.explicit, e.implied, e.contradiction) for e in examples]

    def build_model(self, config: TrainConfig) -> nn.Module:
        from dclr.dualcse.model import DualEncoder

        torch.manual_seed(config.run.seed)
        kind = config.section(self.name).encoder
        overrides = dropout_overrides(config)
        return DualEncoder.build(config.model.name, kind, config.model.pooler, **overrides)

    def collate(self, run: PreparedRun, examples: Sequence[Any]) -> tuple[dict[str, Any], None]:
        """{"explicit": tokens, "implicit": tokens} of the 4n sentences, each as its semantics."""
        from dclr.dualcse.model import SEMANTICS

        sentences, limit, model = column_major(examples), run.config.model.max_length, run.model
        return {s: model.tokenize(sentences, s, limit) for s in SEMANTICS}, None  # type: ignore[operator]

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        from dclr.losses.dualcse import DualCSELoss

        section: DualCSESection = run.config.section(self.name)
        return DualCSELoss(model, section)

    def export(self, model: nn.Module, path: Path, extra: dict[str, Any]) -> Path:
        return model.save(path, extra={**extra, "method": self.name})  # type: ignore[operator]

    def describe(self, run: PreparedRun) -> dict[str, Any]:
        return {"encoder": run.config.section(self.name).encoder}


class SupervisedSimCSEOnINLI(INLIMethod):
    name = "simcse_sup"
    title = "supervised SimCSE on INLI (Gao et al., EMNLP 2021)"
    label = "supervised SimCSE (INLI)"
    section = SupervisedINLISection

    def items(self, config: TrainConfig, examples: Sequence[Any]) -> list[tuple[str, ...]]:
        """(anchor, positive, hard negative), one per entailment named by `sup_positives`."""
        wanted = config.section(self.name).sup_positives
        kinds = ("explicit", "implied") if wanted == "both" else (wanted,)
        return [(e.premise, e.hypothesis(k), e.contradiction) for e in examples for k in kinds]

    def build_model(self, config: TrainConfig) -> nn.Module:
        return build_encoder(config)

    def collate(self, run: PreparedRun, examples: Sequence[Any]) -> tuple[dict[str, Any], None]:
        """[anchors; positives; hard negatives] (3n sentences), one tokenization."""
        texts, limit = column_major(examples), run.config.model.max_length
        return run.model.tokenize(texts, max_length=limit), None  # type: ignore[operator]

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        from dclr.losses.supervised import SupervisedNLILoss

        temperature = run.config.section(self.name).temperature
        return SupervisedNLILoss(model, "simcse", temperature=temperature, hard_negatives=True)

    def export(self, model: nn.Module, path: Path, extra: dict[str, Any]) -> Path:
        from dclr.models.export import save_encoder

        return save_encoder(model, path, extra={**extra, "method": self.name})  # type: ignore[arg-type]

    def describe(self, run: PreparedRun) -> dict[str, Any]:
        return {"encoder": "single"}


DUALCSE = DualCSE()
SIMCSE_SUP_INLI = SupervisedSimCSEOnINLI()
