"""Atomic, verified training checkpoints: model (safetensors), optimizer, scheduler, RNG, position.

A checkpoint is written into `<name>.tmp/`, its `manifest.json` (size and sha256 of every file) is
written last, and the folder is renamed to `step-XXXXXXXX/` only when complete; then the `latest`
pointer file is replaced atomically. A crash at any moment leaves the previous checkpoint intact,
and `latest` never names a folder that pruning removed (the new checkpoint is never pruned).

Resuming (`resume_checkpoint`) checks the newest checkpoint against its manifest before loading it.
A damaged one (a truncated `model.safetensors`, `trainer.pt` or `state.json`) is reported by file
name (`CorruptCheckpointWarning`), renamed to `step-XXXXXXXX.corrupt` so it is never picked again,
and the newest intact checkpoint is loaded instead; the run then follows the trajectory the
uninterrupted run took from that step. A checkpoint whose `run_id` is not the run folder's is
refused, and so is one whose run identity (`run_identity`: its method and its config's sections,
from the config every checkpoint saves) differs from the resuming config's: a run folder never
mixes two methods. Optimizer/scheduler/RNG states are loaded with `torch.load(weights_only=True)`.

Writing is two parts: `capture` takes what a checkpoint holds at one step, and `write_checkpoint`
puts it on disk. `save_checkpoint` does both at once; with `run.async_checkpoints` the loop
writes a `host_copy` of the capture on a thread while training goes on
(`dclr.training.background`). Both write the same bytes for the same state.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from dclr import atomic
from dclr import distributed as dist
from dclr.errors import ConfigError

MODEL_FILE = "model.safetensors"
TRAINER_FILE = "trainer.pt"
STATE_FILE = "state.json"
MANIFEST = "manifest.json"
LATEST = "latest"
CORRUPT_SUFFIX = ".corrupt"
_STEP_DIR = re.compile(r"step-(\d{8})")


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint failed verification and was skipped; the message names the file."""


class CorruptCheckpoint(ConfigError):
    """No intact checkpoint to resume from; the message names every bad file."""


def _fsync_dir(path: Path) -> None:
    atomic.fsync_dir(path)


def write_atomic(path: Path, text: str) -> None:
    atomic.write_text(path, text)


def checkpoint_dirs(root: Path) -> list[Path]:
    """Complete checkpoint folders under root (`step-XXXXXXXX`), oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name))


def _step_of(path: Path) -> int:
    return int(path.name.split("-")[1])


def rng_state(own_device: bool = False) -> dict[str, Any]:
    """The CPU's random state and the GPUs': every visible one's, or with `own_device` only
    this process's current one (a torchrun rank's, restored onto whichever device the rank
    has when it resumes)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and own_device:
        state["cuda_device"] = torch.cuda.get_rng_state()
    elif torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rank_rng_states() -> list[dict[str, Any]] | None:
    """Every rank's `rng_state()` in rank order, gathered (a collective: every rank calls it);
    None in one process."""
    if dist.world_size() == 1:
        return None
    import torch.distributed as torch_dist

    states: list[Any] = [None] * dist.world_size()
    torch_dist.all_gather_object(states, rng_state(own_device=True))
    return states


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "cuda_device" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_device"])  # this process's current device


def checkpoint_bytes(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, torch.nn.Module] | None = None,
) -> int:
    """About the bytes a checkpoint takes: the weights and the optimizer's state tensors."""
    states = [model.state_dict(), *(m.state_dict() for m in (extra or {}).values())]
    return _state_bytes(states, optimizer.state_dict()["state"])


def _state_bytes(weights: list[dict[str, torch.Tensor]], optimizer_state: dict) -> int:
    """The bytes of the tensors in `weights` (state dicts) and in the optimizer's state."""
    return sum(t.numel() * t.element_size() for t in _tensors([weights, optimizer_state]))


