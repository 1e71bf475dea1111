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
