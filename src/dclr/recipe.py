"""Recipe loading: a YAML recipe + overrides -> a validated `TrainConfig`, with the method registry.

This is the layer above `dclr.training`: it looks each method up once (`dclr.methods.registry`) to
learn which config sections it reads and their dataclasses, then hands those to the core config
(`dclr.options.config`), which never looks a method up itself. Old flat recipes (every option at
the top level) are converted by `dclr.flat_recipe` first.

    config = load_config("recipes/dclr_minilm_cpu.yaml", {"optimisation.max_steps": 10})
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from dclr.configfile import field_types, located, read_recipe
from dclr.configfile import parse_overrides as parse_overrides  # re-exported for callers
from dclr.errors import ConfigError
from dclr.flat_recipe import convert_flat
from dclr.methods.registry import available_methods, get_method, method_sections
from dclr.options.config import CORE_SECTIONS, TrainConfig, build_config, deep_merge
from dclr.options.flat import apply_overrides, flat_name, is_flat


def config_from_dict(values: dict[str, Any], source: str = "config") -> TrainConfig:
    """A sectioned (or flat, converted) dict -> TrainConfig (not yet validated), over the
    method's defaults (`Method.defaults`)."""
    nested = convert_flat(values, source) if is_flat(values) else dict(values)
    method = str(nested.get("method", "simcse"))
    nested = deep_merge(get_method(method).defaults, nested)
    return build_config(nested, method_sections, source)


def checked(config: TrainConfig) -> TrainConfig:
    """`config` validated section by section and by its method (`Method.check`)."""
    config.validate()
    get_method(config.method).check(config)
    return config


def load_config(recipe: str | Path | None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Recipe YAML (may be None) + overrides (dotted or flat) -> a validated TrainConfig."""
    values: dict[str, Any] = {}
    source = "overrides"
    if recipe is not None:
        path = Path(recipe)
        loaded = read_recipe(path)
        source = str(path)
        if loaded and is_flat(loaded):
            warnings.warn(
                f"{path} is a flat recipe (every option at the top level); it is converted to "
                "sections (model, data, optimisation, run, <method>). Write the converted form "
                f"with `dclr config convert {path}`.",
                FutureWarning,  # shown by default (a DeprecationWarning is hidden outside __main__)
                stacklevel=2,
            )
        values = loaded
    overrides = dict(overrides or {})
    from_file = bool(values)
    if not values:  # overrides alone (tests, notebooks): flat names placed as a flat recipe's
        flat = {k: v for k, v in overrides.items() if "." not in k}
        values = flat if flat else {"method": overrides.get("method", "simcse")}
        overrides = {k: v for k, v in overrides.items() if "." in k}
    try:
        # the flat format's own defaults apply to a recipe written in it, not to flat overrides
        nested = convert_flat(values, source, from_file) if is_flat(values) else values
        config = config_from_dict(apply_overrides(nested, overrides, method_sections), source)
        return checked(check_written_phi(config, overrides))
    except ConfigError as err:
        if recipe is None:
            raise
        raise located(err, source, overrides) from None


def load_resumed(run_dir: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The config `dclr train --resume RUN_DIR` continues: RUN_DIR/config.yaml with `overrides`,
    writing to RUN_DIR unless they name another folder. A method other than the newest
    checkpoint's is refused naming both, before the sections are checked (they would be refused
    one by one as unknown)."""
    from dclr.shipped_recipes import find_recipe
    from dclr.training.runfolder import check_resume

    run_dir = Path(run_dir)
    recipe = run_dir / "config.yaml"
    if not recipe.is_file():
        raise ConfigError(
            f"--resume {run_dir} (resume=): no config.yaml there, so it is not a dclr run "
            "folder; resume the folder a `dclr train` wrote (its run.output_dir)"
        )
    overrides = dict(overrides or {})
    if "output_dir" not in overrides:  # the flat spelling names another folder too
        overrides.setdefault("run.output_dir", str(run_dir))
    if find_recipe(recipe) is not None:
        method = overrides.get("method", read_recipe(recipe).get("method", "simcse"))
        check_resume(run_dir, {"method": method}, method_only=True)
    return load_config(recipe, overrides)


def updated(config: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """A validated copy of `config` with `values` applied; unlike `TrainConfig.updated`, the
    values may change the method (its sections are then looked up)."""
    nested = apply_overrides(config.to_dict(), values, method_sections)
    return checked(check_written_phi(config_from_dict(nested, "overrides"), values))


def check_written_phi(config: TrainConfig, overrides: dict[str, Any]) -> TrainConfig:
    """Refuse an override of φ (`false_negative_threshold`) that φ calibration would replace
    before step 1: a value the user writes must not be dropped with an info line. The error
    names both settings and the two ways out."""
    keys = {key.rsplit(".", 1)[-1]: key for key in overrides}
    phi_key = keys.get("false_negative_threshold")
    section = config.sections.get(config.method)
    calibration = getattr(section, "phi_calibration", "none")
    if phi_key is None or "phi_calibration" in keys or calibration == "none":
        return config
    method = config.method
    phi = overrides[phi_key]
    raise ConfigError(
        f"{phi_key}={phi} is set, but this recipe calibrates φ ({method}.phi_calibration: "
        f"{calibration}), which would replace it before step 1: add --set "
        f"{method}.phi_calibration=none to train with φ {phi}, or drop the φ override to use "
        "the calibrated one"
    )


def flat_hints() -> dict[str, Any]:
    """The declared type of every flat option name (core sections and every registered method)."""
    hints: dict[str, Any] = {}
    classes = [*CORE_SECTIONS.values(), *(get_method(m).section for m in available_methods())]
    for cls in classes:
        for name, hint in field_types(cls).items():
            hints.setdefault(flat_name(cls, name), hint)
    return hints
