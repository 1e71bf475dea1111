"""JSON files dclr reads back (manifests, index.json, a model folder's dclr.json / modules.json):
a damaged or hand-edited one is an InputError naming the file, the line and the fix, never a
library traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dclr.errors import InputError


def read_json(path: str | Path, fix: str, kind: type = dict) -> Any:
    """The JSON value in `path`, which must be a `kind` (dict or list); InputError otherwise
    (cut short, not UTF-8, not JSON, or another shape), with `fix`."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", path=path, fix=fix) from None
    except json.JSONDecodeError as err:
        raise InputError(
            f"not valid JSON ({err.msg})", path=path, line=err.lineno, fix=fix
        ) from None
    if not isinstance(value, kind):
        raise InputError(
            f"holds a JSON {type(value).__name__}, not the {kind.__name__} expected",
            path=path,
            fix=fix,
        )
    return value


def inside(folder: Path, relative: str, path: Path) -> Path:
    """`folder / relative`, refused (naming `path`, the file that gave it) unless it stays
    inside `folder`: a model folder's own files never point outside it."""
    target = (folder / relative).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise InputError(
            f"names {relative!r}, a path outside the model folder",
            path=path,
            fix="a module path is a subfolder of the model folder (e.g. 1_Pooling)",
        )
    return target
