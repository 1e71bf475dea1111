"""Operator calls per training step, SimCSE against DCLR (each noise-ascent gradient), counted on
the CPU: every aten call the step dispatches, forward, backward and optimizer (a proxy for the
kernels a GPU step launches, which is what a launch-bound step at batch 64 pays for; views are
counted too, though they launch nothing).

The step is dclr's own (`Trainer`, the recipes and options of `benchmarks/gpu_check.py`'s step
table: cls pooling, MLP head, max length 32, batch 64, the complementary model's rows cached),
on a random BERT of BERT-base's depth (12 layers; 64 wide, since the count does not depend on
the width). Calls per step = (calls of an 8-step run − calls of a 4-step run) / 4, so set-up
cancels. DCLR's calls inside `noise_negatives` are counted apart. Deterministic: no timing.
Writes benchmarks/results/step_ops.{json,md}.

    python benchmarks/step_ops.py
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from report_files import finished, provenance, save_report
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"simcse": {}, "dclr autograd": {"noise_gradient": "autograd"},
            "dclr closed_form": {"noise_gradient": "closed_form"}}  # fmt: skip


class CallCounter(TorchDispatchMode):
    """Counts aten calls under a tag (`tagged` sets it for one function's calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter[str] = collections.Counter()
        self.tag = "step"

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls[self.tag] += 1
        return func(*args, **(kwargs or {}))

    def tagged(self, tag: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            before, self.tag = self.tag, tag
            try:
                return f(*args, **kwargs)
            finally:
                self.tag = before

        return inner


def count(model: str, method: str, options: dict[str, str], steps: int, out: Path) -> dict:
    """Calls of a `steps`-step run: {"step": all but the ascent, "noise_negatives": the ascent}."""
    import gpu_check

    import dclr.losses.dclr as dclr_loss
    from dclr.driver import trainer_for
    from dclr.recipe import load_config

    recipe = gpu_check.SIMCSE_RECIPE if method == "simcse" else gpu_check.DCLR_RECIPE
    overrides = {**gpu_check.QUIET, "model": model, "batch_size": 64, "max_steps": steps,
                 "log_steps": 100, "output_dir": str(out), "max_length": gpu_check.MAX_LENGTH,
                 "pooler": "cls", "mlp_head": True, **options}  # fmt: skip
    if method == "dclr":
        overrides |= {"complementary_model": model, "phi_calibration": "none"}
    trainer = trainer_for(load_config(recipe, overrides))
    counter = CallCounter()
    real = dclr_loss.noise_negatives
    dclr_loss.noise_negatives = counter.tagged("noise_negatives", real)
    try:
        with counter:
            trainer.train()
    finally:
        dclr_loss.noise_negatives = real
    return dict(counter.calls)


def measure(layers: int = 12) -> dict[str, dict[str, float]]:
    import gpu_check

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = gpu_check.tiny_model(Path(tmp) / "model", hidden=64, layers=layers)
        for name, options in VARIANTS.items():
            method = name.split()[0]
            short, long = (count(model, method, options, s, Path(tmp) / f"{name}-{s}")
                           for s in (4, 8))  # fmt: skip
            per = {k: (long.get(k, 0) - short.get(k, 0)) / 4 for k in set(short) | set(long)}
            rows[name] = {"total": sum(per.values()), "ascent": per.get("noise_negatives", 0.0)}
    return rows


def markdown(report: dict) -> str:
    base = report["rows"]["simcse"]["total"]
    lines = [f"aten calls per training step, {report['layers']}-layer random BERT (64 wide), "
             "batch 64, max length 32, cls pooling, MLP head, complementary rows cached; torch "
             f"{report['torch']}.", "",
             "| step | calls | in the noise ascent | ÷ SimCSE |", "|---|---:|---:|---:|"]  # fmt: skip
    for name, r in report["rows"].items():
        lines.append(f"| {name} | {r['total']:.0f} | {r['ascent']:.0f} | "
                     f"{r['total'] / base:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/step_ops.json")
    args = parser.parse_args()
    origin = provenance()
    report = {"layers": args.layers, "torch": torch.__version__, "rows": measure(args.layers),
              "command": "python benchmarks/step_ops.py", "provenance": finished(origin)}  # fmt: skip
    save_report(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
