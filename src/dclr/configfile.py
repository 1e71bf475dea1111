"""Typed dataclass configs from a YAML recipe plus `key=value` overrides (shared by every driver)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, get_args, get_origin

import yaml

from dclr.errors import ConfigError
from dclr.shipped_recipes import PREFIX, find_recipe

T = TypeVar("T")
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of every field of dataclass `cls` (computed once per class)."""
    return typing.get_type_hints(cls)


def coerce(cls: type, name: str, value: Any) -> Any:
    """Convert a YAML / command-line value to the declared type of field `name` of `cls`."""
    hint = field_types(cls)[name]
    if get_origin(hint) in (typing.Union, types.UnionType):
        if value is None or value in ("null", "None"):
            return None
        hint = next(a for a in get_args(hint) if a is not type(None))
    if get_origin(hint) is Literal and isinstance(value, bool) and "on" in get_args(hint):
        return "on" if value else "off"  # YAML 1.1 reads a bare on / off (and yes / no) as a bool
    if get_origin(hint) is Literal or hint is str:
        return str(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in TRUE or text in FALSE:
            return text in TRUE
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if hint in (int, float):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a number, got {value!r}") from None
        if hint is int and not number.is_integer():
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        return int(number) if hint is int else number
    return value


def unknown_option_error(
    unknown: list[str],
    known: list[str],
    source: str,
    listing: str = "`dclr train --help` lists every option by section",
) -> ConfigError:
    """ConfigError naming `source` and each unknown key with the closest known name when one is
    close (`noise_ratioo` -> `noise_ratio`); `listing` says where every option is explained."""
    named = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigError(
        f"{source}: unknown option {', '.join(named)}; known: {sorted(known)} ({listing})"
    )


def check_known(cls: type, keys: Any, source: str) -> None:
    """Raise `unknown_option_error` for keys that are not fields of dataclass `cls`."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise unknown_option_error(unknown, known, source)


def from_dict(cls: type[T], values: dict[str, Any], source: str = "config") -> T:
    """`cls(**values)` with unknown keys refused and every value coerced to its field's type."""
    check_known(cls, values, source)
    return cls(**{k: coerce(cls, k, v) for k, v in values.items()})


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """['lr=1e-5', 'max_steps=10'] -> {'lr': 1e-5, 'max_steps': 10} (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"override {pair!r} must look like key=value")
        key, raw = pair.split("=", 1)
        out[key.strip().replace("-", "_")] = _override_value(key.strip(), raw) if raw else ""
    return out


def _override_value(key: str, raw: str) -> Any:
    """One override's value, read as a recipe's values are (`_RecipeLoader`: bounded depth, no
    aliases, no Python tags), every failure a ConfigError naming the override."""
    try:
        return yaml.load(raw, Loader=_RecipeLoader)  # noqa: S506 (a safe loader)
    except _TooDeep:
        raise ConfigError(
            f"override {key}: nested deeper than {MAX_RECIPE_DEPTH} levels; give a plain value "
            "(a number, a word, a short list)"
        ) from None
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(
            f"override {key}={raw[:60]!r}: not a YAML value ({problem}); quote it, or write "
            "key=value with a plain value"
        ) from None


# Bounds on what a recipe file may be: a recipe is a few KB of options, so these are generous for
# any real one and stop a hostile or broken file before it costs minutes and gigabytes.
MAX_RECIPE_BYTES = 1 << 20  # 1 MiB
MAX_RECIPE_DEPTH = 20  # nested mappings / lists


class _TooDeep(yaml.YAMLError):
    """A recipe nested deeper than MAX_RECIPE_DEPTH, found while composing (at `mark`)."""

    def __init__(self, mark: Any) -> None:
        super().__init__(f"nested deeper than {MAX_RECIPE_DEPTH} levels")
        self.mark = mark


class _RecipeLoader(yaml.SafeLoader):
    """yaml's safe loader without aliases: `*ref` (the "billion laughs" anchor bomb) is refused,
    as are tags that construct Python objects (the safe loader never builds them). Nesting is
    counted as nodes are composed and refused past MAX_RECIPE_DEPTH, before PyYAML's composer
    (which recurses once per level) can exhaust Python's stack: `a: [[[...]]]` 100,000 deep was
    a RecursionError. The scanner and parser below it keep their state in lists, not frames."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0  # nodes being composed around this one (the root is level 1)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(
                None, None, "aliases (*name) are not allowed in a recipe", event.start_mark
            )
        if self._depth >= MAX_RECIPE_DEPTH:  # this node's level is self._depth + 1
            raise _TooDeep(self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_recipe(recipe: str | Path) -> dict[str, Any]:
    """The mapping a YAML recipe holds. Every failure is a ConfigError naming the file (and the
    line for YAML errors) and the fix: missing, over `MAX_RECIPE_BYTES`, not UTF-8, not YAML,
    aliases or Python tags, nested deeper than `MAX_RECIPE_DEPTH`, or not a mapping. A
    recipes/<file> path the current folder lacks is the package's (`dclr.shipped_recipes`)."""
    found = find_recipe(recipe)
    if found is None:
        hint = ""
        if Path(recipe).parts[:1] == (PREFIX,):
            hint = (
                f" in {Path.cwd()}, and dclr ships no recipe of that name: `dclr config recipes` "
                "lists those it ships"
            )
        raise ConfigError(f"recipe {recipe} not found{hint}")
    path = found
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise ConfigError(
            f"{path}: {size:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} bytes (a few KB "
            "of options); put data in data.corpus files, not in the recipe"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}, line {line}: not UTF-8 text; save the recipe as UTF-8"
        ) from None
    try:
        loaded = yaml.load(text, Loader=_RecipeLoader) or {}  # noqa: S506 (a safe loader)
    except _TooDeep as err:
        raise _too_deep(path, err.mark.line + 1) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(
            f"{path}{where}: not a valid recipe ({problem}); write plain option: value YAML "
            "(no aliases, no !!python tags)"
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of option: value")
    return loaded


def key_lines(path: str | Path) -> dict[str, int]:
    """`section.option` (and top-level `option`) -> the 1-based line it is written on in the
    recipe at `path` (one `read_recipe` accepted); {} when it cannot be composed."""
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    lines: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key, value in root.value:
        lines[str(key.value)] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for inner, _ in value.value:
                lines[f"{key.value}.{inner.value}"] = inner.start_mark.line + 1
    return lines


def located(err: ConfigError, path: str | Path, overrides: dict[str, Any]) -> ConfigError:
    """`err` with `path:LINE` of the recipe option it is about, when its message names one the
    recipe sets and no override replaced: a quoted name first (`unknown option 'poolr'`), else
    an option named as a word (`max_steps must be a number`), the earliest in the message;
    `err` itself when it has a line already or names no option of the recipe."""
    text, prefix = str(err), str(path)
    if text.startswith(prefix):  # "recipe.yaml: model: unknown option 'poolr'": add the line
        if re.match(r":\d", text[len(prefix) :]):
            return err
        text = text[len(prefix) :].lstrip(":, ")
    elif prefix in text or text.startswith("--set"):  # located already, or an override's
        return err
    named = text.split("; known:")[0]  # not the list of every option it could have been
    # nor the choices or the value given: "precision must be one of ('fp32', ...), got 'model'"
    # is about precision, not the model section
    named = re.sub(r"one of \(.*?\)|, got .*$", "", named, flags=re.S)
    lines = key_lines(path)
    section = re.match(r"(\w+): ", text)  # "run: unknown option 'batch_size'": that section's
    if section is not None and section.group(1) in lines:
        lines = {k: v for k, v in lines.items() if k.startswith(f"{section.group(1)}.")}
    found: list[tuple[int, int, int]] = []  # (quoted first, position, line)
    for name, line in lines.items():
        leaf = name.rsplit(".", 1)[-1]
        if name in overrides or leaf in overrides:
            continue
        quoted = named.find(f"'{leaf}'")
        if quoted >= 0:
            found.append((0, quoted, line))
            continue
        word = re.search(rf"(?<![\w.]){re.escape(leaf)}(?!\w)", named)
        if word is not None and "." in name:  # a section's name alone says too little
            found.append((1, word.start(), line))
    if not found:
        return err
    return ConfigError(f"{path}:{min(found)[2]}: {text}")


def _too_deep(path: Path, line: int) -> ConfigError:
    return ConfigError(
        f"{path}, line {line}: nested deeper than {MAX_RECIPE_DEPTH} levels; a recipe is sections of "
        "options (section: {option: value}): flatten the nesting, and put data in data.corpus "
        "files, not in the recipe"
    )


def check_choices(config: Any, names: tuple[str, ...]) -> None:
    """Raise ConfigError unless each named `Literal[...]` field holds one of its choices."""
    for name in names:
        # cast: mypy does not take type[Any] as Hashable (the cache's key)
        allowed = get_args(field_types(cast(type, type(config)))[name])
        if getattr(config, name) not in allowed:
            raise ConfigError(f"{name} must be one of {allowed}, got {getattr(config, name)!r}")
