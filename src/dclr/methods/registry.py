"""Methods by name. A recipe's `method:` is looked up here, once, by the layer above the training
loop (`dclr.recipe`, `dclr.driver`); the loop and the core config never import this module.

Where methods come from, in order:
* the built-in methods, `BUILTIN` (name -> where its `Method` instance is, and where its torch-free
  section dataclass is, so `dclr train --help` lists every option without importing torch);
* installed packages, through the entry-point group `dclr.methods` (`ENTRY_POINT_GROUP`):
  a package declares `[project.entry-points."dclr.methods"] mymethod = "mypkg.plugin:METHOD"`
  and `dclr train recipe.yaml` with `method: mymethod` trains it, with no edit to dclr;
* `register(method)` at run time (tests, notebooks).

Method modules never import this one (they define an instance, the registry loads it), so the
registry's imports by name close no cycle.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, NamedTuple

from dclr.errors import ConfigError

if TYPE_CHECKING:
    from dclr.methods.base import Method

ENTRY_POINT_GROUP = "dclr.methods"


class Builtin(NamedTuple):
    """Where a built-in method lives: its `Method` instance and its section dataclass (a
    torch-free module; `Method.section` is the same class, tests/methods/test_method_registry.py)."""

    method: str  # "module:attribute"
    section: str  # "module:attribute"


BUILTIN = {
    "simcse": Builtin("dclr.methods.simcse:SIMCSE", "dclr.options.contrastive:ContrastiveSection"),
    "consert": Builtin("dclr.methods.consert:CONSERT", "dclr.options.contrastive:ConSERTSection"),
    "dclr": Builtin("dclr.methods.dclr:DCLR_METHOD", "dclr.options.dclr:DCLRSection"),
    "nli": Builtin("dclr.methods.nli:NLI_METHOD", "dclr.options.nli:NLISection"),
    "dualcse": Builtin("dclr.methods.dualcse:DUALCSE", "dclr.options.dualcse:DualCSESection"),
    "simcse_sup": Builtin(
        "dclr.methods.dualcse:SIMCSE_SUP_INLI", "dclr.options.dualcse:SupervisedINLISection"
    ),
}

_METHODS: dict[str, Method] = {}
_loaded = False


def register(method: Method, replace: bool = False) -> Method:
    """Add `method` under `method.name` (a second method of the same name is refused)."""
    if method.name in _METHODS and not replace:
        raise ConfigError(f"a method named {method.name!r} is already registered")
    _METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    _METHODS.pop(name, None)


def _attribute(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _load(target: str, origin: str) -> Method:
    from dclr.methods.base import Method

    method = _attribute(target)
    if not isinstance(method, Method):
        raise ConfigError(f"{origin} {target!r} is not a dclr Method instance")
    return method


def _load_all() -> None:
    """The built-in methods, then those of installed packages (a name taken is not replaced)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name, builtin in BUILTIN.items():
        _METHODS.setdefault(name, _load(builtin.method, "built-in method"))
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in _METHODS:
            _METHODS[point.name] = _load(point.value, f"entry point {point.name!r}")


def get_method(name: str) -> Method:
    """The method registered as `name`; ConfigError listing the known ones otherwise."""
    if name not in _METHODS:
        _load_all()
    if name not in _METHODS:
        raise ConfigError(f"unknown method {name!r}; choose from {', '.join(available_methods())}")
    return _METHODS[name]


def method_sections(method: str, values: dict[str, Any]) -> dict[str, type]:
    """{name: dataclass} of every config section `method` reads, given the nested config values
    so far (a `dclr.options.config.SectionTypes`); an unknown method fails, naming the known."""
    names = get_method(method).section_names(values)
    return {name: get_method(name).section for name in names}


def builtin_sections() -> dict[str, type]:
    """{method: its section dataclass} of the built-in methods, from their torch-free modules."""
    return {name: _attribute(builtin.section) for name, builtin in BUILTIN.items()}


def section_classes() -> dict[str, type]:
    """{method: its section dataclass} of every method: built-ins from their torch-free option
    modules (no method module imported), then installed and registered ones (those are loaded)."""
    sections = builtin_sections()
    for name, method in _METHODS.items():
        sections.setdefault(name, method.section)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in sections:  # that package's method alone, not every built-in too
            sections[point.name] = _load(point.value, f"entry point {point.name!r}").section
    return sections


def available_methods() -> list[str]:
    """The names of every registered method (built in, `register`ed, or from an installed
    package's `dclr.methods` entry point), sorted: what a recipe's `method:` may say."""
    _load_all()
    return sorted(_METHODS)
