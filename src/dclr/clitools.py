"""What every `dclr` command group shares: the consoles, quiet Hugging Face logging, the error exit
and the STS scores table. Presentation only: the core (training, evaluation) never imports this."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

console = Console(stderr=True)  # progress, messages and errors
out = Console()  # results (tables, scores)


def quiet_hf() -> None:
    """Hide per-file Hugging Face progress bars; dclr shows its own."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def fail(err: Exception) -> None:
    """Print `err` as a one-line error and exit with status 2."""
    console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def scores_table(title: str, columns: dict[str, dict[str, float]], tasks: list[str]) -> Table:
    """STS tasks (rows) x models (columns), then avg, alignment and uniformity when present."""
    table = Table(title=title)
    table.add_column("task")
    for name in columns:
        table.add_column(name, justify="right")
    for key in [*tasks, "avg", "alignment", "uniformity"]:
        if all(key in c for c in columns.values()):
            fmt = "{:.2f}" if key not in ("alignment", "uniformity") else "{:.3f}"
            table.add_row(key, *(fmt.format(c[key]) for c in columns.values()))
    return table


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
