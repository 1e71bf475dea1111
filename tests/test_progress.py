"""The progress-bar helper honours TQDM_DISABLE at call time, and every bar in dclr uses it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dclr.progress import disabled_by_env, progress_bar

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "src" / "dclr", ROOT / "lab" / "src" / "dclr_lab")  # the library and the lab


@pytest.mark.parametrize(
    ("value", "off"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        ("OFF", False),
        ("1", True),
        ("true", True),
        ("yes", True),
        ("True", True),
    ],
)
def test_env_value_decides(monkeypatch, value, off):
    if value is None:
        monkeypatch.delenv("TQDM_DISABLE", raising=False)
    else:
        monkeypatch.setenv("TQDM_DISABLE", value)
    assert disabled_by_env() is off
    with progress_bar(total=3, enabled=True) as bar:
        assert bar.disable is off


def test_enabled_false_always_disables(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "0")
    with progress_bar(total=3, enabled=False) as bar:
        assert bar.disable is True


def test_disable_keyword_is_refused():
    with pytest.raises(TypeError, match="enabled="):
        progress_bar(total=1, disable=True)


def test_every_bar_in_the_package_goes_through_the_helper():
    """A direct `tqdm(` call with its own disable= would silently ignore TQDM_DISABLE again."""
    direct = [
        f"{path.relative_to(ROOT)}:{n}"
        for src in SOURCES
        for path in src.rglob("*.py")
        if path.name != "progress.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\btqdm\(", line)
    ]
    assert direct == []


def test_a_small_loss_is_not_shown_as_zero():
    """Issue 38 item 6: the training bar showed `loss=0.0000` for a loss of 1e-4 (4 decimals)."""
    from dclr.progress import short_number

    assert short_number(1e-4) == "0.0001"
    assert short_number(1.234e-5) == "1.234e-05"
    assert short_number(2.34567) == "2.346"
    for file in (path for src in SOURCES for path in src.rglob("*.py")):
        for line in file.read_text().splitlines():
            if "set_postfix(" in line:
                assert not re.search(r":\.\d+f", line), f"{file}: {line.strip()}"


def test_train_without_progress_bars(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """`dclr.train(show_progress=False)`: no bar at all (it always drew the training bar)."""
    from helpers import tiny_run_overrides, write_pseudo_corpus

    import dclr

    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    overrides = tiny_run_overrides(tiny_model_dir, corpus, tmp_path / "run", max_steps=2)
    monkeypatch.setenv("TQDM_DISABLE", "")
    dclr.train(None, overrides, show_progress=False)
    quiet = capsys.readouterr().err
    dclr.train(None, {**overrides, "output_dir": str(tmp_path / "run2")})
    shown = capsys.readouterr().err
    assert "step" not in quiet, quiet
    assert "step" in shown, shown  # the training bar, as before
