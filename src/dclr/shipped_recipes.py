"""The recipes the package ships: `src/dclr/recipes/`, which the checkout's `recipes/` links to.

A recipe path that starts with `recipes/` (as every command in the docs writes it) is read from
the current folder when it is there, else from the package: `dclr train recipes/dclr_minilm_cpu.yaml`
works from a wheel install and from any folder. `dclr config recipes` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

SHIPPED_RECIPES = Path(__file__).with_name("recipes")
PREFIX = "recipes"  # how a command names a shipped recipe: recipes/<file> (the checkout's path)


@dataclass(frozen=True)
class ShippedRecipe:
    """name: as a command writes it (recipes/dualcse/...); what it trains: method, model, corpus
    ("" where the recipe leaves it to the method's default)."""

    name: str
    path: Path
    method: str
    model: str
    corpus: str


def find_recipe(recipe: str | Path) -> Path | None:
    """The file `recipe` names: itself where it is a file, else, for recipes/<file>, the recipe of
    that name the package ships; None when neither is."""
    path = Path(recipe)
    if path.is_file():
        return path
    parts = path.parts
    if len(parts) < 2 or parts[0] != PREFIX or ".." in parts:
        return None
    shipped = SHIPPED_RECIPES.joinpath(*parts[1:])
    return shipped if shipped.is_file() else None


def _described(path: Path) -> ShippedRecipe:
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    model, data = values.get("model") or {}, values.get("data") or {}
    return ShippedRecipe(
        f"{PREFIX}/{path.relative_to(SHIPPED_RECIPES).as_posix()}",
        path,
        str(values.get("method", "simcse")),
        str(model.get("name", "")),
        str(data.get("corpus", "")),
    )


def shipped_recipes() -> list[ShippedRecipe]:
    """Every recipe the package ships, by name."""
    return [_described(path) for path in sorted(SHIPPED_RECIPES.rglob("*.yaml"))]
