"""What every `dclr` command group shares: the consoles, quiet Hugging Face logging, the error exit
and the STS scores table. Presentation only: the core (training, evaluation) never imports this."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(stderr=True)  # progress, messages and errors
out = Console()  # results (tables, scores)


def quiet_hf() -> None:
    """Hide per-file Hugging Face progress bars; dclr shows its own."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def fail(err: Exception) -> NoReturn:
    """Print `err` as a one-line error and exit with status 2."""
    # escaped: an error's own brackets (`pip install 'dclr[serve]'`) are text, not markup
    console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
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
    from dclr.dualcse.data import HYPOTHESIS_TYPES

    table = Table(title=escape(title))
    table.add_column("hypothesis")
    for name in columns:
        table.add_column(name, justify="right", overflow="fold")  # model paths shown whole
    for key in [*HYPOTHESIS_TYPES, "avg"]:
        table.add_row(key, *(f"{c[key]:.2f}" for c in columns.values()))
    table.add_row("threshold (val)", *(f"{c['threshold']:.3f}" for c in columns.values()))
    return table


def section_fields_from_source(files: list[Path], classes: dict[str, str]) -> dict[str, list[str]]:
    """{section: field names} of the dataclasses `classes` ({section: class name}) read from the
    source `files` without importing them (importing the config imports torch: seconds for a
    `--help`). Fields inherited from a base class defined in `files` come first, as in
    `dataclasses.fields`."""
    import ast

    bodies: dict[str, ast.ClassDef] = {}
    for file in files:
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.ClassDef):
                bodies[node.name] = node

    def fields(name: str) -> list[str]:
        node = bodies.get(name)
        if node is None:
            return []
        inherited: list[str] = []  # as dataclasses orders them: the last base's fields first
        for base in reversed(node.bases):
            if isinstance(base, ast.Name):
                inherited += [f for f in fields(base.id) if f not in inherited]
        own = [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
        return inherited + [f for f in own if f not in inherited]

    return {section: fields(cls) for section, cls in classes.items()}


# Section -> dataclass of every core and built-in method section, for `train --help`;
# tests/test_first_hour.py checks this against the registered sections.
HELP_SECTIONS = {
    "model": "ModelSection", "data": "DataSection", "optimisation": "OptimisationSection",
    "run": "RunSection", "simcse": "ContrastiveSection", "dclr": "DCLRSection",
    "consert": "ConSERTSection", "nli": "NLISection", "dualcse": "DualCSESection",
    "simcse_sup": "SupervisedINLISection",
}  # fmt: skip


def train_keys_help() -> str:
    """Every `--set` key by section, read from the source (see `section_fields_from_source`)."""
    root = Path(__file__).parent
    files = [root / "training" / "config.py", *sorted((root / "methods").glob("*.py"))]
    keys = section_fields_from_source(files, HELP_SECTIONS)
    return "; ".join(f"{section}: {', '.join(names)}" for section, names in keys.items())


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
