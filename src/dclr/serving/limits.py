"""Input limits of the HTTP service, and the error that names the limit a request broke.

Every limit bounds memory or time per request; together with the batcher's queue bound and the
server's connection bound they put a ceiling on what concurrent clients can make the process hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from dclr.data.readers import unencodable

# OpenAI's /v1/embeddings accepts up to 2048 inputs; 256 keeps one request to a few forward
# passes (and its vectors to 256 x d floats) so one client cannot stall the others for long.
MAX_TEXTS = 256
# Encoders truncate at 512 tokens, about 2-3k characters of English; 8192 leaves room for other
# scripts while bounding tokenizer work per text.
MAX_CHARS = 8192
# A request at both limits above is ~2 MiB of JSON (plus escaping); bodies larger than that are
# refused before they are read.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Search results per query: more is a table dump, not a search.
MAX_K = 100


@dataclass(frozen=True)
class Limits:
    """Per-request bounds: texts per request, characters per text, body bytes, search k."""

    max_texts: int = MAX_TEXTS
    max_chars: int = MAX_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    max_k: int = MAX_K

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    def check_texts(
        self, texts: Sequence[str], param: str, name: Callable[[int], str] | None = None
    ) -> None:
        """Raise LimitError unless 1 <= len(texts) <= max_texts and each text is non-empty and
        at most max_chars characters long. `name(i)` names text i in messages (`param[i]`)."""
        name = name or (lambda i: f"{param}[{i}]")
        if not texts:
            raise LimitError(400, f"{param} holds no text", param, "empty_input")
        if len(texts) > self.max_texts:
            raise LimitError(
                400,
                f"{param} holds {len(texts)} texts; the limit is {self.max_texts} texts per "
                "request (max_texts): split the request",
                param,
                "too_many_texts",
            )
        for i, text in enumerate(texts):
            if len(text) > self.max_chars:
                raise LimitError(
                    400,
                    f"{name(i)} has {len(text)} characters; the limit is {self.max_chars} "
                    "characters per text (max_chars)",
                    name(i),
                    "text_too_long",
                )
            if not text.strip():
                raise LimitError(400, f"{name(i)} is empty", name(i), "empty_text")
            bad = unencodable(text)
            if bad is not None:
                raise LimitError(
                    400,
                    f"{name(i)} is not valid Unicode: {bad}; send UTF-8 text (a JSON \\uD800-"
                    "\\uDFFF escape must be half of a surrogate pair)",
                    name(i),
                    "invalid_unicode",
                )

    def check_k(self, k: int) -> None:
        if not 1 <= k <= self.max_k:
            raise LimitError(
                400, f"k must be between 1 and {self.max_k} (max_k), got {k}", "k", "k_out_of_range"
            )


class LimitError(Exception):
    """A request outside the limits: HTTP status, message, offending field and a short code."""

    def __init__(self, status: int, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
