"""Every method's options are declared once (issue 36 item 4): `dclr train`'s section, the loss
it builds, the loss class constructed with no option and the sentence-transformers face all read
each default from one torch-free dataclass, so they agree on every one of them.

Before, ConSERT did not: `method: consert` without a recipe value trained at tau = 0.05 (the shared
contrastive section) while `ConSERTLoss` and `dclr.st.ConSERTLoss` defaulted to the paper's 0.1.
"""

from __future__ import annotations

import dataclasses
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from dclr.losses.consert import ConSERTLoss
from dclr.losses.dclr import DCLRLoss
from dclr.losses.dualcse import DualCSELoss
from dclr.losses.simcse import SimCSELoss
from dclr.losses.supervised import SupervisedNLILoss
from dclr.methods.nli import supervised_objective
from dclr.methods.registry import get_method
from dclr.options.contrastive import ConSERTOptions, SimCSEOptions
from dclr.options.dclr import DCLROptions
from dclr.options.dualcse import DualCSEOptions
from dclr.options.nli import NLIOptions
from dclr.recipe import config_from_dict, load_config
from dclr.st import ConSERTLoss as STConSERTLoss
from dclr.st import DCLRLoss as STDCLRLoss


class Scorer:
    """A complementary model / guide that is never called: the losses are only built here."""

    def similarities(self, indices: Any, sentences: Any) -> torch.Tensor:
        raise AssertionError("not called")


def default_config(method: str, **sections: dict[str, Any]) -> Any:
    """The config `dclr train` resolves from a recipe that sets none of the method's options."""
    return config_from_dict({"method": method, "model": {"name": "m"}, **sections})


def built_by_dclr_train(method: str, config: Any) -> Any:
    """The objective `dclr train` builds for `config`, as the method's plugin builds it."""
    plugin = get_method(method)
    section = config.section(method)
    if method in ("simcse", "consert"):
        return plugin.loss_module(config, None, section, None)
    if method == "dclr":
        return plugin.loss_module(config, None, section, Scorer())
    if method == "nli":
        return supervised_objective(config, None, 8, "simcse", True, section.temperature)
    return plugin.build_objective(SimpleNamespace(config=config), None)  # reads run.config only


def option_values(obj: Any, options: type) -> dict[str, Any]:
    """The objective options of a section, a loss or an options object, by name."""
    held = getattr(obj, "options", obj)  # DCLR's and DualCSE's losses keep the dataclass
    return {f.name: getattr(held, f.name) for f in dataclasses.fields(options)}


# method -> (its objective's options, the loss class built with no option, its ST face or None)
FACES: dict[str, tuple[type, Any, Any]] = {
    "simcse": (SimCSEOptions, lambda: SimCSELoss(None), None),
    "consert": (ConSERTOptions, lambda: ConSERTLoss(None), lambda: STConSERTLoss(None)),
    "dclr": (
        DCLROptions,
        lambda: DCLRLoss(None, Scorer()),
        lambda: STDCLRLoss(None, guide=Scorer()).objective,
    ),
    "nli": (NLIOptions, lambda: SupervisedNLILoss(None, "simcse"), None),
    "dualcse": (DualCSEOptions, lambda: DualCSELoss(None), None),
}


@pytest.mark.parametrize("method", sorted(FACES))
def test_dclr_train_the_loss_and_the_st_face_agree_on_every_default(method):
    options, loss, st_face = FACES[method]
    declared = option_values(options(), options)
    config = default_config(method)
    section = config.section(method)
    assert isinstance(section, options), f"the {method}: section extends {options.__name__}"
    assert option_values(section, options) == declared  # dclr train's config
    assert option_values(built_by_dclr_train(method, config), options) == declared
    assert option_values(loss(), options) == declared  # the loss class, no option given
    if st_face is not None:
        assert option_values(st_face(), options) == declared  # sentence-transformers


def test_consert_tau_is_the_papers_everywhere():
    """consert.txt l.93 (Sec. 5.5): "The optimal NT-Xent temperature is 0.1"."""
    assert ConSERTOptions().temperature == 0.1
    assert (
        load_config(None, {"method": "consert", "model": "m"}).section("consert").temperature == 0.1
    )
    assert ConSERTLoss(None).temperature == STConSERTLoss(None).temperature == 0.1
    assert SimCSEOptions().temperature == SimCSELoss(None).temperature == 0.05
    # NLI's joint part and second stage read the `consert:` section: the paper's tau there too
    joint = default_config("nli", nli={"contrastive": "consert"})
    assert joint.section("consert").temperature == 0.1 and joint.section("nli").temperature == 0.05
    # the ST face's model card records it
    assert STConSERTLoss(None).get_config_dict() == {"temperature": 0.1}


def test_a_flat_consert_recipe_keeps_the_flat_formats_tau(tmp_path):
    """A recipe in the old flat format trained at its one temperature, 0.05, for every method:
    converted, it says so explicitly (the flat format's default, not the section's)."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text("method: consert\nmodel: m\nview1: token_shuffle\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        old = load_config(recipe)
        joint = tmp_path / "joint.yaml"
        joint.write_text(
            "method: consert\nmodel: m\nschedule: joint\nsupervised_loss: nli_head\nnli_data: x\n"
        )
        old_joint = load_config(joint)
    assert old.section("consert").temperature == 0.05
    assert old_joint.method == "nli" and old_joint.section("consert").temperature == 0.05
    sectioned = tmp_path / "new.yaml"
    sectioned.write_text("method: consert\nmodel: {name: m}\nconsert: {view1: token_shuffle}\n")
    assert load_config(sectioned).section("consert").temperature == 0.1
