"""Issue 25 item 5: recipes are bounded, and every YAML failure is a named error, not a traceback."""

from __future__ import annotations

import pytest

from dclr.configfile import MAX_RECIPE_BYTES, MAX_RECIPE_DEPTH, parse_overrides, read_recipe
from dclr.errors import ConfigError

BOMB = "\n".join(
    ["run:", "  extra:", '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"    {chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
       f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
       f"*{chr(97 + i)}]" for i in range(8)]
)  # fmt: skip


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (BOMB.encode(), "aliases (*name) are not allowed"),
        (b"method: simcse\nrun: !!python/object/apply:os.system ['true']\n", "line 2"),
        (b"method: simcse\nmodel: {name: \xff\xfe}\n", "line 2: not UTF-8"),
        (b"method: simcse\nmodel: [unclosed\n", "not a valid recipe"),
        (("x: " + "[" * (MAX_RECIPE_DEPTH + 5) + "]" * (MAX_RECIPE_DEPTH + 5)).encode(),
         f"deeper than {MAX_RECIPE_DEPTH}"),
        (b"- just\n- a list\n", "a mapping of option: value"),
    ],
)  # fmt: skip
def test_a_bad_recipe_is_a_named_error(tmp_path, content, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="bad.yaml") as err:
        read_recipe(path)
    assert words in str(err.value)


def test_an_oversized_recipe_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("run:\n  extra:\n" + "    k: v\n" * (MAX_RECIPE_BYTES // 8))
    with pytest.raises(ConfigError, match="a recipe is at most"):
        read_recipe(path)


def test_a_normal_recipe_still_loads(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        "method: simcse\nmodel: {name: m, pooler: mean}\nrun: {extra: {note: [1, 2]}}\n"
    )
    assert read_recipe(path)["run"]["extra"]["note"] == [1, 2]


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{k: ", "}")])
def test_a_recipe_nested_100000_deep_is_refused_before_it_is_composed(tmp_path, opening, closing):
    """Issue 39 item 4: PyYAML's composer recursed once per level before the depth check ran,
    so `a: [[[...]]]` 100,000 deep ended in a RecursionError traceback."""
    depth = 100_000
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + opening * depth + "x" + closing * depth + "\n")
    with pytest.raises(ConfigError, match=r"deep.yaml, line 1: nested deeper than") as err:
        read_recipe(path)
    assert "flatten the nesting" in str(err.value)


def test_an_override_value_is_read_with_the_same_bounds():
    """Issue 39 item 4, the same composer under `--set key=value`: a deep value was a
    RecursionError, a broken one a raw YAML traceback."""
    deep = "[" * 50_000 + "]" * 50_000
    with pytest.raises(ConfigError, match="override run.extra: nested deeper than"):
        parse_overrides([f"run.extra={deep}"])
    with pytest.raises(ConfigError, match=r"override model.name='\[unclosed': not a YAML value"):
        parse_overrides(["model.name=[unclosed"])
    plain = ["lr=1e-5", "steps=10", "note=[1, 2]", "name=x"]  # as yaml.safe_load reads them
    assert parse_overrides(plain) == {"lr": "1e-5", "steps": 10, "note": [1, 2], "name": "x"}


@pytest.mark.parametrize(("written", "expected"), [("on", "on"), ("off", "off"), ("auto", "auto")])
def test_on_and_off_are_the_words_not_yaml_booleans(tmp_path, written, expected):
    """YAML 1.1 reads a bare on / off as true / false: `--set optimisation.fused_optimizer=on`
    was refused ("got 'True'") and so was `prefetch: off` in a recipe."""
    from dclr.recipe import load_config

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model:\n  name: m\noptimisation:\n  prefetch: {written}\n")
    overrides = parse_overrides([f"optimisation.fused_optimizer={written}"])
    config = load_config(recipe, overrides)
    assert config.optimisation.prefetch == expected
    assert config.optimisation.fused_optimizer == expected
