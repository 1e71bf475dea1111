"""What a BERT-base checkpoint costs the training loop: written in the loop against written in the
background (`run.async_checkpoints`), on this machine's CPU and disk.

A `BertModel(BertConfig())` (BERT-base's shape, random weights) with AdamW's moments after one
step, 1.3 GB on disk. Each round, in rotated order:

- in the loop: `save_checkpoint` (what `async_checkpoints: off` does), then `STEPS` training steps
  (batch 16, 32 tokens) timed alone;
- in the background: the loop's host copy (`host_copy(capture(...))`), then the write on a thread
  (`CheckpointWriter`) while the same steps run, then whatever wait is left.

The loop's cost of a checkpoint is the first's write against the second's copy plus its leftover
wait plus the steps' slow-down while the write runs (on a 2-core machine the write and the steps
share the cores; a GPU's steps do not run on them). What a GPU's loop needs from the host is the
interpreter (it launches kernels from Python), so each round also runs a pure-Python loop alone
and during a background write: its rate during ÷ alone, and its longest pause (the time the
writer held the interpreter lock at a stretch). Writes benchmarks/results/
checkpoint_cost@<table_name>.{json,md} (`--device cuda`: checkpoint_cost-cuda.{json,md}; there
150 steps, one checkpoint interval of the paper recipes, cover a write).

    python benchmarks/checkpoint_cost.py [--rounds 3] [--steps 6]
    python benchmarks/checkpoint_cost.py --device cuda --steps 150
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from report_files import finished, provenance, save_report
from transformers import BertConfig, BertModel

from dclr.models.cpu_kind import cpu_description, load_average, table_name
from dclr.training.background import CheckpointWriter
from dclr.training.checkpoint import (
    capture,
    checkpoint_bytes,
    host_copy,
    save_checkpoint,
    write_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]


# `--tiny`: a 2-layer BERT, for the benchmark's own test (the ids drawn are below its vocabulary)
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "vocab_size": 2048}  # fmt: skip


def setup(device: torch.device, tiny: bool = False) -> tuple[BertModel, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = BertModel(BertConfig(**(TINY if tiny else {}))).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    step(model, optimizer, scheduler)  # AdamW's moments exist
    return model, optimizer, scheduler


def step(model: BertModel, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    ids = torch.randint(1000, 2000, (16, 32), device=model.device)
    model(ids).last_hidden_state.square().mean().backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def timed_steps(model: BertModel, optimizer: torch.optim.Optimizer, scheduler: Any,
                n: int) -> float:  # fmt: skip
    settle(model.device)
    tic = time.perf_counter()
    for _ in range(n):
        step(model, optimizer, scheduler)
    settle(model.device)
    return (time.perf_counter() - tic) / n


def settle(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def in_loop(objects: tuple, root: Path, n: int, index: int) -> dict[str, float]:
    model, optimizer, scheduler = objects
    tic = time.perf_counter()
    save_checkpoint(root, index, model, optimizer, scheduler, {"round": index})
    blocked = time.perf_counter() - tic
    return {
        "blocked": blocked,
        "write": blocked,
        "step": timed_steps(model, optimizer, scheduler, n),
    }


def in_background(objects: tuple, root: Path, n: int, index: int) -> dict[str, float]:
    model, optimizer, scheduler = objects
    writer = CheckpointWriter(background=True)
    tic = time.perf_counter()
    content = host_copy(capture(model, optimizer, scheduler))
    copy = time.perf_counter() - tic
    writer.submit(lambda: write_checkpoint(root, index, content, {"round": index}))
    during = timed_steps(model, optimizer, scheduler, n)
    tic = time.perf_counter()
    writer.close()
    left = time.perf_counter() - tic
    return {"blocked": copy + left, "copy": copy, "left_wait": left,
            "write": writer.times.write_seconds[0], "step": during}  # fmt: skip


def python_rate(seconds: float) -> tuple[float, float]:
    """Iterations per second of a pure-Python loop, and its longest pause (s) between two
    blocks of 1,000 iterations."""
    count, longest, end = 0, 0.0, time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        for _ in range(1000):
            count += 1
        longest = max(longest, time.perf_counter() - now)
    return count / seconds, longest


def interpreter_share(objects: tuple, root: Path, index: int, seconds: float) -> dict[str, float]:
    """The Python loop alone for `seconds`, then while a checkpoint is written in the
    background."""
    model, optimizer, scheduler = objects
    alone, alone_pause = python_rate(seconds)
    writer = CheckpointWriter(background=True)
    content = host_copy(capture(model, optimizer, scheduler))
    writer.submit(lambda: write_checkpoint(root, index, content, {"round": index}))
    during, pause = python_rate(seconds)
    writer.close()
    return {"share": during / alone, "longest_pause_alone": alone_pause,
            "longest_pause": pause}  # fmt: skip


MODES = {"in the loop": in_loop, "in the background": in_background}


def markdown(report: dict[str, Any]) -> str:
    rows = report["summary"]
    loop, back = rows["in the loop"], rows["in the background"]
    lines = [
        f"Checkpoint cost, {report['model']} + AdamW ({report['gigabytes']:.2f} GB), "
        f"{report['cpu']}, torch {report['torch']}; load average {report['load_start']} at start, "
        f"{report['load_end']} at end; {report['rounds']} rounds in rotated order, medians; "
        f"{report['steps']} steps (batch 16 x 32 tokens) after each checkpoint; folder under "
        f"{report['folder']}.",
        "",
        "| mode | loop blocked s | write s | host copy s | wait left s | step s | step x alone |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        if name not in MODES:
            continue
        lines.append(
            f"| {name} | {r['blocked']:.2f} | {r['write']:.2f} | {r.get('copy', 0):.2f} | "
            f"{r.get('left_wait', 0):.2f} | {r['step']:.3f} | "
            f"{r['step'] / loop['step']:.2f} |"
        )
    extra = back["blocked"] + report["steps"] * (back["step"] - loop["step"])
    lines += [
        "",
        f"The loop's cost per checkpoint: {loop['blocked']:.2f} s in the loop; in the background "
        f"{back['blocked']:.2f} s blocked plus {report['steps']} steps' slow-down "
        f"({report['steps'] * (back['step'] - loop['step']):+.2f} s) = {extra:.2f} s "
        f"({extra / loop['blocked']:.2f}x), on this CPU, where the write and the steps share "
        "the cores.",
        "",
        f"A pure-Python loop on the main thread while a checkpoint is written in the background "
        f"keeps {100 * rows['interpreter']['share']:.0f} % of its rate alone; its longest pause "
        f"{1000 * rows['interpreter']['longest_pause']:.1f} ms (alone "
        f"{1000 * rows['interpreter']['longest_pause_alone']:.1f} ms): the writer mostly runs "
        "outside the interpreter lock, which a GPU's loop needs to launch its kernels.",
        "",
        f"command: `{report['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer BERT (the test's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    name = f"checkpoint_cost@{table_name()}" if device.type == "cpu" else "checkpoint_cost-cuda"
    out = args.out or ROOT / "benchmarks" / "results" / f"{name}.json"
    objects = setup(device, args.tiny)
    folder = Path(tempfile.mkdtemp(prefix="dclr-ckpt-", dir=args.dir))
    origin, start, began = provenance(), load_average(), time.perf_counter()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in [*MODES, "interpreter"]}
    names = list(MODES)
    try:
        for r in range(args.rounds):
            for name in names[r % 2 :] + names[: r % 2]:
                print(f"round {r + 1}: {name}", flush=True)
                root = folder / name.replace(" ", "-")
                runs[name].append(MODES[name](objects, root, args.steps, r + 1))
                shutil.rmtree(root)
            spin = 0.25 if args.tiny else 2.0  # the tiny write is over in milliseconds
            runs["interpreter"].append(interpreter_share(objects, folder / "python", r + 1, spin))
            shutil.rmtree(folder / "python")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = {name: {k: statistics.median(run[k] for run in rows) for k in rows[0]}
               for name, rows in runs.items()}  # fmt: skip
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    report = {"cpu": cpu_description() + (f", steps on {gpu}" if gpu else ""),
              "torch": torch.__version__,
              "model": "a 2-layer BERT (--tiny)" if args.tiny else "BERT-base shape",
              "gigabytes": checkpoint_bytes(objects[0], objects[1]) / 1e9,
              "rounds": args.rounds, "steps": args.steps, "folder": str(folder.parent),
              "load_start": start, "load_end": load_average(),
              "seconds": round(time.perf_counter() - began, 1), "summary": summary, "runs": runs,
              "command": "python benchmarks/checkpoint_cost.py"
              + (f" --device {args.device} --steps {args.steps}" if gpu else ""),
              "provenance": finished(origin)}  # fmt: skip
    save_report(out, report, markdown(report))


if __name__ == "__main__":
    main()
