"""`dir(dclr)` and `help(dclr)` show the lazily loaded API (`encode`, `evaluate`, `train`, ...)
as well as what `import dclr` binds at once."""

from __future__ import annotations

import pydoc

import dclr
from dclr._meta import API


def test_dir_lists_every_api_name():
    names = set(dir(dclr))
    assert {"encode", "evaluate", "train"} <= names
    assert set(API) <= names and "__version__" in names


def test_help_shows_encode_evaluate_and_train():
    text = pydoc.render_doc(dclr, renderer=pydoc.plaintext)
    for name in ("encode(", "evaluate(", "train("):
        assert name in text, name
