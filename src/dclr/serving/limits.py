"""Checks of the input limits (`dclr.serving.settings.Limits`), and the error that names the
limit a request broke.

Every limit bounds memory or time per request; together with the batcher's queue bound and the
server's connection bound they put a ceiling on what concurrent clients can make the process hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dclr.data.readers import is_blank, unencodable
from dclr.serving.settings import Limits


def check_texts(
    limits: Limits, texts: Sequence[str], param: str, name: Callable[[int], str] | None = None
) -> None:
    """Raise LimitError unless 1 <= len(texts) <= max_texts and each text is non-empty and
    at most max_chars characters long. `name(i)` names text i in messages (`param[i]`)."""
    name = name or (lambda i: f"{param}[{i}]")
    if not texts:
        raise LimitError(f"{param} holds no text", param, "empty_input")
    if len(texts) > limits.max_texts:
        raise LimitError(
            f"{param} holds {len(texts)} texts; the limit is {limits.max_texts} texts per "
            "request (max_texts): split the request",
            param,
            "too_many_texts",
        )
    for i, text in enumerate(texts):
        if len(text) > limits.max_chars:
            raise LimitError(
                f"{name(i)} has {len(text)} characters; the limit is {limits.max_chars} "
                "characters per text (max_chars)",
                name(i),
                "text_too_long",
            )
        if is_blank(text):
            raise LimitError(
                f"{name(i)} is empty (nothing but whitespace or invisible characters)",
                name(i),
                "empty_text",
            )
        bad = unencodable(text)
        if bad is not None:
            raise LimitError(
                f"{name(i)} is not valid Unicode: {bad}; send UTF-8 text (a JSON \\uD800-"
                "\\uDFFF escape must be half of a surrogate pair)",
                name(i),
                "invalid_unicode",
            )


def check_k(limits: Limits, k: int) -> None:
    if not 1 <= k <= limits.max_k:
        raise LimitError(
            f"k must be between 1 and {limits.max_k} (max_k), got {k}", "k", "k_out_of_range"
        )


class LimitError(Exception):
    """A request outside the limits: message, offending field and its code in
    `dclr.serving.errors.ERRORS` (HTTP 400)."""

    def __init__(self, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
