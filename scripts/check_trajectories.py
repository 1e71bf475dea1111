"""Record or check per-step loss trajectories of the CPU recipes, bit for bit.

Each case trains a shipped recipe through the `dclr` command line with evaluation off and a
training record every step (`metrics.jsonl`), then compares every logged loss and loss part with
the trajectory recorded in `tests/training/trajectories/<case>.json` by exact float equality. The
recordings were made before the one-loop refactor (issue 14), so a pass means the refactor kept the
numbers. JSON floats round-trip exactly (Python writes the shortest repr that reads back equal).

    python scripts/check_trajectories.py                 # every full case (60-step recipes)
    python scripts/check_trajectories.py --short         # the few-step cases the test suite runs
    python scripts/check_trajectories.py simcse dclr     # some cases
    python scripts/check_trajectories.py --record ...    # (re)write the recordings

Runs are pinned to 2 intra-op threads (a float reduction's order can depend on the thread count).
The same code also gives other last bits on another CPU (vendor / kernel set: an AMD EPYC with
AVX512 differs from the machine of the first recordings at 1e-7), so a CPU kind can have its own
recordings, `<case>[-short]@<hardware_key>.json`, made the same way from the pre-refactor commit
(`git archive 7e02519`, this script copied in, `--record`; DualCSE then trained through
`dclr dualcse train`); `recording_path` picks this machine's when there is one. AMD EPYC AVX512
has them for every short case and for simcse, dclr, consert and dualcse_cross (issue 24; the
three supervised short cases, recorded only in their short form, from 7e02519 with the script of
3517e56, which recorded the originals). Note that
`--record` overwrites the file `recording_path` picks: on a new CPU kind it writes `<case>.json`,
to be renamed `<case>@<hardware_key>.json` (printed by `hardware_key`). Cases added later
(`per_kind`, e.g. `dclr_dropping`, DCLR with negatives dropped) pin the code of their day, not the
pre-refactor numbers: recorded per CPU kind only, and not run on a kind without its recording.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dclr.models.cpu_kind import hardware_key

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "tests" / "training" / "trajectories"
THREADS = "2"  # fixed: the reduction order of a matmul may depend on the thread count
# Training-record keys that measure time, not the computation: never compared.
TIMING_KEYS = frozenset(
    {"sentences_per_s", "items_per_s", "examples_per_s", "train_seconds", "cpu_seconds"}
)
QUIET = ("--set", "eval_steps=0", "--set", "test_eval=false", "--set", "log_steps=1")
SHORT_STEPS = 4  # the CI cases: a few steps of each recipe (max_steps changes the lr schedule)
DROPPING_PHI = "false_negative_threshold=0.3"


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # `dclr` arguments before `-o RUN_DIR`
    steps: int | None = None  # --max-steps (None: the recipe's own)
    # Added after the pre-refactor recordings: recorded per CPU kind only, from the code of its
    # day (`<case>[-short]@<hardware_key>.json`), never as an original; on a kind without its
    # recording it is not run (said so), and `--record` writes this kind's file.
    per_kind: bool = False


TRAIN = ("train",)
# DualCSE trained through `dclr dualcse train` (its own loop) when the recordings were made; since
# issue 14 every method trains through `dclr train` and the one loop.
DUALCSE_TRAIN = TRAIN
DUALCSE_QUIET = ("--set", "log_steps=1", "--set", "rte_eval=false")
CASES = (
    Case("simcse", (*TRAIN, "recipes/simcse_minilm_cpu.yaml", *QUIET)),
    Case("dclr", (*TRAIN, "recipes/dclr_minilm_cpu.yaml", *QUIET)),
    Case("consert", (*TRAIN, "recipes/consert_minilm_cpu.yaml", *QUIET)),
    # DualCSE (cross encoder): 20 of the recipe's 160 steps (~4 s a step on 2 CPU cores).
    Case(
        "dualcse_cross",
        (*DUALCSE_TRAIN, "recipes/dualcse/dualcse_cross_minilm_cpu.yaml", *DUALCSE_QUIET),
        steps=20,
    ),
    Case(
        "simcse_sup_inli",
        (*DUALCSE_TRAIN, "recipes/dualcse/simcse_sup_inli_minilm_cpu.yaml", *DUALCSE_QUIET),
        steps=20,
    ),
    Case("simcse_sup_snli", (*TRAIN, "recipes/simcse_sup_snli_minilm_cpu.yaml", *QUIET), 20),
    Case("consert_joint_snli", (*TRAIN, "recipes/consert_joint_snli_minilm_cpu.yaml", *QUIET), 20),
    # DCLR's weighting at work: at the recipe's phi 0.9 the frozen MiniLM never scores an in-batch
    # pair of the STS corpus that high, so the `dclr` case drops no negative and pins the noise
    # and the loss only. phi 0.3 drops 0.6-1.7 % of every step's negatives (session 40; recorded
    # on AVX512 Zen 4).
    Case(
        "dclr_dropping",
        (*TRAIN, "recipes/dclr_minilm_cpu.yaml", *QUIET, "--set", DROPPING_PHI),
        per_kind=True,
    ),
)


# Torch releases whose `--short` runs were measured bit-identical to a CPU kind's recordings (made
# under 2.13.0+cpu): the test compares under these too, not only under the recording's own torch.
# Measured on AMD EPYC Zen 4 (family 25 model 17; the key also covers Zen 5, not measured), one
# venv, PyPI's CUDA builds run on the CPU (2.10.0+cu128 ... 2.15.0+cu132), transformers 5.25.0.
# The build (+cpu, +cuXXX) is left out of the match: CUDA builds of 2.12.1 and 2.14.1 gave the +cpu
# build of 2.13.0's numbers. docs/code-health.md, "The recorded trajectories across torch
# releases". Not listed, measured: 2.6.0 draws other dropout masks from the same seed (its CPU
# `bernoulli_` changed in 2.7: losses differ by up to 0.29 from step 1); 2.7.0, 2.8.0 and 2.9.1
# differ in the last bits (at most 1.9e-6).
IDENTICAL_UNDER: dict[str, frozenset[str]] = {
    "AuthenticAMD-AVX512": frozenset({"2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"}),
}


def release(version: str) -> str:
    """A torch version without its build tag: "2.13.0+cpu" -> "2.13.0"."""
    return version.split("+", 1)[0]


# Recorded in their short form only (tests/training/trajectories/<case>-short.json)
SHORT_ONLY = frozenset(
    {"simcse_sup_inli", "simcse_sup_snli", "consert_joint_snli", "dclr_dropping"}
)


def command(case: Case, run_dir: Path, short: bool) -> list[str]:
    args = list(case.args)
    steps = SHORT_STEPS if short else case.steps
    if steps is not None:
        args += ["--max-steps", str(steps)]
    return [sys.executable, "-m", "dclr", *args, "-o", str(run_dir)]


def recording_path(case: Case, short: bool) -> Path:
    """This machine's recording (`<case>[-short]@<hardware_key>.json`, made from the pre-refactor
    commit on such a CPU) when there is one, else the original recording; a `per_kind` case has
    no original: always this kind's file, which may not exist."""
    stem = f"{case.name}{'-short' if short else ''}"
    own = RECORDINGS / f"{stem}@{hardware_key()}.json"
    return own if own.is_file() or case.per_kind else RECORDINGS / f"{stem}.json"


