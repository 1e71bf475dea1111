"""Request and response bodies of the HTTP service (they also make its OpenAPI schema).

`/v1/embeddings` follows OpenAI's embeddings API: `input` is a string or a list of strings
(token-id inputs are not accepted), `encoding_format` is `float` or `base64` (little-endian
float32, what the official client asks for by default), unknown fields such as `user` are ignored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: str | list[str] = Field(description="One text or a list of texts to embed.")
    model: str | None = Field(
        default=None, description="Accepted for compatibility; the served model answers."
    )
    encoding_format: Literal["float", "base64"] = Field(
        default="float", description="`base64`: each vector as little-endian float32 bytes."
    )
    dimensions: int | None = Field(
        default=None,
        strict=True,  # "384" (a string) or 384.0 is refused, not coerced
        description=(
            "Shorter vectors: the first `dimensions` components, made unit length again "
            "(OpenAI's `dimensions`, sentence-transformers' `truncate_dim`); 1 to the model's "
            "dimension. Quality holds for models trained for it (Matryoshka)."
        ),
    )


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class SimilarityRequest(BaseModel):
    """Either `pairs` (cosine of each pair) or `sentences` (the full cosine matrix)."""

    model_config = ConfigDict(extra="forbid")

    pairs: list[tuple[str, str]] | None = Field(
        default=None, description="Sentence pairs; the response has one cosine per pair."
    )
    sentences: list[str] | None = Field(
        default=None, description="Sentences; the response has their n x n cosine matrix."
    )

    @model_validator(mode="after")
    def _one_of(self) -> SimilarityRequest:
        if (self.pairs is None) == (self.sentences is None):
            raise ValueError("give exactly one of `pairs` and `sentences`")
        return self


class SimilarityResponse(BaseModel):
    model: str
    scores: list[float] | None = Field(default=None, description="Cosine per pair.")
    matrix: list[list[float]] | None = Field(default=None, description="n x n cosines.")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="The text to search for.")
    k: int = Field(
        default=10,
        strict=True,  # like `dimensions`: true, "3", 1.0 or 1e2 is refused, not coerced
        description="How many results (1..max_k).",
    )


class SearchHit(BaseModel):
    rank: int
    id: int = Field(description="Vector id in the index.")
    row: int = Field(description="Row of the indexed input file (0-based).")
    score: float = Field(description="Cosine similarity to the query.")
    text: str
    doc_id: str | None = Field(
        default=None, description="The row's own id (`dclr index build --id-column`)."
    )


class SearchResponse(BaseModel):
    model: str
    query: str
    results: list[SearchHit]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape: which field (`param`) and which rule (`code`) a request broke."""

    error: ErrorDetail


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    fingerprint: str
    dim: int
    index: dict | None
    limits: dict
    batcher: dict
