"""Methods by name. A recipe's `method:` is looked up here; tests register toy methods."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dclr.errors import ConfigError

if TYPE_CHECKING:
    from dclr.methods.base import Method

_METHODS: dict[str, Method] = {}
# Modules whose import registers the built-in methods (loaded on the first lookup).
BUILTIN = (
    "dclr.methods.simcse",
    "dclr.methods.consert",
    "dclr.methods.dclr",
    "dclr.methods.nli",
    "dclr.methods.dualcse",
)


def register(method: Method, replace: bool = False) -> Method:
    """Add `method` under `method.name` (a second method of the same name is refused)."""
    if method.name in _METHODS and not replace:
        raise ConfigError(f"a method named {method.name!r} is already registered")
    _METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    _METHODS.pop(name, None)


def _load_builtins() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def get_method(name: str) -> Method:
    """The method registered as `name`; ConfigError listing the known ones otherwise."""
    if name not in _METHODS:
        _load_builtins()
    if name not in _METHODS:
        raise ConfigError(f"unknown method {name!r}; choose from {', '.join(available_methods())}")
    return _METHODS[name]


def available_methods() -> list[str]:
    _load_builtins()
    return sorted(_METHODS)
