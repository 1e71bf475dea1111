"""The fast path of POST /v1/embeddings (`dclr.serving.fastpath`): it answers exactly what the
FastAPI route answers, and leaves every request it does not fully understand to the route."""

from __future__ import annotations

import json

import pytest
from helpers import record_route_checks

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from dclr.models.encoder import SentenceEncoder  # noqa: E402
from dclr.serving import fastpath  # noqa: E402
from dclr.serving.fastpath import parse_request  # noqa: E402
from dclr.serving.service import create_app  # noqa: E402


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": "a b"}, (["a b"], "float")),
        ({"input": ["a", "b c"], "model": "x", "user": "u"}, (["a", "b c"], "float")),
        ({"input": ["a"], "encoding_format": "base64", "model": None}, (["a"], "base64")),
        ({"input": []}, ([], "float")),  # the limits' own message for it: see below
    ],
)
def test_parse_request_takes_what_the_model_accepts_as_is(body, expected):
    assert parse_request(json.dumps(body).encode()) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'["a"]',
        b'{"model": "x"}',
        b'{"input": 3}',
        b'{"input": ["a", 3]}',
        b'{"input": "a", "model": 3}',
        b'{"input": "a", "encoding_format": "hex"}',
        b'{"input": "a", "dimensions": 32}',
        b'{"input": "\\ud800"}',  # a lone surrogate: orjson refuses it, the route answers 400
    ],
)
def test_parse_request_leaves_everything_else_to_the_route(raw):
    assert parse_request(raw) is None


@pytest.fixture(scope="module")
def client(tiny_model_dir):
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean")
    with TestClient(create_app(encoder, "tiny", "f" * 64)) as local:
        yield local


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_the_fast_answer_is_the_routes_answer_to_the_byte(client, monkeypatch, encoding_format):
    """The first answer comes from the fast path (the route never ran), the second from the
    route: comparing two answers of the route would pass with the fast path switched off."""
    texts = ["A man is playing a guitar.", "The cat sleeps."]
    request = {"input": texts, "encoding_format": encoding_format}
    routed = record_route_checks(monkeypatch)  # the texts the route answered
    fast = client.post("/v1/embeddings", json=request)
    assert routed == [], "the fast path left a well-formed request to the route"
    seen: list[list[str]] = []
    original = parse_request

    def declined(body: bytes):  # the route answers, and we see that the fast path was asked
        seen.append(original(body)[0])
        return None

    monkeypatch.setattr(fastpath, "parse_request", declined)
    route = client.post("/v1/embeddings", json=request)
    assert seen == [texts] and routed == [texts]
    assert fast.status_code == route.status_code == 200
    assert fast.headers["content-type"] == route.headers["content-type"]
    assert fast.content == route.content


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"input": []}, 400, "empty_input"),  # parsed, then declined by the limits
        ({"input": "   "}, 400, "empty_text"),
        ({"input": "a", "dimensions": 33}, 400, "unsupported_dimensions"),
        ({"input": "\u200b\ufeff"}, 400, "empty_text"),  # only invisible characters
        ({"input": 3}, 422, None),
    ],
)
def test_requests_the_fast_path_declines_get_the_routes_errors(client, body, status, code):
    answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert code is None or error["code"] == code


def test_a_lone_surrogate_still_gets_the_routes_400(client):
    answer = client.post("/v1/embeddings", content=b'{"input": "\\ud800"}',
                         headers={"content-type": "application/json"})  # fmt: skip
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_unicode"


# ---- tied to the request model (issue 45 item 4) -----------------------------------------------
def test_the_fast_path_handles_every_field_of_the_request_model():
    """A field added to `EmbeddingsRequest` must be added to `fastpath.FIELDS` (handled, or
    declined so that a body carrying it goes to the route), or the fast path would ignore it."""
    from dclr.serving.schemas import EmbeddingsRequest

    assert set(fastpath.FIELDS) == set(EmbeddingsRequest.model_fields)
    assert set(fastpath.FIELDS.values()) <= {"texts", "checked", "format", "declined"}


def test_every_format_the_model_accepts_is_served_fast():
    from dclr.serving.schemas import EmbeddingsRequest

    for fmt in ("float", "base64"):
        assert EmbeddingsRequest(input="a", encoding_format=fmt).encoding_format in fastpath.FORMATS
    assert set(fastpath.FORMATS) == {"float", "base64"}


@pytest.mark.parametrize("field", fastpath.DECLINED)
def test_a_declined_field_goes_to_the_route(field):
    assert parse_request(json.dumps({"input": "a", field: None}).encode()) is None


def test_the_fields_test_fails_for_a_new_field():
    from pydantic import create_model

    from dclr.serving.schemas import EmbeddingsRequest

    wider = create_model("Wider", __base__=EmbeddingsRequest, user_tag=(str | None, None))
    assert set(wider.model_fields) - set(fastpath.FIELDS) == {"user_tag"}