@dataclass
class CheckpointContent:
    """What a checkpoint holds, taken from the training objects at one step (`capture`)."""

    model: dict[str, torch.Tensor]  # the model's state dict
    extra: dict[str, dict[str, torch.Tensor]]  # each extra module's state dict, by name
    trainer: dict[str, Any]  # optimizer, scheduler, RNG (and fp16's scaler): trainer.pt
    bytes: int  # about what it takes on disk: the weights and the optimizer's state tensors


class _Weights(torch.nn.Module):
    """A captured state dict where safetensors' `save_model` wants a module: it asks only for
    `state_dict()`, and drops the names of tensors that share storage as it does for the model."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self._captured = state

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return dict(self._captured)


def _host_copy(value: Any, storages: dict[tuple[int, str], torch.UntypedStorage]) -> Any:
    """A deep copy of `value` with every tensor copied to host memory. Tensors that share storage
    share their copy (`storages`: tied weights are still written once), and an object met twice
    is copied once (`copy.deepcopy`'s memo: pickle then writes the same bytes)."""
    memo: dict[int, Any] = {}
    for tensor in _tensors(value):
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), str(storage.device))
        if key not in storages:
            storages[key] = storage.cpu() if storage.device.type != "cpu" else storage.clone()
        host = torch.empty(0, dtype=tensor.dtype)
        memo[id(tensor)] = host.set_(
            storages[key], tensor.storage_offset(), tensor.size(), tensor.stride()
        )
    return copy.deepcopy(value, memo)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors inside dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def capture(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, torch.nn.Module] | None = None,
    scaler: torch.amp.GradScaler | None = None,
    rng_ranks: list[dict[str, Any]] | None = None,
) -> CheckpointContent:
    """What a checkpoint of this moment holds. It refers to the live tensors: write it before
    the next step, or write its `host_copy`. `rng_ranks`: every rank's random-number state, in
    rank order, under torchrun (`rank_rng_states`; each rank resumes its own dropout stream)."""
    state = optimizer.state_dict()
    model_state = model.state_dict()
    extra_states = {name: module.state_dict() for name, module in (extra or {}).items()}
    trainer: dict[str, Any] = {
        "optimizer": state,
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(),
        **({"scaler": scaler.state_dict()} if scaler is not None else {}),
        **({"rng_ranks": rng_ranks} if rng_ranks is not None else {}),
    }
    return CheckpointContent(
        model=model_state,
        extra=extra_states,
        trainer=trainer,
        bytes=_state_bytes([model_state, *extra_states.values()], state["state"]),
    )


def host_copy(content: CheckpointContent) -> CheckpointContent:
    """`content` with every tensor copied to host memory, so training may go on while the copy
    is written."""
    storages: dict[tuple[int, str], torch.UntypedStorage] = {}
    return CheckpointContent(
        model=_host_copy(content.model, storages),
        extra=_host_copy(content.extra, storages),
        trainer=_host_copy(content.trainer, storages),
        bytes=content.bytes,
    )


def checkpoint_path(root: Path, step: int) -> Path:
    """The folder the checkpoint of `step` is written to under `root`."""
    return root / f"step-{step:08d}"


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    keep: int = 2,
    extra: dict[str, torch.nn.Module] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> Path:
    """Write checkpoint `root/step-XXXXXXXX` atomically and prune all but the newest `keep`.

    `extra` names modules trained alongside the model (e.g. the NLI head) that are saved too, each
    as `<name>.safetensors`, and restored by `load_checkpoint(..., extra=...)`. `scaler` (fp16's
    loss scale) is saved with the optimizer, so a resumed run goes on at the scale it reached."""
    content = capture(model, optimizer, scheduler, extra, scaler)
    return write_checkpoint(root, step, content, state, keep)


