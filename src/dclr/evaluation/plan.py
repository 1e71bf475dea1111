"""What `dclr eval` evaluates, decided once from its options, and the run of that plan.

`EvalPlan.from_options` reads the command's options (--mode, --tasks, --task-set, --retrieval,
--split, --index, --transfer-mode, --precision) into a plan: the STS tasks, the SentEval transfer
tasks, the retrieval targets and the precision, with the command's checks and messages.
`run_plan` loads the model, runs STS, transfer and retrieval as planned and returns the results
as `dclr eval --json` writes them (one flat dict); it prints nothing. `dclr.evaluate` is the
Python call that does both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dclr.data.retrieval_tasks import BUILTIN
from dclr.data.senteval_text import StsText, check_sts_text
from dclr.data.sts import STS_TASKS
from dclr.data.transfer import TRANSFER_TASKS
from dclr.errors import ConfigError
from dclr.evaluation.retrieval_eval import evaluate_target
from dclr.evaluation.scores import checked_batch_size, evaluation_batch_size
from dclr.evaluation.sts import DEV_TASKS, EncodeFn, Mode, StsEvaluator
from dclr.evaluation.transfer import SETTINGS, TransferEvaluator, TransferMode
from dclr.indexing.fingerprint import model_fingerprint
from dclr.indexing.index import read_meta
from dclr.models.precision import load_inference_encoder

TASK_ALIASES = {"SST-2": "SST2", "STS-B": "STSBenchmark", "STSB": "STSBenchmark",
                "SICK-R": "SICKRelatedness"}  # fmt: skip
TASK_SETS = {
    "sts": (list(STS_TASKS), []),
    "transfer": ([], list(TRANSFER_TASKS)),
    "full": (list(STS_TASKS), list(TRANSFER_TASKS)),
}
INDEX_NEEDS_RETRIEVAL = "--index needs --retrieval DIR: the BEIR folder its corpus came from"
RETRIEVAL_TASK_SET = "retrieval"  # --task-set retrieval: the built-in retrieval tasks alone
# Called after each part of a run ("sts", "transfer", "retrieval") with the results so far.
PartDone = Callable[[str, dict[str, Any]], None]


def split_tasks(tasks: str | None, task_set: str | None) -> tuple[list[str], list[str]]:
    """(STS tasks, transfer tasks) from SimCSE-style --task-set / --tasks (--task-set wins)."""
    if task_set is not None:
        if task_set not in TASK_SETS:
            raise ConfigError(
                f"--task-set (task_set=) must be sts, transfer, full or {RETRIEVAL_TASK_SET}, "
                f"got {task_set!r}"
            )
        sts_tasks, transfer_tasks = TASK_SETS[task_set]
        return list(sts_tasks), list(transfer_tasks)
    if not tasks:
        return list(STS_TASKS), []
    known = {t.lower(): t for t in (*STS_TASKS, *TRANSFER_TASKS)}
    known.update({a.lower(): t for a, t in TASK_ALIASES.items()})
    sts: list[str] = []
    transfer: list[str] = []
    for name in (t.strip() for t in tasks.replace(" ", ",").split(",") if t.strip()):
        task = known.get(name.lower())
        if task is None:
            raise ConfigError(
                f"unknown task {name!r}; choose from {', '.join((*STS_TASKS, *TRANSFER_TASKS))}"
            )
        (sts if task in STS_TASKS else transfer).append(task)
    return sts, transfer


@dataclass(frozen=True)
class RetrievalTarget:
    """One retrieval evaluation: a BEIR `folder`'s `split`, or (no folder) the built-in task
    `label` on `split`. `label` names its keys in the results (`retrieval/<label>/<metric>`)."""

    label: str
    folder: Path | None
    split: str


@dataclass(frozen=True)
class EvalPlan:
    """What one evaluation runs.

    `sts_tasks` on their `mode` split (test | dev); `transfer_tasks` with SimCSE's
    `transfer_mode` classifier settings (fasttest | test); the `retrieval` targets, searched in
    `index` (a `dclr index build` of the one target folder's corpus.jsonl) or exactly; the model
    loaded at `precision` (fp32 | int8). An empty part is skipped. `sts_text` and
    `released_geometry`: `StsEvaluator`'s `text` and `released_geometry`.
    """

    mode: Mode = "test"
    sts_tasks: tuple[str, ...] = STS_TASKS
    transfer_tasks: tuple[str, ...] = ()
    transfer_mode: TransferMode = "fasttest"
    retrieval: tuple[RetrievalTarget, ...] = ()
    index: Path | None = None
    precision: str = "fp32"
    sts_text: StsText = "raw"
    released_geometry: bool = False

    def __post_init__(self) -> None:
        check_modes(self.mode, self.transfer_mode)
        check_sts_text(self.sts_text)
        if self.index is not None and not (
            self.retrieval and all(t.folder is not None for t in self.retrieval)
        ):
            raise ConfigError(INDEX_NEEDS_RETRIEVAL)

    @classmethod
    def from_options(
        cls,
        mode: str = "test",
        tasks: str | Sequence[str] | None = None,
        task_set: str | None = None,
        retrieval: str | Path | None = None,
        split: str = "test",
        index: str | Path | None = None,
        transfer_mode: str = "fasttest",
        precision: str | None = None,
        sts_text: str = "raw",
        released_geometry: bool = False,
    ) -> EvalPlan:
        """The plan of `dclr eval`'s options (see `dclr eval --help`): STS by default (the 7
        test tasks, or STS-B and SICK-R dev with `mode="dev"`); `tasks` (comma-separated or a
        list, aliases such as STS-B and SST-2 accepted) or `task_set` (sts | transfer | full |
        retrieval; wins over `tasks`) choose others; `retrieval` alone evaluates only that BEIR
        folder. `precision` defaults to the one `index` was built with, else fp32. `sts_text`
        (raw | senteval) and `released_geometry`: `StsEvaluator`'s."""
        check_modes(mode, transfer_mode)
        if index is not None and retrieval is None:
            raise ConfigError(INDEX_NEEDS_RETRIEVAL)
        if tasks is not None and not isinstance(tasks, str):
            tasks = ",".join(tasks)
        builtin_retrieval = task_set == RETRIEVAL_TASK_SET
        only_retrieval = builtin_retrieval or (retrieval is not None and not (tasks or task_set))
        sts_tasks, transfer_tasks = ([], []) if only_retrieval else split_tasks(tasks, task_set)
        if mode == "dev" and tasks is None and task_set is None and not only_retrieval:
            sts_tasks = list(DEV_TASKS)
        targets: list[RetrievalTarget] = []
        if retrieval is not None:
            folder = Path(retrieval)
            targets = [RetrievalTarget(folder.name or str(folder), folder, split)]
        elif builtin_retrieval:
            targets = [RetrievalTarget(name, None, mode) for name in BUILTIN]
        if precision is None:
            precision = index_precision(index) if index is not None else "fp32"
        return cls(
            mode=mode,  # type: ignore[arg-type]  # checked above
            sts_tasks=tuple(sts_tasks),
            transfer_tasks=tuple(transfer_tasks),
            transfer_mode=transfer_mode,  # type: ignore[arg-type]  # checked above
            retrieval=tuple(targets),
            index=None if index is None else Path(index),
            precision=precision,
            sts_text=sts_text,  # type: ignore[arg-type]  # checked in __post_init__
            released_geometry=released_geometry,
        )


