"""`dclr dualcse ...`: train, encode by semantics, implicitness, RTE and EIS evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dclr.errors import DclrError

app = typer.Typer(
    help="DualCSE: an explicit and an implicit embedding per sentence (Oda et al., 2025).",
    no_args_is_help=True,
)
console = Console(stderr=True)
out = Console()

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Folder holding inli/ (or INLI itself); else $DCLR_DATA_DIR."),
]
ModelArg = Annotated[
    str,
    typer.Argument(help="DualCSE model folder (from `dclr dualcse train`)."),
]
BatchSize = Annotated[int, typer.Option(help="Sentences per forward pass.")]
SemanticsOpt = Annotated[
    str, typer.Option(help="explicit (r, literal meaning) or implicit (u, implied meaning).")
]


def register(parent: typer.Typer) -> None:
    """Add the `dualcse` command group to the `dclr` app."""
    parent.add_typer(app, name="dualcse")


def _fail(err: Exception) -> None:
    console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _quiet_hf() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def rte_table(title: str, columns: dict[str, dict[str, float]]) -> Table:
    """Accuracy x100 per hypothesis type (rows) for each model (columns)."""
    from dclr.dualcse.data import HYPOTHESIS_TYPES

    table = Table(title=title)
    table.add_column("hypothesis")
    for name in columns:
        table.add_column(name, justify="right", overflow="fold")  # model paths shown whole
    for key in [*HYPOTHESIS_TYPES, "avg"]:
        table.add_row(key, *(f"{c[key]:.2f}" for c in columns.values()))
    table.add_row("threshold (val)", *(f"{c['threshold']:.3f}" for c in columns.values()))
    return table


@app.command("train")
def train_cmd(
    recipe: Annotated[
        Path | None, typer.Argument(help="YAML recipe (see recipes/dualcse/).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a recipe option: --set batch_size=16 (repeatable)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Backbone folder, hub id or package.")] = None,
    data_dir: DataDir = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Run folder.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after N steps.")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Resume the run in this folder from its newest checkpoint."),
    ] = None,
) -> None:
    """Train DualCSE (or the supervised-SimCSE baseline) on INLI; prints the RTE table."""
    _quiet_hf()
    from dclr.dualcse.config import load_dualcse_config
    from dclr.dualcse.train import DualCSETrainer
    from dclr.training.config import parse_overrides

    try:
        overrides = parse_overrides(set_ or [])
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
        config = load_dualcse_config(recipe, overrides)
        result = DualCSETrainer(config).train(resume=resume is not None)
    except DclrError as err:
        _fail(err)
    console.print(
        f"{result.steps} steps in {result.train_seconds:.0f} s; model: {result.final_dir}"
    )
    if result.rte is not None:
        name = config.method if config.method != "dualcse" else f"dualcse-{config.encoder}"
        out.print(rte_table("RTE on INLI test, accuracy x100", {name: result.rte}))


@app.command("encode")
def encode_cmd(
    model: ModelArg,
    input_file: Annotated[Path, typer.Argument(help="UTF-8 text, one sentence per line.")],
    output: Annotated[Path, typer.Argument(help="Where to write the (n, d) float32 .npy.")],
    semantics: SemanticsOpt = "explicit",
    batch_size: BatchSize = 128,
    normalize: Annotated[bool, typer.Option(help="L2-normalise the vectors.")] = False,
) -> None:
    """Encode a file of sentences (blank lines skipped) with the explicit or implicit embedding."""
    _quiet_hf()
    import numpy as np

    from dclr.data.corpus import TextFileCorpus
    from dclr.dualcse.model import DualEncoder, check_semantics

    try:
        check_semantics(semantics)
        corpus = TextFileCorpus(input_file)
        encoder = DualEncoder.from_pretrained(model)
        vectors = encoder.encode(
            list(corpus), semantics, batch_size=batch_size, normalize=normalize, show_progress=True
        )
    except DclrError as err:
        _fail(err)
    output.parent.mkdir(parents=True, exist_ok=True)
    np.save(output, vectors)
    console.print(f"wrote {vectors.shape} {semantics} vectors to {output}")


@app.command("implicitness")
def implicitness_cmd(
    model: ModelArg,
    input_file: Annotated[Path, typer.Argument(help="UTF-8 text, one sentence per line.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write `score<TAB>sentence` lines here.")
    ] = None,
    batch_size: BatchSize = 128,
) -> None:
    """Implicitness 1 - cos(r, u) of each sentence (higher = more implicit), one per line."""
    _quiet_hf()
    from dclr.data.corpus import TextFileCorpus
    from dclr.dualcse.model import DualEncoder

    try:
        corpus = TextFileCorpus(input_file)
        sentences = list(corpus)
        scores = DualEncoder.from_pretrained(model).implicitness(sentences, batch_size=batch_size)
    except DclrError as err:
        _fail(err)
    text = "".join(f"{score:.6f}\t{s}\n" for score, s in zip(scores, sentences, strict=True))
    if output is None:
        out.print(text, end="", highlight=False, markup=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {len(sentences)} scores to {output}")


@app.command("rte")
def rte_cmd(
    models: Annotated[
        list[str],
        typer.Argument(
            help="Models to compare: DualCSE folders, or any one-embedding model (folder, hub "
            "id, python-package:NAME) evaluated with r = u."
        ),
    ],
    data_dir: DataDir = None,
    pooler: Annotated[
        str | None, typer.Option(help="Pooler of one-embedding models (default: as saved).")
    ] = None,
    batch_size: BatchSize = 128,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write all results here.")] = None,
) -> None:
    """RTE on INLI: threshold on val, accuracy per hypothesis type on test (x100)."""
    _quiet_hf()
    from dclr.dualcse.evaluate import RteEvaluator, load_embedder

    try:
        evaluator = RteEvaluator.from_data_dir(data_dir)
        results = {
            name: evaluator(load_embedder(name, pooler), batch_size, show_progress=True)
            for name in models
        }
    except DclrError as err:
        _fail(err)
    out.print(rte_table("RTE on INLI test, accuracy x100", results))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2) + "\n")


@app.command("eis")
def eis_cmd(
    model: Annotated[str, typer.Argument(help="DualCSE folder (or a one-embedding model).")],
    pairs_file: Annotated[
        Path,
        typer.Argument(help="TSV: `more-implicit sentence<TAB>more-explicit sentence` per line."),
    ],
    batch_size: BatchSize = 128,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result here.")] = None,
) -> None:
    """EIS: share of pairs whose implicitness scores are in the right order (ties count half)."""
    _quiet_hf()
    from dclr.dualcse.evaluate import EisEvaluator, load_embedder

    try:
        result = EisEvaluator(pairs_file)(load_embedder(model), batch_size)
    except DclrError as err:
        _fail(err)
    out.print(
        f"EIS accuracy {result['accuracy']:.2f} on {result['n_pairs']} pairs "
        f"({result['ties']} ties)"
    )
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"model": model, **result}, indent=2) + "\n")
