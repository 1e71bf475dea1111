"""What the paper's BERT-base runs cost on this device, from a short run of their own recipes.

`benchmarks/gpu_check.py` (its last part) runs `recipes/simcse_bert_base.yaml` and
`recipes/dclr_bert_base.yaml` as written (batch, precision, dev evaluation on STS-B / SICK-R dev,
DCLR's cached complementary model), but on a BERT-base-shaped model with random weights (speed
only) and a stand-in corpus, for `WARMUP + TIMED` steps with a dev evaluation every `WARMUP`; then
`paper_cost` scales the measured step, evaluation and cache times to the papers' corpus:

- steps = the recipe's epochs x (1,000,000 // batch), as dclr's sampler counts an epoch (the last
  partial batch is dropped): DCLR "three epochs … batch size was 128 for the base models"
  (../shared/papers/dclr.txt), SimCSE one epoch at batch 64 (Gao et al., Table D.1, the recipe);
- dev evaluations: one every `run.eval_steps` and one at the end, as the loop runs them;
- the complementary cache (DCLR): its measured time scaled linearly from the stand-in corpus to
  1M sentences (fixed costs scale too, so this errs long);
- checkpoints (model, AdamW's moments, schedule: 3x the weights, written, hashed and synced): one
  every `run.save_steps` (the recipes: every dev evaluation) and one after the last step, each
  at the mean of the short run's two (its first write allocates the pages, so this errs long
  too). The short runs write them in the background (`run.async_checkpoints`, on by default on
  a GPU): the loop then pays each checkpoint's host copy, plus whatever of the write the steps
  until the next checkpoint do not cover, plus the last write in full (`checkpoint_seconds`).

The stand-in corpus: the STS sentences joined in pairs; 28 % of its lines reach 32 tokens
(MiniLM's tokenizer, BERT's vocabulary), so a shuffled batch of 64 or 128 pads to max length 32
(a GPU step pads: packing is off there). That a paper batch of Wikipedia sentences pads to 32 as
well (it needs only one sentence of >= 32 tokens in 128) is our assumption: wiki1m is not here.
The best-model exports are reported, not projected (one per new best, at most one per
evaluation).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAPER_RECIPES = {
    "simcse": ROOT / "recipes" / "simcse_bert_base.yaml",
    "dclr": ROOT / "recipes" / "dclr_bert_base.yaml",
}
# "fine-tuning standard language model backbones (BERT and RoBERTa) on one million unlabeled
# Wikipedia sentences" (../shared/papers/dclr.txt): wiki1m_for_simcse.txt.
PAPER_SENTENCES = 1_000_000
STAND_IN_LINES = 4096  # > (WARMUP + TIMED) x 128: no epoch boundary inside the timed steps


def stand_in_corpus(path: Path, sentences: list[str], lines: int = STAND_IN_LINES) -> Path:
    """`lines` lines, each two consecutive STS sentences joined (longer than 32 tokens)."""
    path.write_text(
        "\n".join(f"{sentences[2 * i % len(sentences)]} {sentences[(2 * i + 1) % len(sentences)]}"
                  for i in range(lines)) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    return path


def steady_step_seconds(run_dir: Path, warmup: int, timed: int) -> float:
    """Seconds per step over steps warmup+1 .. warmup+timed: `train_seconds` logged at the last
    minus at the first (both read after the device settled), so set-up and warm-up cancel."""
    from dclr.training.tracking import read_metrics

    records = {r["step"]: r for r in read_metrics(run_dir, "train")}
    return (records[warmup + timed]["train_seconds"] - records[warmup]["train_seconds"]) / timed


def paper_cell(
    method: str, model: str, corpus: Path, out: Path, cuda: bool, warmup: int, timed: int,
    data_dir: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A short run of the method's paper recipe: steady-state seconds per step (`timed` steps
    after `warmup`), seconds per dev evaluation, the complementary cache's seconds, and the
    recipe's batch, epochs, evaluation cadence and precision (fp32 on a CPU, which refuses fp16)."""
    from dclr.api import train
    from dclr.recipe import load_config
    from dclr.training.tracking import read_metrics

    recipe = PAPER_RECIPES[method]
    settings = load_config(recipe)
    precision = settings.optimisation.precision if cuda else "fp32"
    overrides: dict[str, Any] = {"model": model, "corpus": str(corpus), "precision": precision,
                                 "max_steps": warmup + timed, "log_steps": warmup,
                                 "eval_steps": warmup, "test_eval": False,
                                 # two checkpoints give the mean (a third costs the device
                                 # 2-4.6 s more at BERT-base's 1.3 GB)
                                 "save_steps": max(1, (warmup + timed) // 2),
                                 # as a GPU writes them by default (a CPU writes them in the
                                 # loop): the projection's cost is the loop's share
                                 "async_checkpoints": "on",
                                 "output_dir": str(out)}  # fmt: skip
    if method == "dclr":  # the run's own model stands in for the trained SimCSE (speed only),
        # with the pooler a SimCSE run of the paper recipe records in its best/ folder
        overrides |= {"complementary_model": model, "complementary_pooler": settings.model.pooler}
    if data_dir:
        overrides["data_dir"] = data_dir
    tic = time.perf_counter()
    summary = train(recipe, overrides)
    step = steady_step_seconds(out, warmup, timed)
    phases = summary["phase_seconds"]
    written = checkpoints_written(warmup + timed, overrides["save_steps"])
    times = summary["checkpoint_times"]
    assert times["written"] == written, (times, written)  # the loop's rule, counted by hand
    evaluations = sum(1 for _ in read_metrics(out, "eval"))
    return {
        "method": method, "recipe": recipe.relative_to(ROOT).as_posix(),
        "batch": settings.optimisation.batch_size, "epochs": settings.optimisation.epochs,
        "eval_steps": settings.run.eval_steps, "precision": precision,
        "checkpoint_every": settings.run.checkpoint_every,
        "seconds_per_step": step, "evaluations": evaluations,
        "dev_eval_seconds": phases["dev_eval"] / max(evaluations, 1),
        "cache_seconds": phases["complementary_cache"], "cache_sentences": STAND_IN_LINES,
        "checkpoint_seconds": times["write_seconds"] / written,  # each write
        "checkpoint_capture_seconds": times["capture_seconds"] / written,  # each host copy
        "checkpoint_background": times["background"],
        "exports_seconds": phases["exports"],
        "wall_seconds": round(time.perf_counter() - tic, 1),
    }  # fmt: skip


def checkpoints_written(steps: int, every: int) -> int:
    """How many checkpoints a run of `steps` writes at `run.checkpoint_every` = `every`, by the
    loop's own rule (`dclr.training.loop.checkpoint_due`)."""
    from dclr.training.loop import checkpoint_due

    return sum(checkpoint_due(done, steps, steps, every) for done in range(1, steps + 1))


def checkpoint_cost(
    count: int, write: float, capture: float, gap: float, background: bool
) -> float:
    """Seconds the loop spends on `count` checkpoints that each take `write` seconds to write,
    `gap` seconds of steps apart. In the loop: count x write. In the background: each costs
    its host copy (`capture`) and the part of the write before it that the steps since did not
    cover (the writer holds one at a time); the last one is waited for in full. A report from
    before the copy was timed apart has it inside `write`."""
    if not background:
        return count * write
    if count == 0:
        return 0.0
    return count * capture + (count - 1) * max(0.0, write - gap) + write


def paper_cost(cell: dict[str, Any], sentences: int = PAPER_SENTENCES) -> dict[str, Any]:
    """The cell's times scaled to the paper run (see the module's docstring)."""
    import math

    from dclr.data.sampler import EpochSampler

    per_epoch = EpochSampler(sentences, cell["batch"], 0).steps_per_epoch
    steps = math.ceil(cell["epochs"] * per_epoch)
    every = cell["eval_steps"]
    evaluations = (steps // every + (1 if steps % every else 0)) if every else 0
    minutes = {
        "steps": steps * cell["seconds_per_step"] / 60,
        "dev_eval": evaluations * cell["dev_eval_seconds"] / 60,
        "complementary_cache": cell["cache_seconds"] * sentences / cell["cache_sentences"] / 60,
    }
    checkpoint_every = cell.get("checkpoint_every", every)
    checkpoints = checkpoints_written(steps, checkpoint_every)
    if "checkpoint_seconds" in cell:  # a report from before checkpoints were timed apart: none
        seconds = checkpoint_cost(checkpoints, cell["checkpoint_seconds"],
                                  cell.get("checkpoint_capture_seconds", 0.0),
                                  checkpoint_every * cell["seconds_per_step"],
                                  cell.get("checkpoint_background", False))  # fmt: skip
        minutes["checkpoints"] = seconds / 60
    return {"steps": steps, "evaluations": evaluations, "checkpoints": checkpoints,
            "minutes": {k: round(v, 1) for k, v in minutes.items()},
            "total_minutes": round(sum(minutes.values()), 1)}  # fmt: skip


def paper_runs(
    model: str, tmp: Path, cuda: bool, warmup: int, timed: int, data_dir: str | None = None
) -> list[dict[str, Any]]:
    """Both paper recipes (SimCSE first: DCLR's complementary model), each cell with its cost."""
    from dclr.data.corpus import load_corpus

    corpus = stand_in_corpus(tmp / "paper-corpus.txt", list(load_corpus("sts", data_dir)))
    rows = []
    for method in PAPER_RECIPES:
        cell = paper_cell(method, model, corpus, tmp / f"paper-{method}", cuda, warmup, timed,
                          data_dir)  # fmt: skip
        rows.append({**cell, "projection": paper_cost(cell)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The projection table's lines, and the sum of the pair."""
    lines = ["| recipe | batch | precision | ms/step | s/dev eval | steps | dev evals | "
             "s/checkpoint | steps min | evals min | cache min | checkpoints min | total min |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]  # fmt: skip
    for r in rows:
        p, m = r["projection"], r["projection"]["minutes"]
        each = f"{r['checkpoint_seconds']:.2f}" if "checkpoint_seconds" in r else "–"
        if r.get("checkpoint_background"):  # the loop's own share: the host copy
            each += f" ({r['checkpoint_capture_seconds']:.2f} in the loop)"
        lines.append(f"| {r['recipe']} | {r['batch']} | {r['precision']} | "
                     f"{1000 * r['seconds_per_step']:.1f} | {r['dev_eval_seconds']:.2f} | "
                     f"{p['steps']:,} | {p['evaluations']:,} | {each} | {m['steps']} | "
                     f"{m['dev_eval']} | {m['complementary_cache']} | "
                     f"{m.get('checkpoints', '–')} | {p['total_minutes']} |")  # fmt: skip
    total = sum(r["projection"]["total_minutes"] for r in rows)
    lines += ["", f"SimCSE then DCLR, one device: {total:.1f} min (best-model exports not "
              "included: " + ", ".join(f"{r['method']} {r['exports_seconds']:.1f} s for "
                                      f"{r['evaluations']} evaluations" for r in rows) + ")."]  # fmt: skip
    return lines
