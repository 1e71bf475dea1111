"""A small synthetic INLI (the DualCSE data) for the dualcse and methods tests."""

from __future__ import annotations

import csv
from pathlib import Path

HEADER = ["", "dataset", "premise", "implied_entailment", "explicit_entailment", "neutral", "contradiction"]  # fmt: skip
NAMES = ["Alex", "Kim", "Robbie", "Keri", "Myles", "Josiah", "Christy", "Graham"]
THINGS = ["soccer", "music", "the neighbourhood", "cheesecake", "the party", "a bag"]


def inli_rows(n: int, offset: int = 0) -> list[list[str]]:
    """n synthetic INLI rows; premises hold commas, quotes and a newline, as the real data does."""
    rows = []
    for k in range(offset, offset + n):
        name, thing = NAMES[k % len(NAMES)], THINGS[k % len(THINGS)]
        premise = f'{name} is asked, "Do you like {thing}?"\n{name} says, "I love {thing}, always." ({k})'  # fmt: skip
        rows.append(
            [
                str(k),
                "circa",
                premise,
                f"{name} would happily spend time on {thing} ({k}).",
                f"{name} loves {thing} ({k}).",
                f"{name} has a friend who hates {thing} ({k}).",
                f"{name} dislikes {thing} ({k}).",
            ]
        )
    return rows


def write_inli(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_inli_dir(root: Path, n_train: int = 32, n_eval: int = 12) -> Path:
    """`root/inli/{train,val,test}.csv` with distinct synthetic rows; returns root."""
    write_inli(root / "inli" / "train.csv", inli_rows(n_train))
    write_inli(root / "inli" / "val.csv", inli_rows(n_eval, offset=1000))
    write_inli(root / "inli" / "test.csv", inli_rows(n_eval, offset=2000))
    return root
