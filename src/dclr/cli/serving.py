"""Commands `dclr encode-bulk`, `dclr index build|info`, `dclr search`, `dclr serve`.

`register(app)` adds them to the main typer app (see `dclr.cli.main.EXTENSIONS`). Heavy imports
(FAISS, FastAPI, pyarrow, the model) happen inside the commands, so `dclr --help` stays fast and
works without the `serve` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from dclr.atomic import named_os_error
from dclr.cli.tools import (
    Column,
    InputFormatOpt,
    NormalizeOpt,
    console,
    fail,
    out,
    quiet_hf,
    settings_signature,
)
from dclr.errors import DclrError
from dclr.indexing.index import EXACT_MAX_VECTORS
from dclr.models.precision_names import PRECISION_HELP
from dclr.serving.settings import ServeSettings, exposure_warning, for_bind

index_app = typer.Typer(help="Build and inspect semantic-search indexes.", no_args_is_help=True)

Model = Annotated[str, typer.Argument(help="Model folder, hub id, or python-package:NAME.")]
Pooler = Annotated[
    str | None, typer.Option(help="Pooler (default: what the model folder records).")
]
BatchSize = Annotated[int, typer.Option(help="Texts per forward pass.")]
Processes = Annotated[
    int,
    typer.Option(
        help="Worker processes (one per GPU when there are GPUs). Under torchrun, the ranks are "
        "the workers and this is ignored."
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(help=PRECISION_HELP),
]
Overwrite = Annotated[
    bool, typer.Option(help="Discard a previous job in the output folder instead of resuming.")
]


def _need_extra(err: ModuleNotFoundError) -> None:
    fail(
        RuntimeError(
            f"{err.name} is not installed; this command needs the serve extra: "
            "pip install 'dclr[serve]'"
        )
    )


def encode_bulk(
    model: Model,
    input_file: Annotated[
        Path, typer.Argument(help="Text file (one per line), CSV/TSV, JSONL or Parquet.")
    ],
    out_dir: Annotated[Path, typer.Argument(help="Folder for the shards and manifest.json.")],
    column: Column = None,
    input_format: InputFormatOpt = "auto",
    shard_format: Annotated[
        str,
        typer.Option("--format", help="npy (vectors + row numbers) | parquet (row, embedding)."),
    ] = "npy",
    dtype: Annotated[str, typer.Option(help="float32 | float16 (storage only).")] = "float32",
    shard_size: Annotated[int, typer.Option(help="Input rows per shard.")] = 10_000,
    normalize: NormalizeOpt = None,
    pooler: Pooler = None,
    batch_size: BatchSize = 128,
    processes: Processes = 1,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    overwrite: Overwrite = False,
    precision: PrecisionOpt = "fp32",
) -> None:
    """Encode a large file into vector shards; run it again after an interruption to resume."""
    quiet_hf()
    from dclr import distributed
    from dclr.api import encode_bulk

    try:
        manifest = encode_bulk(
            model,
            input_file,
            out_dir,
            column=column,
            input_format=input_format,
            shard_format=shard_format,
            dtype=dtype,
            shard_size=shard_size,
            normalize=normalize,
            pooler=pooler,
            batch_size=batch_size,
            processes=processes,
            device=device,
            overwrite=overwrite,
            precision=precision,
            show_progress=True,
        )
    except ModuleNotFoundError as err:
        _need_extra(err)
    except DclrError as err:
        fail(err)
    except OSError as err:  # disk full, read-only folder: the file and the fix, no traceback
        fail(named_os_error(err, out_dir))
    if distributed.rank() == 0:
        read = f"{manifest['rows']} rows"
        source = manifest["input"]  # the file as read (`TextSource.identity`)
        if source["format"] != "parquet":
            from dclr.data.readers import physical_lines

            path = Path(source["path"])
            read += f" ({physical_lines(path)} lines in {path.name})"
        console.print(
            f"{manifest['vectors']} vectors of dimension {manifest['dim']} from {read} in "
            f"{manifest['n_shards']} shard(s) in {out_dir}",
            highlight=False,
        )


@index_app.command("build")
def index_build(
    model: Model,
    input_file: Annotated[
        Path, typer.Argument(help="Texts to index (same formats as encode-bulk).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Index folder to write.")],
    kind: Annotated[
        str,
        typer.Option(
            help=f"auto (flat up to {EXACT_MAX_VECTORS:,} vectors, else hnsw) | flat (exact) | "
            "hnsw | ivf"
        ),
    ] = "auto",
    column: Column = None,
    input_format: InputFormatOpt = "auto",
    pooler: Pooler = None,
    batch_size: BatchSize = 128,
    processes: Processes = 1,
    hnsw_m: Annotated[int, typer.Option(help="HNSW links per node.")] = 32,
    ef_construction: Annotated[int, typer.Option(help="HNSW build candidate list.")] = 200,
    ef_search: Annotated[int, typer.Option(help="HNSW query candidate list.")] = 128,
    nlist: Annotated[int | None, typer.Option(help="IVF cells (default 4*sqrt(n)).")] = None,
    nprobe: Annotated[int, typer.Option(help="IVF cells searched per query.")] = 16,
    dedup: Annotated[
        bool,
        typer.Option(
            help="Leave out rows equal to an earlier row (lower-cased, whitespace collapsed), "
            "so copies do not fill the results."
        ),
    ] = False,
    id_column: Annotated[
        str | None,
        typer.Option(
            help="CSV/TSV/JSONL field or Parquet column of your own document ids: every hit "
            "carries its row's `doc_id` (search, /search) beside the row number."
        ),
    ] = None,
    overwrite: Overwrite = False,
    precision: PrecisionOpt = "fp32",
) -> None:
    """Encode a corpus and build a FAISS index (cosine similarity) tied to the model."""
    quiet_hf()
    try:
        from dclr.api import build_index

        meta = build_index(
            model,
            input_file,
            out,
            column=column,
            input_format=input_format,
            kind=kind,
            pooler=pooler,
            precision=precision,
            dedup=dedup,
            id_column=id_column,
            overwrite=overwrite,
            batch_size=batch_size,
            processes=processes,
            show_progress=True,
            hnsw_m=hnsw_m,
            ef_construction=ef_construction,
            ef_search=ef_search,
            ivf_nlist=nlist,
            ivf_nprobe=nprobe,
        )
    except ModuleNotFoundError as err:
        _need_extra(err)
    except DclrError as err:
        fail(err)
    except OSError as err:
        fail(named_os_error(err, out))
    left_out = f"; {meta['duplicates_left_out']} duplicate rows left out" if dedup else ""
    console.print(
        f"{meta['params']['kind']} index of {meta['count']} vectors ({meta['dim']}-d) in "
        f"{out}{left_out}",
        highlight=False,
        soft_wrap=True,  # a long path is not folded into the count
    )


@index_app.command("info")
def index_info(folder: Annotated[Path, typer.Argument(help="Index folder.")]) -> None:
    """Print an index's model, fingerprint, kind and size."""
    from dclr.api import index_info as read_info

    try:
        meta = read_info(folder)
    except DclrError as err:
        fail(err)
    out.print_json(json.dumps(meta))


