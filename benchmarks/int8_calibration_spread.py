"""How much of int8's STS is the engine, and how much the calibration draw (issue 46 item 3)?

dclr's static int8 (`dclr.models.static_int8`) and sentence-transformers' OpenVINO static int8
(`export_static_quantized_openvino_model`, NNCF) are each calibrated on the same K seeded draws of
--calibration-n distinct STS-B train sentences (train: never scored), and each quantised model is
scored on the 7 STS test tasks (all 26,798 sentences). Paired by draw: the mean ± std of each
engine's average, the paired differences with their 95 % t-intervals, and dclr fp32 once for
reference. dclr's rows: its static int8 as shipped (SmoothQuant, then calibrated ranges) and three
ablations: without SmoothQuant (the engine before it), with bias correction added
(`static_int8.bias_shifts`), and with the second feed-forward layer smoothing its own input
instead of reading the first's uint8 output (`fuse_feed_forward=False`, NNCF's layout). The
default calibration of `--precision int8` (32 built-in sentences) is scored beside them. Run it
in the OpenVINO venv (benchmarks/README.md), dclr from the checkout:

    PYTHONPATH=src ~/venvs/openvino/bin/python benchmarks/int8_calibration_spread.py \\
        --data-dir ../shared/data --draws 5

Writes benchmarks/results/int8_calibration_spread@<table_name>.{json,md}. Without the OpenVINO
venv only dclr's rows are measured (the peer is reported as skipped, with the reason).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from int8_encode import (
    BATCH,
    MODEL,
    RESULTS,
    ROOT,
    calibration_draw,
    st_openvino_int8,
    static_int8_encoder,
)
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.data.paths import resolve_data_dir
from dclr.evaluation.sts import StsEvaluator
from dclr.models.cpu_kind import cpu_model, hardware_key, load_average, table_name
from dclr.models.precision import load_inference_encoder

# The experiment reports' statistics (the lab package); the OpenVINO venv runs dclr from src/
# without it installed, so it is read from the checkout.
sys.path.insert(1, str(ROOT / "lab" / "src"))
from dclr_lab.stats import Paired, Stat  # noqa: E402

# dclr's static int8 rows: (key, column title, quantize_static options)
VARIANTS = (
    ("dclr_int8", "dclr static int8", {}),
    ("dclr_int8_unsmoothed", "without SmoothQuant", {"smooth_alpha": None}),
    ("dclr_int8_bias_corrected", "with bias correction", {"bias_correction": True}),
    # NNCF's layout: the second feed-forward layer smooths its own input (~20 % slower)
    ("dclr_int8_unfused", "second feed-forward smoothed", {"fuse_feed_forward": False}),
)
SHIPPED = VARIANTS[0][0]


def dclr_encoder(texts: list[str] | None, **options: Any):  # noqa: ANN201
    """dclr fp32 (texts None), or its static int8 calibrated on `texts` (packed, as served),
    with `quantize_static`'s `options`."""
    if texts is not None:
        return static_int8_encoder(texts, **options)
    encoder = load_inference_encoder(MODEL, "mean", "fp32", packing=True)
    return lambda s: encoder.encode(s, batch_size=BATCH, normalize=True)


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean and 95 % t-interval of b - a, paired by position (`dclr_lab.stats.Paired`)."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    d = Paired.of(dict(enumerate(a)), dict(enumerate(b)))
    assert d is not None, "paired: no values"
    return {"mean": d.mean, "low": d.low, "high": d.high, "n": d.n}


