"""Atomic training checkpoints: model (safetensors), optimizer, scheduler, RNG, position, config.

A checkpoint is written into `<name>.tmp/` and renamed to `step-XXXXXXXX/` only when complete, then
the `latest` pointer file is replaced atomically; a crash at any moment leaves the previous
checkpoint intact. Optimizer/scheduler/RNG states are loaded with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

MODEL_FILE = "model.safetensors"
TRAINER_FILE = "trainer.pt"
STATE_FILE = "state.json"
LATEST = "latest"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    keep: int = 2,
    extra: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write checkpoint `root/step-XXXXXXXX` atomically and prune all but the newest `keep`.

    `extra` names modules trained alongside the model (e.g. the NLI head) that are saved too, each
    as `<name>.safetensors`, and restored by `load_checkpoint(..., extra=...)`."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f"step-{step:08d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, str(tmp / MODEL_FILE))
    for name, module in (extra or {}).items():
        save_model(module, str(tmp / f"{name}.safetensors"))
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
        },
        tmp / TRAINER_FILE,
    )
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2))
    for f in tmp.iterdir():
        with f.open("rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    write_atomic(root / LATEST, final.name)
    for old in sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))[
        :-keep
    ]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under root (the `latest` pointer, else the highest step)."""
    pointer = root / LATEST
    if pointer.is_file():
        path = root / pointer.read_text().strip()
        if (path / STATE_FILE).is_file():
            return path
    done = sorted(
        p for p in root.glob("step-*") if (p / STATE_FILE).is_file() and not p.name.endswith(".tmp")
    )
    return done[-1] if done else None


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, torch.nn.Module] | None = None,
) -> dict[str, Any]:
    """Restore everything saved by save_checkpoint; returns the saved state dict."""
    load_model(model, str(path / MODEL_FILE))
    for name, module in (extra or {}).items():
        file = path / f"{name}.safetensors"
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: this run trains a {name!r} but the checkpoint has none (written by an "
                f"older dclr?); start the run again without --resume"
            )
        load_model(module, str(file))
    trainer = torch.load(path / TRAINER_FILE, weights_only=True, map_location="cpu")
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])
    return json.loads((path / STATE_FILE).read_text())