def check_modes(mode: str, transfer_mode: str) -> None:
    if mode not in ("test", "dev"):
        raise ConfigError(f"--mode (mode=) must be test or dev, got {mode!r}")
    if transfer_mode not in SETTINGS:
        raise ConfigError(
            f"--transfer-mode (transfer_mode=) must be fasttest or test, got {transfer_mode!r}"
        )


def index_precision(index: str | Path) -> str:
    """The precision a `dclr index build` folder was encoded at (fp32 when it does not say)."""
    return str(read_meta(index).get("precision", "fp32"))


def run_plan(
    plan: EvalPlan,
    model: str | Path,
    data_dir: str | Path | None = None,
    pooler: str | None = None,
    packing: bool = True,
    batch_size: int | None = None,
    show_progress: bool = False,
    on_part: PartDone | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Run `plan` on `model` (anything `dclr.load_encoder` takes, loaded at the plan's precision,
    `packing` as `load_inference_encoder` does it) and return the results as `dclr eval --json`
    writes them: model, mode, pooler, precision (when not fp32), the STS scores and bookkeeping
    as `StsEvaluator` names them, transfer_mode and `transfer/<key>`, `retrieval/<label>/<key>`.

    The data of every part is read before the model loads, so a missing file fails fast.
    `show_progress` draws a bar per encoding; `on_part(part, results)` is called as each of
    "sts", "transfer" and "retrieval" finishes, with the results so far (the CLI renders them).
    `device`: auto (a GPU when one is visible) | cpu | cuda."""
    checked_batch_size(batch_size)  # before anything loads
    sts_eval = None
    if plan.sts_tasks:
        sts_eval = StsEvaluator(
            data_dir,
            mode=plan.mode,
            tasks=plan.sts_tasks,
            released_geometry=plan.released_geometry,
            text=plan.sts_text,
        )
    transfer_eval = (
        TransferEvaluator(data_dir, mode=plan.transfer_mode, tasks=plan.transfer_tasks)
        if plan.transfer_tasks
        else None
    )
    encoder = load_inference_encoder(model, pooler, plan.precision, packing, device)
    size = batch_size or evaluation_batch_size(encoder)  # 128 on a CPU, 512 on a GPU
    results: dict[str, Any] = {"model": str(model), "mode": plan.mode, "pooler": encoder.pooler}
    if plan.precision != "fp32":
        results["precision"] = plan.precision
    if plan.sts_text != "raw":
        results["sts_text"] = plan.sts_text

    def encoding(label: str) -> EncodeFn:
        return lambda s: encoder.encode(  # raw vectors, as SentEval scores them
            s, batch_size=size, normalize=False, show_progress=show_progress, progress_label=label
        )

    def done(part: str) -> None:
        if on_part is not None:
            on_part(part, results)

    if sts_eval is not None:
        results.update(sts_eval(encoding("encode STS")))
        done("sts")
    if transfer_eval is not None:
        transfer = transfer_eval(encoding("encode transfer"))
        results["transfer_mode"] = plan.transfer_mode
        results.update({f"transfer/{k}": v for k, v in transfer.items()})
        done("transfer")
    if plan.retrieval:
        # one fingerprint (a probe encoding) for every folder searched in the index
        fingerprint = model_fingerprint(encoder) if plan.index is not None else None
        for target in plan.retrieval:
            scores = evaluate_target(
                encoding("encode"),
                target.folder,
                None if target.folder is not None else target.label,
                target.split,
                data_dir,
                plan.index,
                fingerprint,
            )
            results.update({f"retrieval/{target.label}/{k}": v for k, v in scores.items()})
        done("retrieval")
    return results