def spread(values: list[float]) -> str:
    stat = Stat.of(values)
    return "–" if stat is None else stat.fmt(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data")
    )
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--calibration-n", type=int, default=300)
    parser.add_argument("--out", default=str(RESULTS / f"int8_calibration_spread@{table_name()}"))
    args = parser.parse_args()
    origin, load_start = provenance(), load_average()
    evaluator = StsEvaluator(resolve_data_dir(args.data_dir), mode="test", geometry=False)

    def score(encode) -> dict[str, float]:  # noqa: ANN001
        result = evaluator(encode)
        return {t: float(result[t]) for t in (*evaluator.tasks, "avg")}  # type: ignore[misc]

    tic = time.perf_counter()
    fp32 = score(dclr_encoder(None))
    builtin = score(dclr_encoder_default())
    rows: list[dict] = []
    skipped = None
    for seed in range(args.draws):
        texts = calibration_draw(args.data_dir, args.calibration_n, seed)
        row: dict[str, Any] = {"seed": seed}
        for key, _, options in VARIANTS:
            row[key] = score(dclr_encoder(texts, **options))
        if skipped is None:
            try:
                with tempfile.TemporaryDirectory(prefix="dclr-ov-") as work:
                    row["st_openvino_int8"] = score(st_openvino_int8(Path(work), texts))
            except ImportError as err:
                skipped = f"{type(err).__name__}: {err}"[:400]
        rows.append(row)
        print(seed, {k: v["avg"] for k, v in row.items() if isinstance(v, dict)}, flush=True)
    report = {
        "hardware_key": hardware_key(),
        "cpu_model": cpu_model(),
        "load_start": load_start,
        "load_end": load_average(),
        "seconds": round(time.perf_counter() - tic, 1),
        "calibration_n": args.calibration_n,
        "dclr_fp32": fp32,
        "dclr_int8_builtin_calibration": builtin,
        "draws": rows,
        "peer_skipped": skipped,
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    report["differences"] = differences(rows, skipped is None)
    out = Path(args.out)
    write_text(out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    write_text(out.with_suffix(".md"), markdown(report))
    print(markdown(report))


def dclr_encoder_default():  # noqa: ANN201 - an encode function
    """`--precision int8` as shipped: smoothed and calibrated on its 32 built-in sentences."""
    encoder = load_inference_encoder(MODEL, "mean", "int8", packing=True)
    return lambda s: encoder.encode(s, batch_size=BATCH, normalize=True)


def differences(rows: list[dict], peer: bool) -> dict[str, dict[str, float]]:
    """Paired by draw: each ablation - the shipped engine, and the peer - each dclr row."""

    def avg(key: str) -> list[float]:
        return [r[key]["avg"] for r in rows]

    out = {f"{key} - {SHIPPED}": paired(avg(SHIPPED), avg(key)) for key, *_ in VARIANTS[1:]}
    if peer:
        for key, *_ in VARIANTS:
            out[f"st_openvino_int8 - {key}"] = paired(avg(key), avg("st_openvino_int8"))
    return out


def markdown(report: dict) -> str:
    rows = report["draws"]
    peer = report["peer_skipped"] is None
    columns = [(key, title) for key, title, _ in VARIANTS]
    if peer:
        columns.append(("st_openvino_int8", "ST OpenVINO static int8"))
    lines = [
        f"# int8 STS test average by calibration draw ({report['hardware_key']})",
        "",
        f"{report['cpu_model']}; load average {report['load_start']} at start, "
        f"{report['load_end']} at end; {report['calibration_n']} distinct STS-B train sentences "
        f"per draw; `{report['command']}`.",
        "",
        f"dclr fp32: **{report['dclr_fp32']['avg']:.2f}**; dclr int8 as shipped with its built-in "
        f"calibration (32 sentences): {report['dclr_int8_builtin_calibration']['avg']:.2f}.",
        "",
        "| draw (seed) | " + " | ".join(title for _, title in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for r in rows:
        cells = [f"{r[key]['avg']:.2f}" for key, _ in columns]
        lines.append(f"| {r['seed']} | " + " | ".join(cells) + " |")
    cells = [spread([r[key]["avg"] for r in rows]) for key, _ in columns]
    lines.append("| mean ± std | " + " | ".join(cells) + " |")
    lines += ["", "Paired by draw (95 % t-interval):", ""]
    for name, d in report["differences"].items():
        lines.append(
            f"- {name}: **{d['mean']:+.2f}** ({d['low']:+.2f} to {d['high']:+.2f}, n = {d['n']})"
        )
    if not peer:
        lines += ["", f"peer skipped: {report['peer_skipped']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
