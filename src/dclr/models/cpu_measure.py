"""Measure this machine's CPU inference policy: which fp32 linear kernel, from how many tokens a
pass takes a second thread, which int8 engine (`dclr.models.cpu_kind.CpuPolicy`).

The measurements run on a real encoder, `load_inference_encoder(model, ..., packing=True)`:
- the kernel: one text at a time on 1 and 2 intra-op threads (median ms) and a bulk pass on 2,
  for oneDNN with packed weights and for PyTorch's BLAS ("aten"); oneDNN is chosen when the
  geometric mean of its three speedups is at least 1 (`kernel_choice`);
- the thread threshold: passes of 1-64 texts, each timed on 1 and 2 threads in turn (paired: the
  speedup and its 95 % interval over the passes; several runs, each in a fresh process, pooled,
  the interval then over the runs); a pass runs on two from the smallest size where
  two are `SECOND_THREAD_SPEEDUP` times as fast and stay so (`one_thread_below`);
- the int8 engine: a bulk pass of each, and how close its vectors come to fp32's
  (`int8_engines`; chosen by `int8_engine`: the dynamic one only where it is both much faster and
  as faithful); beside it, whether the static engine's kernel saturates on this CPU
  (`int8_pairs_saturate`, recorded, not a choice).

`benchmarks/linear_kernels.py --record` runs this on the STS sample and records the result in the
package for a CPU kind (`cpu_policies/<recording_name>.json`); `dclr cpu-policy --measure` runs it on
the user's machine and keeps it in the user's cache, for a kind the package has no recording of.
The core returns data; rendering is the caller's.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

# The dynamic engine must be this much faster to be chosen: the static one is the faithful one
# (MiniLM: mean cosine 0.995 to the fp32 vectors against 0.974, STS +0.06 against -0.44). Our
# choice.
DYNAMIC_INT8_SPEEDUP = 1.2
# ... and as faithful: its mean cosine to the fp32 vectors on the measured sentences at least this.
# Between the two engines measured on MiniLM (static 0.9945-0.9950, its STS -0.03 / +0.06;
# dynamic 0.9735, STS -0.44, past issue 46's 0.3 from fp32), so a kind where fbgemm is fast but
# rounds coarsely keeps the static engine. Our choice.
INT8_COSINE_FLOOR = 0.99
# A second thread must cut a pass's time by a quarter to be worth waking: in a server it competes
# with the event loop for the same cores (dclr.serving.encoding.pass_threads). Our choice.
SECOND_THREAD_SPEEDUP = 1.33
PASS_SIZES = (1, 2, 4, 8, 16, 32, 64)  # texts per pass in the thread-scaling measurement

Step = Callable[[str], None]  # told what is measured next (a progress line)


def seconds(f: Callable[..., Any], *args: Any, budget_s: float = 0.3) -> float:
    """Median seconds of f(*args) over repetitions (at least 5, for at least budget_s), after 3
    unmeasured calls."""
    for _ in range(3):
        f(*args)
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextmanager
def threads_restored() -> Iterator[None]:
    """The process's intra-op thread count as it was, whatever the measurement set."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def kernel_speeds(model: str, sentences: Sequence[str], singles: int = 200) -> dict:
    """Per kernel: the median ms of one text (the first `singles` texts, 1 and 2 threads) and the
    bulk rate of `sentences` (2 threads); each speedup (aten time / oneDNN time, bulk: oneDNN
    rate / aten rate) and the largest |difference| between the two kernels' unit vectors. Only
    aten, and no speedups, where this torch build has no oneDNN linear."""
    from dclr.models import onednn
    from dclr.models.precision import load_inference_encoder

    out: dict = {}
    vectors = {}
    kernels = ("aten", "onednn") if onednn.available() else ("aten",)
    with threads_restored():
        for kernel in kernels:
            e = load_inference_encoder(model, "mean", "fp32", packing=True, linear_kernel=kernel)
            row: dict = {}
            lone = [list(sentences[i : i + 1]) for i in range(min(singles, len(sentences)))]
            for threads in (1, 2):
                torch.set_num_threads(threads)
                row[f"one_text_ms_{threads}t"] = round(1000 * statistics.median(
                    [seconds(e.encode, t, budget_s=0.0) for t in lone]), 2)  # fmt: skip
            torch.set_num_threads(2)
            e.encode(list(sentences[:256]), normalize=True)
            start = time.perf_counter()
            vectors[kernel] = e.encode(list(sentences), normalize=True)
            row["bulk_texts_per_s"] = round(len(sentences) / (time.perf_counter() - start), 1)
            out[kernel] = row
    if "onednn" not in out:  # this torch build has no oneDNN linear: nothing to compare
        out["speedup"] = {}
        return out
    out["max_abs_diff"] = float(np.abs(vectors["aten"] - vectors["onednn"]).max())
    out["speedup"] = {k: round(out["aten"][k] / out["onednn"][k], 2) for k in out["aten"]
                      if k.startswith("one_text")}  # fmt: skip
    out["speedup"]["bulk"] = round(out["onednn"]["bulk_texts_per_s"] /
                                   out["aten"]["bulk_texts_per_s"], 2)  # fmt: skip
    return out