def search(
    query: Annotated[str, typer.Argument(help="The text to search for.")],
    index: Annotated[Path, typer.Option("--index", "-i", help="Index folder.")],
    model: Annotated[
        str | None,
        typer.Option(help="Query encoder (default: the model that built the index)."),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="Number of results.")] = 10,
    pooler: Pooler = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print JSON instead of a table, as POST /search answers: each hit's id (the "
            "index's vector id), row (0-based), score, text and doc_id (--id-column's, or null).",
        ),
    ] = False,
    precision: Annotated[
        str | None,
        typer.Option(
            help="fp32 | fp16 | bf16 | int8 (default: the precision the index was built with)."
        ),
    ] = None,
) -> None:
    """Top-k texts of an index by cosine similarity; refuses a model other than the index's."""
    quiet_hf()
    try:
        from dclr.indexing.searcher import IndexSearcher, check_queries

        check_queries(query, k)  # before the model loads: a bad query fails at once
        searcher = IndexSearcher(index, model, pooler, precision)
        hits = searcher.search(query, k)
        meta, name = searcher.meta, searcher.model
    except ModuleNotFoundError as err:
        _need_extra(err)
    except (DclrError, ValueError) as err:
        fail(err)
    if json_out:
        rows = [{"rank": r + 1, **hit.__dict__} for r, hit in enumerate(hits)]
        out.print_json(json.dumps({"query": query, "model": name, "results": rows}))
        return
    table = Table(
        title=escape(f"{query!r} — {meta['count']} texts, {meta['params']['kind']} index")
    )
    # txt / jsonl: one row per line, so the 1-based line `encode` and the errors name; other
    # formats (csv header, parquet): the 0-based row the JSON and the API return
    by_line = (meta.get("input") or {}).get("format") in LINE_FORMATS
    where = "line" if by_line else "row (0-based)"
    with_ids = bool(meta.get("id_column"))
    columns = [("#", "right"), ("score", "right"), (where, "right")]
    # the user's own id, named as in the JSON and /search (its "id" is the index's vector id)
    columns += [("doc_id", "left")] * with_ids + [("text", "left")]
    for column, justify in columns:
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r, hit in enumerate(hits, start=1):
        place = str(hit.row + 1 if by_line else hit.row)
        ids = [escape(hit.doc_id or "")] * with_ids
        table.add_row(str(r), f"{hit.score:.4f}", place, *ids, hit.text)
    out.print(table)


