"""An index folder opened with its query encoder: what `dclr search` does, as an object.

`IndexSearcher(folder)` loads the index (`SearchIndex`: files checked against index.json) and the
model that encodes queries: the one the index records, or `model` if given (a recorded
`python-package:NAME` is refused unless given: an index folder never chooses code to import), at
the index's pooler and precision unless given. A query model whose fingerprint is not the
index's is refused by name. `search(queries, k)` encodes and searches; the encoder stays loaded,
so a program that searches many times pays the load once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import overload

from dclr.data.readers import is_blank, unencodable
from dclr.errors import InputError
from dclr.indexing.index import Hit, SearchIndex, query_model, read_meta
from dclr.models.encoder import SentenceEncoder


class IndexSearcher:
    """`folder`'s index and its query encoder (see the module docstring)."""

    def __init__(
        self,
        folder: str | Path,
        model: str | None = None,
        pooler: str | None = None,
        precision: str | None = None,
        device: str = "auto",
    ) -> None:
        from dclr.indexing.fingerprint import model_fingerprint
        from dclr.models.precision import load_inference_encoder

        meta = read_meta(folder)
        self.model = query_model(meta, model, folder)
        self.encoder: SentenceEncoder = load_inference_encoder(
            self.model,
            pooler or meta["pooler"],
            precision or meta.get("precision", "fp32"),
            device=device,
        )
        self.index = SearchIndex(folder)
        self.index.check_model(model_fingerprint(self.encoder), self.model)

    @property
    def meta(self) -> dict:
        """The index's index.json (model, kind and parameters, count, input, ...)."""
        return self.index.meta

    @overload
    def search(self, queries: str, k: int = 10) -> list[Hit]: ...  # type: ignore[overload-overlap]

    @overload
    def search(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]: ...

    def search(self, queries: str | Sequence[str], k: int = 10) -> list[Hit] | list[list[Hit]]:
        """The top `k` hits of each query, best first (a list of hits for one query string)."""
        texts = check_queries(queries, k)
        if not texts:
            return []
        hits = self.index.search(self.encoder.encode(texts, normalize=True), k)
        return hits[0] if isinstance(queries, str) else hits


def check_queries(queries: str | Sequence[str], k: int) -> list[str]:
    """The queries as a list, once `k` and each query are checked (cheap: a caller may check
    before it loads the model, as `dclr search` does). InputError names what is wrong: k < 1, or
    a query that is not a string, is empty (nothing but whitespace or invisible characters, which
    the server refuses as `empty_text` too: it would rank the corpus by nothing) or holds what
    UTF-8 cannot encode (a lone surrogate: bytes that were not UTF-8, e.g. on a command line,
    decoded with surrogateescape)."""
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    texts = [queries] if isinstance(queries, str) else list(queries)
    for number, text in enumerate(texts):
        which = "the query" if isinstance(queries, str) else f"query {number}"
        bad = unencodable(text) if isinstance(text, str) else "not a string"
        if bad is not None:
            raise InputError(
                f"{which} is not valid text: {bad}",
                fix="pass queries as UTF-8 text (check the terminal's or the script's encoding)",
            )
        if is_blank(text):
            raise InputError(
                f"{which} is empty (nothing but whitespace or invisible characters)",
                fix="pass the words to search for",
            )
    return texts