def thread_scaling(
    model: str,
    sentences: Sequence[str],
    kernel: str,
    sizes: Sequence[int] = PASS_SIZES,
    passes: int = 40,
    rounds: int = 5,
    runs: int = 1,
) -> list[dict]:
    """Passes of each size in texts (packed, `kernel`; sizes above len(sentences) left out), up
    to `passes` per size, each timed `rounds` times on 1 and 2 threads in turn (`pass_times`);
    with runs > 1, that many runs, each in a fresh process (`in_fresh_process`), pooled
    (`scaling_rows`): one process's runs share its state (where its memory and threads landed),
    and its readings of a size moved between processes ~2.5 times as much as their interval
    over passes said (docs/performance.md)."""
    args = (model, list(sentences), kernel, tuple(sizes), passes, rounds)
    if runs == 1:
        return scaling_rows([pass_times(*args)])
    return scaling_rows([in_fresh_process(pass_times, *args) for _ in range(runs)])


def pass_times(
    model: str, sentences: Sequence[str], kernel: str, sizes: Sequence[int], passes: int,
    rounds: int,
) -> dict[int, dict]:  # fmt: skip
    """One run of the pass sizes: per size in texts, the median tokens of a pass and each pass's
    median seconds on 1 and on 2 threads, timed in turn (1-2, 2-1, ...: the two counts share
    the machine's state, and the thread pool switches per pass as a server switches it,
    `dclr.serving.encoding`)."""
    from dclr.models.precision import load_inference_encoder

    e = load_inference_encoder(model, "mean", "fp32", packing=True, linear_kernel=kernel)
    out: dict[int, dict] = {}
    with threads_restored():
        for texts in [n for n in sizes if n <= len(sentences)]:
            last = min(len(sentences), passes * texts) - texts
            chunks = [list(sentences[i : i + texts]) for i in range(0, last + 1, texts)]
            times: dict[int, list[float]] = {1: [], 2: []}
            for chunk in chunks:
                taken = alternating_seconds(e.encode, chunk, rounds)
                for threads in (1, 2):
                    times[threads].append(taken[threads])
            tokens = statistics.median(sum(map(len, e.token_ids(p))) for p in chunks)
            out[texts] = {"tokens": int(tokens), **times}
    return out


def scaling_rows(runs: Sequence[dict[int, dict]]) -> list[dict]:
    """Per size: the median ms on each thread count over every pass of every run, and the
    speedup of two threads, the geometric mean of every pass's ratio, with its 95 % interval:
    over the passes for one run (`paired_speedup`), over the runs' own speedups for several
    (`runs_speedup`; those are kept as speedup_2t_runs)."""
    rows = []
    for texts in runs[0]:
        one = [t for run in runs for t in run[texts][1]]
        two = [t for run in runs for t in run[texts][2]]
        speedup, interval = paired_speedup(one, two)
        row: dict[str, Any] = {"texts": texts, "tokens": runs[0][texts]["tokens"],
                               "ms_1t": round(1000 * statistics.median(one), 2),
                               "ms_2t": round(1000 * statistics.median(two), 2)}  # fmt: skip
        if len(runs) > 1:
            each = [paired_speedup(run[texts][1], run[texts][2])[0] for run in runs]
            interval = runs_speedup(each)[1]
            row["speedup_2t_runs"] = [round(x, 3) for x in each]
        rows.append({**row, "speedup_2t": round(speedup, 2),
                     "speedup_2t_ci95": [round(x, 2) for x in interval]})  # fmt: skip
    return rows


def in_fresh_process(f: Callable[..., Any], *args: Any) -> Any:
    """f(*args) in a new Python process (multiprocessing's spawn: nothing of this one's state),
    its result handed back (pickled between our own two processes)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(f, *args).result()


def runs_speedup(speedups: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The geometric mean of several runs' speedups and its 95 % t-interval over the runs (on
    the logarithms), as `paired_speedup` takes one over pairs."""
    return paired_speedup(list(speedups), [1.0] * len(speedups))


def alternating_seconds(f: Callable[[Any], Any], arg: Any, rounds: int) -> dict[int, float]:
    """Median seconds of f(arg) on 1 and on 2 intra-op threads, timed in turn for `rounds`
    rounds (1-2, then 2-1, ...) after one unmeasured call on each."""
    times: dict[int, list[float]] = {1: [], 2: []}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        f(arg)
    for r in range(rounds):
        for threads in (1, 2) if r % 2 == 0 else (2, 1):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            f(arg)
            times[threads].append(time.perf_counter() - start)
    return {threads: statistics.median(t) for threads, t in times.items()}


