"""Where the evaluation data lives: --data-dir, else $DCLR_DATA_DIR, else a cache folder."""

from __future__ import annotations

import os
from pathlib import Path

from dclr.errors import InputError

ENV_VAR = "DCLR_DATA_DIR"


def user_cache_root() -> Path:
    """dclr's folder in the user's cache: $XDG_CACHE_HOME/dclr (~/.cache/dclr when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dclr"


def default_cache_dir() -> Path:
    """The per-user cache folder used when neither a flag nor the environment names one."""
    return user_cache_root() / "data"


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """Return the data root (the folder that holds `senteval/`), checking it exists.

    Accepts either the root or its `senteval/` folder itself.
    """
    if data_dir is not None:
        source = "--data-dir"
        root = Path(data_dir)
    elif os.environ.get(ENV_VAR):
        source = f"${ENV_VAR}"
        root = Path(os.environ[ENV_VAR])
    else:
        source = "the default cache"
        root = default_cache_dir()
    root = root.expanduser()
    if root.name == "senteval" and (root / "STS").is_dir():
        root = root.parent
    if not (root / "senteval").is_dir():
        raise InputError(
            f"no evaluation data found (looked for {root / 'senteval'}, from {source})",
            path=root,
            fix=(
                f"pass --data-dir DIR or set ${ENV_VAR}=DIR, where DIR holds senteval/ (the "
                "quickstart uses ../shared/data); with internet, "
                f"`dclr data download --data-dir {root}` fetches it"
            ),
        )
    return root
