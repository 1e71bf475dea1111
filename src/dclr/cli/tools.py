"""What every `dclr` command group shares: the consoles, quiet Hugging Face logging, the error exit
and the STS scores table. Presentation only: the core (training, evaluation) never imports this."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dclr.errors import DclrError, InputError

console = Console(stderr=True)  # progress, messages and errors
out = Console()  # results (tables, scores)

# How a command reads a file of texts (`dclr.data.readers`): `dclr encode`, `dclr dualcse encode`,
# `dclr encode-bulk`, `dclr index build`
Column = Annotated[
    str | None, typer.Option(help="CSV/TSV/JSONL field or Parquet column holding the text.")
]
InputFormatOpt = Annotated[
    str,
    typer.Option(
        "--input-format", help="auto (from the suffix) | txt | csv | tsv | jsonl | parquet"
    ),
]
SkipBlankOpt = Annotated[
    bool,
    typer.Option(
        help="Leave blank rows out; the 1-based row number of every vector (a text file's line, "
        "a table's record after its header) is then written to OUTPUT with suffix .lines.txt."
    ),
]

# `dclr encode` and `dclr encode-bulk`: unit vectors or raw ones, by default as the model's
# sentence-transformers pipeline gives them (`SentenceEncoder.normalizes`)
NormalizeOpt = Annotated[
    bool | None,
    typer.Option(
        "--normalize/--no-normalize",
        help="L2-normalise the vectors (default: as the model's sentence-transformers pipeline "
        "does; all-MiniLM-L6-v2 and models trained from it end in Normalize).",
    ),
]


def quiet_hf() -> None:
    """Hide per-file Hugging Face progress bars; dclr shows its own."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def parent_folder(output: Path) -> Path:
    """Create `output`'s folder; an InputError naming the part of the path that is a file."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in output.parents if p.is_file()), output.parent)
        raise InputError(
            f"cannot write {output}: {blocking} is a file, not a folder",
            fix="choose an output path whose folders are folders",
        ) from None
    return output.parent


def save_output(output: Path, text: str) -> None:
    """Write a command's output file whole or not at all (a temp name renamed when complete),
    creating its folder; a storage failure or a path through a file exits as a named error."""
    from dclr.atomic import named_os_error, write_text

    try:
        parent_folder(output)
        write_text(output, text)
    except DclrError as err:
        fail(err)
    except OSError as err:
        fail(named_os_error(err, output))


def npy_path(output: Path) -> Path:
    """Where `np.save` puts `output`: .npy appended unless it ends so."""
    return output if output.suffix == ".npy" else output.with_name(output.name + ".npy")


def save_vectors(
    output: Path, vectors: Any, rows: list[int], blank: list[int], skip_blank: bool
) -> None:
    """An encode command's files, each written whole (a temp name renamed when complete; a failed
    write leaves the previous file as it was), with room checked first: the (n, d) vectors at
    `npy_path(output)` and, with `skip_blank`, each vector's 1-based row number in
    OUTPUT.lines.txt; then says what it wrote and what became of the blank rows."""
    from dclr.atomic import storage_guard, write_array

    path = npy_path(output)
    try:
        with storage_guard(path, vectors.nbytes):
            write_array(path, vectors)
    except DclrError as err:
        fail(err)
    shown = ", ".join(map(str, blank[:10])) + (" ..." if len(blank) > 10 else "")
    if skip_blank:
        numbers = output.with_name(output.name + ".lines.txt")
        save_output(numbers, "".join(f"{i}\n" for i in rows))
        note = f"{len(blank)} blank line(s) left out ({shown}); row -> line numbers in {numbers}"
    elif blank:
        note = f"one row per line; {len(blank)} blank line(s) encoded as '' (line {shown})"
    else:
        note = "one row per line"
    console.print(f"wrote {vectors.shape} to {path} ({note})")


def fail(err: Exception, who: str = "") -> NoReturn:
    """Print `err` as a one-line error (`who`: whose, e.g. "rank 1") and exit with status 2."""
    # escaped: an error's own brackets (`pip install 'dclr[serve]'`) are text, not markup
    label = f"error ({escape(who)}):" if who else "error:"
    console.print(f"[bold red]{label}[/] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


LOWER_IS_BETTER = ("alignment", "uniformity")
NOTABLE_DROP = 0.5  # points of Spearman x100 / accuracy: a task drop worth naming under the table


def scores_table(title: str, columns: dict[str, dict[str, float]], tasks: list[str]) -> Table:
    """Tasks (rows) x models (columns), then avg, alignment and uniformity when present. With a
    `before` and an `after` column a `change` column is added and drops are named in the caption."""
    compare = "before" in columns and "after" in columns and bool(columns["before"])
    table = Table(
        title=escape(title), min_width=len(title) + 4
    )  # +4: borders; the title never wraps
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
    if compare:  # short lines: a caption wraps at the table's width
        caption = "change = after - before"
        if drops:
            caption += f"\nfell: {', '.join(drops)} (a short run can trade tasks off)"
        table.caption = caption
    return table


def rte_table(title: str, columns: dict[str, dict[str, float]]) -> Table:
    """Accuracy x100 per hypothesis type (rows) for each model (columns)."""
    from dclr.data.inli import HYPOTHESIS_TYPES

    table = Table(title=escape(title))
    table.add_column("hypothesis")
    for name in columns:
        table.add_column(name, justify="right", overflow="fold")  # model paths shown whole
    for key in [*HYPOTHESIS_TYPES, "avg"]:
        table.add_row(key, *(f"{c[key]:.2f}" for c in columns.values()))
    table.add_row("threshold (val)", *(f"{c['threshold']:.3f}" for c in columns.values()))
    return table


def train_keys_help() -> str:
    """Every `--set` key by section: the core sections, then each method's (the registry's
    `section_classes`: the built-ins' option modules are torch-free, so `--help` stays fast)."""
    import dataclasses

    from dclr.methods.registry import section_classes
    from dclr.options.config import CORE_SECTIONS

    sections = {**CORE_SECTIONS, **section_classes()}
    return "; ".join(
        f"{name}: {', '.join(f.name for f in dataclasses.fields(cls))}"
        for name, cls in sections.items()
    )


