"""The registry's two halves of a built-in method agree: the torch-free section it names for
`--help` is the class the method trains with."""

from __future__ import annotations

import pytest

from dclr.methods.registry import BUILTIN, get_method, section_classes


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_a_builtin_section_is_its_methods_section(name):
    assert section_classes()[name] is get_method(name).section


def test_a_registered_method_is_in_the_sections(monkeypatch):
    from dataclasses import dataclass

    from dclr.methods import registry
    from dclr.methods.simcse import SimCSE

    @dataclass
    class ToySection:
        strength: float = 1.0

    class Toy(SimCSE):
        name = "toy_registry"
        section = ToySection

    monkeypatch.setitem(registry._METHODS, "toy_registry", Toy())
    assert section_classes()["toy_registry"] is ToySection


def test_an_installed_method_is_listed_without_loading_the_builtin_methods(monkeypatch):
    """`--help` with a plugin installed loads that plugin only (the built-ins' sections come
    from their torch-free modules)."""
    from importlib.metadata import EntryPoint

    from dclr.methods import registry
    from dclr.options.contrastive import ContrastiveSection

    point = EntryPoint("toy_ep", "dclr.methods.simcse:SIMCSE", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point])
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_METHODS", {})
    assert section_classes()["toy_ep"] is ContrastiveSection
    assert registry._loaded is False and registry._METHODS == {}  # no built-in was loaded