def comparable(recorded_torch: str) -> bool:
    """Whether the torch running here gives a recording's numbers bit for bit: the recording's own
    torch, or a release measured identical on this CPU kind (`IDENTICAL_UNDER`)."""
    import torch

    running = torch.__version__
    measured = IDENTICAL_UNDER.get(hardware_key(), frozenset())
    return running == recorded_torch or release(running) in measured


def run_case(case: Case, short: bool) -> list[dict[str, float]]:
    """Train the case in a fresh folder; its training records without timing keys."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": THREADS, "MKL_NUM_THREADS": THREADS, "PYTHONPATH": path}
    env.setdefault("TQDM_DISABLE", "1")
    with tempfile.TemporaryDirectory(prefix=f"traj-{case.name}-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = command(case, run_dir, short)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if k not in TIMING_KEYS and k != "kind"}
        for r in rows
        if r["kind"] == "train"
    ]


def compare(expected: list[dict[str, float]], got: list[dict[str, float]]) -> list[str]:
    """Every recorded key of every step must be present and exactly equal (new keys may appear)."""
    problems = []
    if len(expected) != len(got):
        problems.append(f"{len(got)} steps logged, {len(expected)} recorded")
    for old, new in zip(expected, got, strict=False):
        for key, value in old.items():
            if key not in new:
                problems.append(f"step {old['step']}: {key} not logged")
            elif new[key] != value:
                problems.append(f"step {old['step']}: {key} {new[key]!r} != recorded {value!r}")
    return problems


def largest_difference(
    expected: list[dict[str, float]], got: list[dict[str, float]]
) -> tuple[float, float]:
    """The largest absolute and relative difference over every recorded number both runs logged:
    last bits (~1e-6 relative) or another run (other random draws) at a glance."""
    largest_abs = largest_rel = 0.0
    for old, new in zip(expected, got, strict=False):
        for key, value in old.items():
            if key in new and new[key] != value:
                difference = abs(new[key] - value)
                largest_abs = max(largest_abs, difference)
                largest_rel = max(largest_rel, difference / abs(value) if value else float("inf"))
    return largest_abs, largest_rel


def check(case: Case, short: bool, record: bool) -> bool:
    import torch

    path = recording_path(case, short)
    if not record and not path.is_file():
        if not short and case.name in SHORT_ONLY:
            print(f"{case.name}: recorded short only (--short checks it): not run")
            return True
        if case.per_kind:
            print(f"{case.name}{' (short)' if short else ''}: not recorded on this CPU kind "
                  f"({hardware_key()}): not run; `--record` writes {path.name}")  # fmt: skip
            return True
        print(f"{case.name}{' (short)' if short else ''}: no recording {path}: FAILS")
        return False
    rows = run_case(case, short)
    if record:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"case": case.name, "torch": torch.__version__, "threads": int(THREADS),
                   "hardware": hardware_key()}  # fmt: skip
        path.write_text(json.dumps({**payload, "steps": rows}, indent=1) + "\n")
        print(f"{case.name}{' (short)' if short else ''}: recorded {len(rows)} steps -> {path}")
        return True
    expected = json.loads(path.read_text())["steps"]
    problems = compare(expected, rows)
    label = f"{case.name}{' (short)' if short else ''}"
    if problems:
        absolute, relative = largest_difference(expected, rows)
        print(f"{label}: DIFFERS ({len(problems)} problems; largest difference {absolute:.3g}, "
              f"{relative:.3g} relative)")  # fmt: skip
        for line in problems[:10]:
            print("   ", line)
        return False
    keys = sorted({k for r in expected for k in r} - {"step"})
    print(f"{label}: {len(rows)} steps bit-identical ({', '.join(keys)})")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"of {[c.name for c in CASES]} (default: all)")
    parser.add_argument("--short", action="store_true", help=f"{SHORT_STEPS}-step cases")
    parser.add_argument("--record", action="store_true", help="write the recordings instead")
    args = parser.parse_args()
    chosen = [c for c in CASES if not args.cases or c.name in args.cases]
    results = [check(case, args.short, args.record) for case in chosen]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