def reflow(doc: str) -> str:
    """A docstring as help text: the lines of each paragraph joined, so the terminal wraps them
    at its own width (rich keeps a docstring's newlines, and source lines break mid-sentence).
    List items ("- ", "* ") and indented lines keep their own line."""
    paragraphs = []
    for block in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in block.split("\n"):
            keep = line.startswith(("- ", "* ", " ")) or not lines
            if keep:
                lines.append(line)
            else:
                lines[-1] = f"{lines[-1]} {line.strip()}"
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_help(app: typer.Typer) -> None:
    """Reflow the docstring help of every command of `app` and of its sub-apps."""
    for command in app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = reflow(command.callback.__doc__)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)


def settings_signature(command: Callable[..., Any], settings: type) -> inspect.Signature:
    """`command`'s signature with one keyword option per field of `settings`' sections (a
    dataclass whose fields are dataclasses with defaults): typer reads the options' names,
    types, defaults and help from it, so the command declares none of them itself.

    A field's metadata holds its help text and, when needed, `flag` (the option's name, for a
    repeatable option's singular), `envvar`, `show_default`, and `cli=False` (no option). A
    tuple field is a repeatable option."""
    params = inspect.signature(command, eval_str=True).parameters.values()
    own = [p for p in params if p.kind != p.VAR_KEYWORD]
    options = []
    for section in dataclasses.fields(settings):
        section_type: Any = section.default_factory
        hints = typing.get_type_hints(section_type)
        for field in dataclasses.fields(section_type):
            meta = dict(field.metadata)
            if not meta.pop("cli", True):
                continue
            flags = [meta.pop("flag")] if "flag" in meta else []
            option = typer.Option(*flags, **meta)
            annotation = _option_type(hints[field.name])
            options.append(
                inspect.Parameter(
                    field.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=field.default,
                    annotation=Annotated[annotation, option],
                )
            )
    signature = inspect.Signature([*own, *options])
    command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return signature


def _option_type(hint: Any) -> Any:
    """A settings field's type as typer takes it: a tuple (repeatable) as a list."""
    args = typing.get_args(hint)
    if types.NoneType in args:
        inner = [a for a in args if a is not types.NoneType]
        if len(inner) == 1 and typing.get_origin(inner[0]) is tuple:
            return list[typing.get_args(inner[0])[0]] | None  # type: ignore[misc]
    return hint
