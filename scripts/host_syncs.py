"""Count the host syncs of any recipe's ordinary steps, each with its line (issue 44).

A GPU step is fast while the host queues kernels ahead of the device; each read of a device value
(`.item()`, `bool()`, `.cpu()`, `nonzero`, ...) makes the host wait. This trains a recipe for a few
steps (no evaluation, no checkpoint, a log at `--log-steps` and the last step) through
`dclr.training.host_syncs.record_host_syncs` and prints the reads of its ordinary steps (those
that neither log, evaluate nor checkpoint), where each was made. Use it on a method of your own
(a plugin) before a long GPU run: on a GPU it reports CUDA's own detector; on a CPU, the calls
that would wait there (an upper bound: a CPU cannot tell a tensor that would be on the GPU from
one that stays on the host), with the CPU path's own reads (the loss each step, for the NaN stop)
unless `--as-gpu` takes the GPU's choices on the CPU (the NaN stop read at log steps, padded
batches, fused AdamW, batches made on the prefetch thread, the attention mask prepared in 4-D;
DCLR's noise check still runs, as on any CPU).

    python scripts/host_syncs.py recipes/dclr_minilm_cpu.yaml --as-gpu
    python scripts/host_syncs.py recipes/consert_minilm_cpu.yaml --set batch_size=16 --json s.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# The GPU's choices, for --as-gpu on a CPU (each "auto" picks it on a GPU).
GPU_CHOICES = {"packing": "off", "fused_optimizer": "on", "prefetch": "on", "prepared_mask": "on"}


def count(
    recipe: Path | None, sets: list[str], steps: int, log_steps: int, as_gpu: bool = False
) -> dict[str, Any]:
    """The recipe with `sets` applied, `steps` steps in a scratch folder: the summary of
    `record_host_syncs` with the method and device."""
    import dclr.training.loop as loop
    from dclr.configfile import parse_overrides
    from dclr.driver import trainer_for
    from dclr.recipe import load_config
    from dclr.training.finite import FiniteGuard
    from dclr.training.host_syncs import record_host_syncs

    guard = loop.FiniteGuard
    if as_gpu:  # the NaN stop as a GPU keeps it: on the device, read at log steps
        loop.FiniteGuard = lambda lazy: FiniteGuard(lazy=True)  # type: ignore[assignment,misc]
    try:
        with tempfile.TemporaryDirectory(prefix="dclr-host-syncs-") as scratch:
            overrides = {**(GPU_CHOICES if as_gpu else {}), **parse_overrides(sets),
                         "run.output_dir": str(Path(scratch) / "run"),
                         "optimisation.max_steps": steps, "run.log_steps": log_steps,
                         "run.eval_steps": 0, "run.test_eval": False,
                         "run.save_steps": 0}  # fmt: skip
            config = load_config(recipe, overrides)
            trainer = trainer_for(config)
            summary = record_host_syncs(trainer).summary()
    finally:
        loop.FiniteGuard = guard  # type: ignore[misc]
    return {"recipe": str(recipe), "method": config.method, "device": str(trainer.device),
            "as_gpu": as_gpu, **summary}  # fmt: skip


def render(report: dict[str, Any]) -> str:
    lines = [f"{report['method']} on {report['device']} ({report['detector']}): "
             f"{report['syncs_in_ordinary_steps']} reads in {report['ordinary_steps']} ordinary "
             f"steps ({report['ours_in_ordinary_steps']} in dclr's or your code, the rest inside "
             f"libraries), at most {report['max_per_ordinary_step']} in one step"]  # fmt: skip
    lines += [f"  {n:6d}  {place}" for place, n in report["where"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "recipe", type=Path, nargs="?", help="a recipe YAML (or none: --set model=...)"
    )
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="a recipe option, as `dclr train --set` (repeatable)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=13, help="steps to run (default 13)")
    parser.add_argument("--log-steps", type=int, default=6, help="a log every N steps (default 6)")
    parser.add_argument("--as-gpu", action="store_true",
                        help="on a CPU, take the GPU's choices (see above)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if args.steps < 3 or not 1 <= args.log_steps < args.steps:
        parser.error("--steps must be >= 3 and --log-steps between 1 and --steps - 1")
    from dclr.errors import DclrError

    try:
        report = count(args.recipe, args.sets, args.steps, args.log_steps, args.as_gpu)
    except DclrError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
