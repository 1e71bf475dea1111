"""`dclr dualcse ...`: train, encode by semantics, implicitness, RTE and EIS evaluation."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any

import typer

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
    rte_table,
    save_output,
    save_vectors,
)
from dclr.errors import DclrError

app = typer.Typer(
    help="DualCSE: an explicit and an implicit embedding per sentence (Oda et al., 2025).",
    no_args_is_help=True,
)

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
    for info in parent.registered_commands:  # `dclr dualcse train` is `dclr train`, kept for
        if info.name == "train":  # old scripts: one loop, one command
            app.command(
                "train",
                help="Same as `dclr train` with method dualcse when no recipe is given "
                "(DualCSE recipes: recipes/dualcse/).",
            )(_dualcse_default(info.callback))
    parent.add_typer(app, name="dualcse")


def _dualcse_default(callback: Any) -> Any:
    """`dclr train`, with `method: dualcse` when no recipe says otherwise (the old command's
    default)."""

    @functools.wraps(callback)
    def train(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("recipe") is None and kwargs.get("resume") is None:
            kwargs["set_"] = ["method=dualcse", *(kwargs.get("set_") or [])]
        return callback(*args, **kwargs)

    return train


@app.command("encode")
def encode_cmd(
    model: ModelArg,
    input_file: Annotated[
        Path, typer.Argument(help="UTF-8 text, one sentence per line, or a table (--column).")
    ],
    output: Annotated[Path, typer.Argument(help="Where to write the (n, d) float32 .npy.")],
    semantics: SemanticsOpt = "explicit",
    column: Column = None,
    input_format: InputFormatOpt = "auto",
    skip_blank: SkipBlankOpt = False,
    batch_size: BatchSize = 128,
    normalize: NormalizeOpt = None,
) -> None:
    """Encode a file of sentences with the explicit or implicit embedding: row i is line i (a blank
    line is encoded as the empty string, or left out with --skip-blank), read as `dclr encode`
    reads it."""
    quiet_hf()
    from dclr.data.readers import numbered_rows, open_source
    from dclr.dualcse.model import DualEncoder, check_semantics
    from dclr.evaluation.scores import checked_batch_size

    try:
        check_semantics(semantics)
        checked_batch_size(batch_size)
        parent_folder(npy_path(output))  # before the model loads: a bad path fails fast
        rows = numbered_rows(open_source(input_file, column, input_format), skip_blank)  # type: ignore[arg-type]
        encoder = DualEncoder.from_pretrained(model)
        vectors = encoder.encode(
            rows.texts, semantics, batch_size=batch_size, normalize=normalize, show_progress=True
        )
    except DclrError as err:
        fail(err)
    save_vectors(output, vectors, rows.numbers, rows.blank, skip_blank)


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
    quiet_hf()
    from dclr.data.corpus import TextFileCorpus
    from dclr.dualcse.model import DualEncoder

    try:
        corpus = TextFileCorpus(input_file)
        sentences = list(corpus)
        scores = DualEncoder.from_pretrained(model).implicitness(sentences, batch_size=batch_size)
    except DclrError as err:
        fail(err)
    text = "".join(f"{score:.6f}\t{s}\n" for score, s in zip(scores, sentences, strict=True))
    if output is None:
        out.print(text, end="", highlight=False, markup=False)
    else:
        save_output(output, text)
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
    quiet_hf()
    from dclr.api import evaluate_rte

    try:
        results = evaluate_rte(models, data_dir, pooler, batch_size, show_progress=True)
    except DclrError as err:
        fail(err)
    out.print(rte_table("RTE on INLI test, accuracy x100", results))
    if json_out:
        save_output(json_out, json.dumps(results, indent=2) + "\n")


@app.command("eis")
def eis_cmd(
    model: Annotated[str, typer.Argument(help="DualCSE folder (or a one-embedding model).")],
    pairs_file: Annotated[
        Path,
        typer.Argument(
            help="TSV `more-implicit sentence<TAB>more-explicit sentence` per line, or ImpScore's "
            "CSV (pos_implicit, pos_explicit, neg_implicit, neg_explicit)."
        ),
    ],
    split: Annotated[
        str,
        typer.Option(help="all, or (ImpScore CSV) train / val / test at DualCSE's sizes."),
    ] = "all",
    seed: Annotated[int, typer.Option(help="Seed of the split's row shuffle.")] = 0,
    batch_size: BatchSize = 128,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result here.")] = None,
) -> None:
    """EIS: share of pairs whose implicitness scores are in the right order (ties count half)."""
    quiet_hf()
    from dclr.api import evaluate_eis

    try:
        result = evaluate_eis(model, pairs_file, split, seed, batch_size)
    except DclrError as err:
        fail(err)
    out.print(
        f"EIS accuracy {result['accuracy']:.2f} on {result['n_pairs']} pairs "
        f"({result['ties']} ties)"
    )
    if json_out:
        save_output(json_out, json.dumps({"model": model, **result}, indent=2) + "\n")