def write_checkpoint(
    root: Path, step: int, content: CheckpointContent, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write `content` (`capture`) as checkpoint `root/step-XXXXXXXX`: files into a `.tmp`
    folder, the manifest last, fsync, rename; then the `latest` pointer, then pruning."""
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(root, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with atomic.storage_guard(tmp, needed=content.bytes):
            save_model(_Weights(content.model), str(tmp / MODEL_FILE))
            for name, weights in content.extra.items():
                save_model(_Weights(weights), str(tmp / f"{name}.safetensors"))
            torch.save(content.trainer, tmp / TRAINER_FILE)
            (tmp / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2))
            files = sorted(f.name for f in tmp.iterdir())
            manifest = {name: atomic.file_record(tmp / name) for name in files}
            (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=2))
            for f in tmp.iterdir():
                with f.open("rb") as fh:
                    os.fsync(fh.fileno())
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # never leave a half-written step-*.tmp/
        raise
    write_atomic(root / LATEST, final.name)
    # Keep the new checkpoint and the newest keep-1 older ones; a checkpoint of a higher step is
    # from a trajectory this run abandoned (it resumed from an older one) and goes too.
    older = [p for p in checkpoint_dirs(root) if _step_of(p) < step]
    newer = [p for p in checkpoint_dirs(root) if _step_of(p) > step]
    for old in [*older[: max(0, len(older) - (keep - 1))], *newer]:
        shutil.rmtree(old)
    return final


def verify_checkpoint(path: Path, hash_: bool = True) -> str | None:
    """Why checkpoint `path` cannot be trusted ("FILE: reason"), or None when it is intact.

    With a manifest every file is checked for size and sha256; a checkpoint written before
    manifests existed only has its files' presence and its state.json checked.
    """
    manifest_file = path / MANIFEST
    if manifest_file.is_file():
        try:
            files = json.loads(manifest_file.read_text())["files"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return f"{manifest_file}: unreadable manifest"
        for name, record in files.items():
            problem = atomic.check_file(path / name, record, hash_)
            if problem:
                return f"{path / name}: {problem}"
        return None
    for name in (MODEL_FILE, TRAINER_FILE, STATE_FILE):
        file = path / name
        if not file.is_file() or file.stat().st_size == 0:
            return f"{file}: missing or empty"
    try:
        json.loads((path / STATE_FILE).read_text())
    except json.JSONDecodeError as err:
        return f"{path / STATE_FILE}: not valid JSON ({err.msg})"
    return None


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under root (the `latest` pointer, else the highest step)."""
    pointer = root / LATEST
    if pointer.is_file():
        name = pointer.read_text().strip()
        path = root / name
        if _STEP_DIR.fullmatch(name) and (path / STATE_FILE).is_file():
            return path
    done = [p for p in checkpoint_dirs(root) if (p / STATE_FILE).is_file()]
    return done[-1] if done else None


def run_identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run may not change (`TrainConfig.to_dict()` form): its method and the set
    of its config's sections (the core ones and the method's). Values inside the sections may
    change on resume (`--set optimisation.max_steps=...`)."""
    sections = sorted(name for name, value in config.items() if isinstance(value, dict))
    return {"method": str(config.get("method", "simcse")), "sections": sections}


def identity_change(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """How `current`'s run identity differs from `saved`'s ("method 'simcse' -> 'dclr'; section
    'simcse' dropped, 'dclr' added"), or None when they are the same run."""
    before, after = run_identity(saved), run_identity(current)
    changes = []
    if before["method"] != after["method"]:
        changes.append(f"method {before['method']!r} -> {after['method']!r}")
    dropped = [n for n in before["sections"] if n not in after["sections"]]
    added = [n for n in after["sections"] if n not in before["sections"]]
    if dropped or added:
        named = [f"section {n!r} dropped" for n in dropped] + [f"{n!r} added" for n in added]
        changes.append(", ".join(named))
    return "; ".join(changes) or None


def check_identity(path: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise ConfigError naming the difference when checkpoint `path` (whose state.json holds
    `saved`) belongs to a run of another identity than config `current`."""
    config = saved.get("config")
    if not isinstance(config, dict):
        return  # written before checkpoints saved their config
    change = identity_change(config, current)
    if change is None:
        return
    method = run_identity(config)["method"]
    run_dir = path.parent.parent
    raise ConfigError(
        f"{path} is a checkpoint of a {method} run, and the config resuming it changes the "
        f"run's identity ({change}): resuming would train another method into the same run "
        "folder\n"
        f"  fix: restore `method: {method}` and its sections in {run_dir / 'config.yaml'} to "
        f"continue that run; or train the new method in another folder (-o ANOTHER_FOLDER; "
        f"--model {run_dir / 'best'} starts it from this run's model), or start over with "
        "--overwrite"
    )


def changed_values(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`section.option old -> new` for every option whose value differs between two configs in
    `TrainConfig.to_dict()` form (sections present in both; `run.extra` left out)."""
    changes = []
    for name, section in current.items():
        before = saved.get(name)
        if not isinstance(section, dict) or not isinstance(before, dict):
            continue
        for key, value in section.items():
            if key in before and before[key] != value and (name, key) != ("run", "extra"):
                changes.append(f"{name}.{key} {before[key]!r} -> {value!r}")
    return changes


def _shape_mismatch(err: BaseException) -> bool:
    """A checkpoint that does not fit the model or optimizer being resumed (torch's strict
    state-dict load, the optimizer's parameter groups), as opposed to a failure of memory, disk
    or library."""
    if isinstance(err, ValueError | KeyError):  # Optimizer / scheduler load_state_dict
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(
        words in text
        for words in (
            "Error(s) in loading state_dict",
            "size mismatch",
            "Missing key",
            "Unexpected key",
        )
    )


def mismatch_error(
    path: Path, saved: dict[str, Any], current: dict[str, Any] | None, err: BaseException
) -> ConfigError:
    """The error for a checkpoint whose files verify against its manifest but do not load into
    the model or optimizer being resumed: the config changed its shape, not the disk its bytes.
    The checkpoint is left where it is (it resumes under the config it was written with)."""
    config = saved.get("config")
    changes = changed_values(config, current) if isinstance(config, dict) and current else []
    why = f"; the config changed since it was written: {', '.join(changes)}" if changes else ""
    run_dir = path.parent.parent
    return ConfigError(
        f"{path} is intact (every file matches its manifest) but does not fit the model being "
        f"resumed ({err}){why}\n"
        f"  fix: resume without the overrides that change the model ({run_dir / 'config.yaml'} "
        "is the config the run was trained with), or train the changed model in another folder "
        "(-o ANOTHER_FOLDER)"
    )


def resume_checkpoint(
    root: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, torch.nn.Module] | None = None,
    run_id: str | None = None,
    config: dict[str, Any] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Load the newest intact checkpoint under `root`; returns (its folder, its state).

    Checkpoints are tried newest first (the `latest` pointer's, then by step). A damaged one is
    named in a CorruptCheckpointWarning and renamed `*.corrupt`. `run_id`, when given, must match
    the checkpoint's (a checkpoint left by another run is refused, never resumed silently), and
    `config` (`TrainConfig.to_dict()`), when given, must keep the checkpoint's run identity
    (`check_identity`: the same method and sections).
    """
    first = latest_checkpoint(root)
    candidates = sorted(checkpoint_dirs(root), key=_step_of, reverse=True)
    if first is not None:
        candidates = [first, *(p for p in candidates if p != first)]
    if not candidates:
        raise ConfigError(
            f"--resume (resume=): no checkpoint under {root} (a run with run.save_steps 0 "
            "writes none unless it is stopped)\n  fix: start the run again without --resume (with "
            "--overwrite to replace what the folder holds)"
        )
    bad: list[str] = []
    for path in candidates:
        problem = verify_checkpoint(path)
        if problem is None:
            state = json.loads((path / STATE_FILE).read_text())
            saved_id = state.get("run_id")
            if run_id is not None and saved_id is not None and saved_id != run_id:
                raise ConfigError(
                    f"{path} belongs to run {saved_id}, not to this folder's run {run_id} "
                    f"({root.parent / 'run.json'}): refusing to resume another run\n"
                    "  fix: start over with --overwrite, or resume the folder that run belongs to"
                )
            if config is not None:
                check_identity(path, state, config)
            try:
                return path, load_checkpoint(path, model, optimizer, scheduler, extra, scaler)
            except (CorruptCheckpoint, ValueError, KeyError) as err:
                if (path / MANIFEST).is_file():  # verified byte for byte: never renamed
                    cause = err.__cause__ or err
                    if _shape_mismatch(cause):
                        raise mismatch_error(path, state, config, cause) from err
                    raise ConfigError(
                        f"{path} is intact (every file matches its manifest) but cannot be "
                        f"loaded here: {type(cause).__name__}: {cause}\n  fix: see the error "
                        "(memory, disk, library versions); the checkpoint is kept as it is"
                    ) from err
                if not isinstance(err, CorruptCheckpoint):
                    raise
                problem = str(err)
        bad.append(problem)
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        if aside.exists():
            shutil.rmtree(aside)
        os.rename(path, aside)
        warnings.warn(
            f"skipping a damaged checkpoint: {problem} (moved to {aside.name}); "
            "trying the next older one",
            CorruptCheckpointWarning,
            stacklevel=2,
        )
    raise CorruptCheckpoint(
        f"--resume: every checkpoint under {root} is damaged: " + "; ".join(bad) + "\n"
        "  fix: start over with --overwrite"
    )


def saved_start(root: Path, run_id: str | None = None) -> dict[str, Any]:
    """What the run's checkpoints under `root` saved about its start (`{"derived": ...,
    "start_records": ..., "config": ...}`, the config as the run started it), read from the
    newest readable state.json of run `run_id`; empty when none has it (no checkpoint, another
    run's, or one written before dclr saved them).

    Every checkpoint of a run saves the same start, so the newest readable one answers:
    `resume_checkpoint`, which may skip a damaged one, resumes the same run.
    """
    for path in sorted(checkpoint_dirs(root), key=_step_of, reverse=True):
        try:
            state = json.loads((path / STATE_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(state, dict) or "derived" not in state:
            continue
        if run_id is not None and state.get("run_id") not in (None, run_id):
            return {}
        return {key: state.get(key) or {} for key in ("derived", "start_records", "config")}
    return {}


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, torch.nn.Module] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> dict[str, Any]:
    """Restore everything saved by save_checkpoint; returns the saved state dict (a `scaler`
    from a checkpoint that has none, e.g. one written in fp32, keeps its initial scale).

    A file that cannot be read raises CorruptCheckpoint naming it (not the library's traceback).
    """
    _load_file(path / MODEL_FILE, lambda f: load_model(model, str(f)))
    for name, module in (extra or {}).items():
        file = path / f"{name}.safetensors"
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: this run trains a {name!r} but the checkpoint has none (written by an "
                f"older dclr?); start the run again without --resume"
            )
        _load_file(file, lambda f, m=module: load_model(m, str(f)))
    trainer = _load_file(
        path / TRAINER_FILE, lambda f: torch.load(f, weights_only=True, map_location="cpu")
    )
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    ranks = trainer.get("rng_ranks")
    if isinstance(ranks, list) and len(ranks) == dist.world_size():  # this rank's own stream
        set_rng_state(ranks[dist.rank()])
    else:  # one process; or another world size, which the trainer reseeds (`Trainer._resume`)
        set_rng_state(trainer["rng"])
    if scaler is not None and "scaler" in trainer:
        scaler.load_state_dict(trainer["scaler"])
    return _load_file(path / STATE_FILE, lambda f: json.loads(f.read_text()))


def _load_file(file: Path, load: Any) -> Any:
    try:
        return load(file)
    except Exception as err:  # noqa: BLE001 - safetensors, pickle, json: each its own type
        raise CorruptCheckpoint(f"{file}: cannot be read ({type(err).__name__}: {err})") from err