def paired_speedup(one: Sequence[float], two: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The speedup of two threads over one from paired times (the same passes): the geometric
    mean of one[i] / two[i], and its 95 % t-interval (on the logarithms; a single pair has an
    interval of itself)."""
    from scipy.stats import t

    logs = np.log(np.asarray(one, dtype=float) / np.asarray(two, dtype=float))
    mean = float(logs.mean())
    if len(logs) < 2:
        return math.exp(mean), (math.exp(mean), math.exp(mean))
    half = float(t.ppf(0.975, len(logs) - 1)) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def int8_engines(model: str, sentences: Sequence[str]) -> dict[str, dict[str, float]]:
    """Each int8 engine this torch build has (static needs oneDNN's int8 linear), on `sentences`:
    {"texts_per_s": its bulk rate (2 threads, packed), "mean_cosine_to_fp32": how close its unit
    vectors come to the fp32 encoder's, sentence by sentence (the timed pass's own vectors)}."""
    from dclr.models import static_int8
    from dclr.models.precision import load_inference_encoder, quantize_int8

    texts = list(sentences)
    rates, cosines = {}, {}
    engines = ("static", "dynamic") if static_int8.available() else ("dynamic",)
    with threads_restored():
        torch.set_num_threads(2)
        fp32 = load_inference_encoder(model, "mean", "fp32", packing=True, linear_kernel="aten")
        reference = fp32.encode(texts, normalize=True)
        del fp32
        for engine in engines:
            e = load_inference_encoder(model, "mean", "fp32", packing=True, linear_kernel="aten")
            quantize_int8(e, engine=engine)
            e.encode(texts[:256])
            start = time.perf_counter()
            vectors = e.encode(texts, normalize=True)
            rates[engine] = round(len(texts) / (time.perf_counter() - start), 1)
            cosines[engine] = round(float((vectors * reference).sum(1).mean()), 4)
    return {"texts_per_s": rates, "mean_cosine_to_fp32": cosines}


def int8_engine(rates: dict, cosines: dict | None = None) -> str:
    """ "dynamic" only when it is at least `DYNAMIC_INT8_SPEEDUP` times the static engine's rate
    and, where its fidelity was measured (`cosines`: mean cosine to fp32), at least
    `INT8_COSINE_FLOOR` faithful; or when it is the only one measured."""
    if "static" not in rates:
        return "dynamic"
    if cosines and cosines.get("dynamic", 0.0) < INT8_COSINE_FLOOR:
        return "static"
    return "dynamic" if rates["dynamic"] >= DYNAMIC_INT8_SPEEDUP * rates["static"] else "static"


def one_thread_below(scaling: list[dict]) -> int:
    """The smallest pass (tokens) from which two threads are at least `SECOND_THREAD_SPEEDUP`
    times as fast as one, and stay so for every larger pass measured (the largest + 1 if none)."""
    below = scaling[-1]["tokens"] + 1
    for row in reversed(scaling):
        if row["speedup_2t"] < SECOND_THREAD_SPEEDUP:
            break
        below = row["tokens"]
    return below


def kernel_choice(speedups: dict) -> str:
    """oneDNN when the geometric mean of its speedups (one text on 1 and 2 threads, the bulk
    pass) is at least 1, else aten (also with none: oneDNN was not measured)."""
    if not speedups:
        return "aten"
    return "onednn" if statistics.geometric_mean(speedups.values()) >= 1.0 else "aten"


def measure(
    model: str,
    sentences: Sequence[str],
    singles: int = 200,
    passes: int = 40,
    step: Step | None = None,
    scaling_runs: int = 1,
) -> dict:
    """The three measurements above on `model` and `sentences` (`singles` one-text passes per
    kernel and thread count, up to `passes` passes per size, the sizes `scaling_runs` times
    over): {"encoder": kernel_speeds,
    "thread_scaling": on the chosen kernel, "int8_bulk_texts_per_s" and
    "int8_mean_cosine_to_fp32": int8_engines, "int8_pairs_saturate"}."""
    tell = step or (lambda _: None)
    tell("fp32 kernels: oneDNN against PyTorch's BLAS")
    report: dict = {"encoder": kernel_speeds(model, sentences, singles)}
    chosen = kernel_choice(report["encoder"]["speedup"])
    tell(f"pass size against threads ({chosen}" + f", {scaling_runs} runs" * (scaling_runs > 1)
         + ")")  # fmt: skip
    report["thread_scaling"] = thread_scaling(model, sentences, chosen, passes=passes,
                                              runs=scaling_runs)  # fmt: skip
    tell("int8 engines")
    engines = int8_engines(model, sentences)
    report["int8_bulk_texts_per_s"] = engines["texts_per_s"]
    report["int8_mean_cosine_to_fp32"] = engines["mean_cosine_to_fp32"]
    report["int8_pairs_saturate"] = int8_pairs_saturate()
    return report


def int8_pairs_saturate() -> bool | None:
    """Whether the static int8 kernel saturates on this CPU (`static_int8.pairs_saturate`: no
    VNNI); None where this build has no static int8."""
    from dclr.models import static_int8

    return static_int8.pairs_saturate() if static_int8.available() else None


def policy_record(report: dict) -> dict:
    """This kind's choices from a `measure` report (with the machine's fields beside it: its
    hardware_key, cpu, cpu_model, torch, load_start, load_end and command): the fp32 kernel,
    the pass size from which a pass runs on two threads, the int8 engine, and the figures that
    chose them. What `cpu_kind.read_policy` reads."""
    speedups = report["encoder"]["speedup"]
    mean = round(statistics.geometric_mean(speedups.values()), 3) if speedups else None
    return {"linear_kernel": kernel_choice(speedups),
            "one_thread_below_tokens": one_thread_below(report["thread_scaling"]),
            "int8_engine": int8_engine(report["int8_bulk_texts_per_s"],
                                       report.get("int8_mean_cosine_to_fp32")),
            "int8_bulk_texts_per_s": report["int8_bulk_texts_per_s"],
            "int8_mean_cosine_to_fp32": report.get("int8_mean_cosine_to_fp32"),
            "int8_cosine_floor": INT8_COSINE_FLOOR,
            "int8_pairs_saturate": report["int8_pairs_saturate"],
            "dynamic_int8_speedup_needed": DYNAMIC_INT8_SPEEDUP,
            "second_thread_speedup_needed": SECOND_THREAD_SPEEDUP,
            "thread_scaling": report["thread_scaling"],
            "onednn_speedup_geomean": mean, "speedups": speedups,
            "hardware_key": report["hardware_key"], "cpu": report["cpu"],
            "cpu_model": report["cpu_model"],
            "torch": report["torch"], "load": [report["load_start"], report["load_end"]],
            "measured": time.strftime("%Y-%m-%d"), "command": report["command"]}  # fmt: skip


# `dclr cpu-policy --measure`: a short run (a minute or two for MiniLM on two cores).
QUICK = {"texts": 1000, "singles": 64, "passes": 10}


def sample_sentences(data_dir: str | Path | None, n: int) -> tuple[list[str], str]:
    """`n` STS sentences (seeded, as benchmarks/linear_kernels.py samples them) when the
    evaluation data is found (`data_dir`, else $DCLR_DATA_DIR or the cache); without it, the
    built-in calibration sentences repeated to `n`. Returns them and what they are."""
    from dclr.data.paths import resolve_data_dir
    from dclr.data.sts import all_sentences
    from dclr.errors import InputError
    from dclr.models.smoothing import CALIBRATION_SENTENCES

    try:
        root = resolve_data_dir(data_dir)
    except InputError:
        if data_dir is not None:
            raise
        texts = [CALIBRATION_SENTENCES[i % len(CALIBRATION_SENTENCES)] for i in range(n)]
        return texts, f"the {len(CALIBRATION_SENTENCES)} built-in calibration sentences, to {n}"
    pool = all_sentences(root)
    return random.Random(0).sample(pool, min(n, len(pool))), f"{n} STS sentences from {root}"


def measure_this_machine(
    model: str, data_dir: str | Path | None = None, step: Step | None = None
) -> tuple[dict, Path]:
    """A short `measure` (`QUICK`) of this machine, its policy record written atomically to this
    user's cache for its CPU kind (`cpu_kind.user_policy_path`), which `cpu_policy()` then
    follows where the package has no recording of the kind. Returns the record and its path."""
    from dclr.atomic import write_text
    from dclr.models import cpu_kind

    sentences, what = sample_sentences(data_dir, QUICK["texts"])
    start = cpu_kind.load_average()
    report = measure(model, sentences, QUICK["singles"], QUICK["passes"], step)
    key = cpu_kind.hardware_key()
    report.update({"hardware_key": key, "cpu": cpu_kind.cpu_description(),
                   "cpu_model": cpu_kind.cpu_model(), "torch": torch.__version__,
                   "load_start": start, "load_end": cpu_kind.load_average(),
                   "command": f"dclr cpu-policy --measure --model {model}"})  # fmt: skip
    record = {**policy_record(report), "model": model, "sentences": what}
    path = cpu_kind.user_policy_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=2) + "\n")
    cpu_kind.cpu_policy.cache_clear()
    return record, path
