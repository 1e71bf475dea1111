"""Flat option names, in one place: the only module that reads or writes a config by them.

A flat name is an option without its section: `batch_size` for `optimisation.batch_size`,
`noise_ratio` for `dclr.noise_ratio`, and `model` for `model.name` (the one renamed field). The
recipe format before sections used them, and a few places still speak them:

* `--set field=value` (`apply_overrides`, through `set_flat`): the value goes to the core section
  that has the field, else to every section of the method that has it;
* the run index and its tables (`dclr_lab`: `flat_config` of a saved config.yaml, and
  `flat_values`, which its run ids hash);
* model cards and the run's derived settings (`flat_values`: a derived value such as a calibrated
  `false_negative_threshold` is named as its option);
* old flat recipes (`dclr.flat_recipe` converts them to sections with `set_flat`).

Code reads options by their section (`config.optimisation.batch_size`, `config.section("dclr")`);
`TrainConfig` has no flat attribute.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dclr.configfile import unknown_option_error
from dclr.options.config import (
    CORE_SECTIONS,
    ModelSection,
    SectionTypes,
    TrainConfig,
    apply_section_overrides,
)

# Flat names that differ from their field's name: (section, field) by flat name.
RENAMED = {"model": ("model", "name")}


def flat_name(cls: type, name: str) -> str:
    """The flat name of field `name` of section dataclass `cls` (`model` for model.name)."""
    return "model" if (cls is ModelSection and name == "name") else name


def field_names(cls: type) -> list[str]:
    """The flat names of a section dataclass's fields, in declaration order."""
    return [flat_name(cls, f.name) for f in dataclasses.fields(cls)]


def core_field(key: str) -> tuple[str, str] | None:
    """(section, field) of a flat core option name, or None if it is not a core option."""
    if key in RENAMED:
        return RENAMED[key]
    for name, cls in CORE_SECTIONS.items():
        if key in {f.name for f in dataclasses.fields(cls)} and key != "name":
            return name, key
    return None


def is_flat(values: dict[str, Any]) -> bool:
    """A pre-sections recipe: `model` is a string, or any key is neither a section nor `method`
    (and no core section is written as one: there a stray key is a typo, `methd: simcse`, which
    the sectioned reader names)."""
    if isinstance(values.get("model"), str):
        return True
    if any(isinstance(value, dict) and key != "extra" for key, value in values.items()):
        return False  # a section (core or a method's): a flat recipe has none (`extra` aside)
    return any(not isinstance(value, dict) and key != "method" for key, value in values.items())


def flat_config(values: dict[str, Any]) -> dict[str, Any]:
    """A saved config (sectioned, or an old flat one) with every option under its flat name:
    `model` for model.name; the method's own section wins a name two sections share."""
    if is_flat(values):
        return dict(values)
    method = values.get("method", "simcse")
    out: dict[str, Any] = {"method": method}
    sections = [k for k in values if k != "method" and k not in CORE_SECTIONS]
    for name in [*CORE_SECTIONS, *sorted(sections, key=lambda n: n == method)]:
        for key, value in (values.get(name) or {}).items():
            out["model" if (name, key) == ("model", "name") else key] = value
    return out


def flat_values(config: TrainConfig) -> dict[str, Any]:
    """Every option of `config` under its flat name (see `flat_config`)."""
    return flat_config(config.to_dict())


def set_flat(
    nested: dict[str, Any], key: str, value: Any, source: str, sections_for: SectionTypes
) -> None:
    """Put flat option `key` in its core section, else in every method section that has it."""
    where = core_field(key)
    if where is not None:
        nested.setdefault(where[0], {})[where[1]] = value
        return
    method = nested.get("method", "simcse")
    sections = sections_for(method, nested)
    targets = [name for name, cls in sections.items() if key in field_names(cls)]
    if not targets:
        known = sorted(
            {core_key for cls in CORE_SECTIONS.values() for core_key in field_names(cls)}
            | {f for cls in sections.values() for f in field_names(cls)}
        )
        raise unknown_option_error([key], known, f"{source} (method {method!r})")
    for name in targets:
        nested.setdefault(name, {})[key] = value


def apply_overrides(
    nested: dict[str, Any], overrides: dict[str, Any], sections_for: SectionTypes
) -> dict[str, Any]:
    """`--set`: `section.field=value` or flat `field=value` overrides on a sectioned config
    dict (a flat one goes where `set_flat` puts it)."""

    def place(out: dict[str, Any], key: str, value: Any) -> None:
        set_flat(out, key, value, "--set", sections_for)

    return apply_section_overrides(nested, overrides, sections_for, place)
