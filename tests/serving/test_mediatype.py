"""JSON only on every JSON route (issue 47 point 4): the fast path answered text/plain, form and
multipart bodies with 200, so any web page could make a keyless server encode without a CORS
preflight. Both paths now answer 415 before reading the body; JSON types still pass."""

from __future__ import annotations

import pytest
from helpers import record_route_checks

from dclr.serving.mediatype import is_json

BODY = b'{"input": "a text"}'


@pytest.fixture(scope="module")
def client(tiny_model_dir):
    from fastapi.testclient import TestClient

    from dclr.models.encoder import SentenceEncoder
    from dclr.serving.service import create_app

    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean")
    with TestClient(create_app(encoder, "tiny", "f" * 64)) as test_client:
        yield test_client


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
     "multipart/form-data; boundary=x", None],
)  # fmt: skip
@pytest.mark.parametrize("path", ["/v1/embeddings", "/similarity", "/search"])
def test_a_body_that_is_not_json_gets_415_on_every_route(client, content_type, path):
    headers = {} if content_type is None else {"content-type": content_type}
    answer = client.post(path, content=BODY, headers=headers)
    assert answer.status_code == 415
    error = answer.json()["error"]
    assert error["code"] == "unsupported_media_type"
    assert "application/json" in error["message"]


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8"])
def test_json_still_passes_on_both_paths(client, monkeypatch, content_type):
    """The first request is answered by the fast path, the second by the FastAPI route (which
    parses the body only for a JSON type). An unknown field such as `user` does not send a body
    to the route (the fast path ignores it, as the model does); `dimensions` does."""
    routed = record_route_checks(monkeypatch)  # the texts the route answered
    fast = client.post("/v1/embeddings", content=BODY, headers={"content-type": content_type})
    assert fast.status_code == 200, fast.text
    assert routed == []
    route = client.post(  # a field the fast path leaves to the route
        "/v1/embeddings",
        content=b'{"input": "a text", "user": "u", "dimensions": 8}',
        headers={"content-type": content_type},
    )
    assert route.status_code == 200, route.text
    assert routed == [["a text"]] and len(route.json()["data"][0]["embedding"]) == 8


def test_is_json_reads_the_type_not_its_parameters():
    assert is_json(b"application/json")
    assert is_json(b"application/vnd.api+json")
    assert not is_json(b"text/json")
    assert not is_json(b"")
    assert not is_json(None)
