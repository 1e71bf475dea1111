"""Issue 45 item 2: every JSON error the server sends is built in `dclr.serving.errors`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from dclr.serving import errors  # noqa: E402

SERVING = Path(errors.__file__).parent

# Every error code the server sends, by who sends it (status, type).
CODES = {
    # protocols
    "header_timeout": (408, "invalid_request_error"),
    "too_many_connections": (503, "server_overloaded"),
    "ambiguous_framing": (400, "invalid_request_error"),
    "bad_http_request": (400, "invalid_request_error"),
    # body limit middleware
    "bad_length": (400, "invalid_request_error"),
    "body_too_large": (413, "invalid_request_error"),
    "body_too_slow": (408, "invalid_request_error"),
    "unsupported_media_type": (415, "invalid_request_error"),
    "body_timeout": (408, "invalid_request_error"),
    # guard
    "host_not_allowed": (421, "invalid_request_error"),
    "invalid_api_key": (401, "authentication_error"),
    "too_many_requests_in_flight": (503, "server_overloaded"),
    # limits
    "empty_input": (400, "invalid_request_error"),
    "too_many_texts": (400, "invalid_request_error"),
    "text_too_long": (400, "invalid_request_error"),
    "empty_text": (400, "invalid_request_error"),
    "invalid_unicode": (400, "invalid_request_error"),
    "k_out_of_range": (400, "invalid_request_error"),
    "unsupported_dimensions": (400, "invalid_request_error"),
    # routes
    "no_index": (404, "invalid_request_error"),
    "queue_full": (503, "server_overloaded"),
    "cannot_finish_in_time": (413, "invalid_request_error"),
    "encode_failed": (500, "server_error"),
    "internal_error": (500, "server_error"),
}


def test_the_vocabulary_lists_every_error():
    assert {code: (e.status, e.type) for code, e in errors.ERRORS.items()} == CODES


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_every_code_is_sent_somewhere():
    used = set().union(
        *(_string_literals(p) for p in SERVING.glob("*.py") if p.name != "errors.py")
    )
    assert set(CODES) - used == set()


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and id(n) not in docs
    ]


@pytest.mark.parametrize("path", sorted(SERVING.glob("*.py")), ids=lambda p: p.name)
def test_no_module_but_errors_builds_error_json(path):
    if path.name == "errors.py":
        return
    strings = [s if isinstance(s, str) else s.decode("latin-1") for s in _code_strings(path)]
    for sign in ("HTTP/1.1 ", "invalid_request_error", "server_overloaded", "server_error",
                 "authentication_error"):  # fmt: skip
        assert not [s for s in strings if sign in s], f"{path.name} writes an error itself ({sign})"
    assert "error_json" not in path.read_text() and '"error":' not in path.read_text().replace(
        '`{"error":', ""
    )


def test_the_shapes():
    body = errors.error_body("body_too_large", "too big")
    assert json.loads(body) == {"error": {"message": "too big", "type": "invalid_request_error",
                                          "param": "body", "code": "body_too_large"}}  # fmt: skip
    raw = errors.raw_error("too_many_connections", "busy", [(b"retry-after", b"1")])
    body = errors.error_body("too_many_connections", "busy")
    assert raw == (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    response = errors.error_response("queue_full", "full", headers={"Retry-After": "3"})
    assert response.status_code == 503
    assert [k for k, _ in response.raw_headers] == [
        b"content-length",
        b"content-type",
        b"retry-after",
    ]
