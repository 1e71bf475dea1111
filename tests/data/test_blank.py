"""Which texts are blank (not encoded; a 400 `empty_text` when served): issue 47 point 6."""

from __future__ import annotations

import pytest

from dclr.data.readers import is_blank


@pytest.mark.parametrize(
    "text",
    ["", "   ", "\t\n", "\u200b", "\u200b\u200c\u200d", " \ufeff\u2060 ", "\u00ad", "\x00\x07"],
)
def test_whitespace_and_invisible_characters_are_blank(text):
    assert is_blank(text)


@pytest.mark.parametrize(
    "text", ["a", " a ", "\u200ba", "line one\nline two", "\u00e9", "\u4e2d", "\U0001f600", "."]
)
def test_any_visible_character_is_not(text):
    assert not is_blank(text)