LINE_FORMATS = ("txt", "jsonl")  # one input row per line


def cpu_policy_hint(device: str) -> str | None:
    """A line for a CPU server whose kind has no measured policy (`dclr cpu-policy`), else None."""
    import torch

    from dclr.models.cpu_kind import DEFAULT, cpu_policy, hardware_key

    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return None
    if cpu_policy() != DEFAULT:
        return None
    return (
        f"note: no CPU policy is measured for {hardware_key()}: the defaults apply; "
        "`dclr cpu-policy --measure` measures this machine in a minute or two"
    )


def serve(model: Model, **options: Any) -> None:
    """Serve embeddings over HTTP (OpenAI-compatible), similarity, search and a web page.

    Routes: POST /v1/embeddings, POST /similarity, POST /search (with --index), GET /health,
    the page at /, the OpenAPI schema at /openapi.json. Binds 127.0.0.1 unless told otherwise.
    """
    quiet_hf()
    try:
        from dclr.serving.server import preflight, run
        from dclr.serving.startup import load_app

        settings = for_bind(ServeSettings.from_options(options))
        preflight(settings.connections)  # a missing parser or event loop, before the model loads
        app = load_app(model, settings)
    except ModuleNotFoundError as err:
        _need_extra(err)
    except (DclrError, ValueError) as err:
        fail(err)
    host = settings.connections.host
    hint = cpu_policy_hint(settings.served.device)
    if hint:
        console.print(hint, highlight=False, soft_wrap=True)
    exposed = exposure_warning(settings)
    if exposed:
        console.print(f"[yellow]warning:[/] {exposed}")
    try:
        run(app, settings.connections)
    except ValueError as err:  # an unknown or missing parser, before binding
        fail(err)
    except OSError as err:
        fail(RuntimeError(f"cannot listen on {host}:{settings.connections.port}: {err}"))


serve.__signature__ = settings_signature(serve, ServeSettings)  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    """Add this feature's commands to the main `dclr` app."""
    app.command("encode-bulk")(encode_bulk)
    app.add_typer(index_app, name="index")
    app.command("search")(search)
    app.command("serve")(serve)
