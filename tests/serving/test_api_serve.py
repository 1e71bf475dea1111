"""`dclr.serve` is `dclr serve` from Python: the same server, so the same bytes for the same
request; its options are the command's by name, an unknown one is refused before anything
loads, and so is a bind beyond loopback without an API key."""

import sys

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import dclr  # noqa: E402
from dclr.errors import ConfigError  # noqa: E402
from dclr.serving.launch import serve_process  # noqa: E402

API = "import sys, dclr; dclr.serve(sys.argv[1], port=0, pooler='mean', max_texts=8)"
BODIES = [
    {"input": ["A man is playing a guitar.", "Rain is expected tomorrow."]},
    {"input": "one text", "encoding_format": "base64"},
    {"input": ["x"] * 9},  # over max_texts: the same 400 body
]


def answers(url: str) -> list[tuple[int, bytes]]:
    with httpx.Client(base_url=url, timeout=30) as client:
        got = [client.post("/v1/embeddings", json=body) for body in BODIES]
        health = client.get("/health").json()
    assert health["limits"]["max_texts"] == 8  # the option reached the server
    return [(r.status_code, r.content) for r in got]


def test_the_api_serves_the_bytes_the_command_serves(tiny_model_dir):
    model = str(tiny_model_dir)
    with serve_process([], command=[sys.executable, "-c", API, model]) as api:
        from_api = answers(api.url)
    with serve_process([model, "--pooler", "mean", "--max-texts", "8"]) as cli:
        from_cli = answers(cli.url)
    assert [status for status, _ in from_api] == [200, 200, 400]
    assert from_api == from_cli


def test_unknown_options_and_an_open_bind_without_a_key_are_refused_before_loading(
    monkeypatch,
):
    monkeypatch.delenv("DCLR_API_KEY", raising=False)
    with pytest.raises(
        ConfigError, match=r"dclr\.serve: unknown option 'prot' \(did you mean 'port'\?\)"
    ):
        dclr.serve("no/such/model", prot=8000)
    with pytest.raises(ConfigError, match="no API key is set"):
        dclr.serve("no/such/model", host="0.0.0.0")
    monkeypatch.setenv("DCLR_API_KEY", "short")  # read from the environment, as the CLI does
    with pytest.raises(ConfigError, match="at least 8 characters"):
        dclr.serve("no/such/model", host="0.0.0.0")


def test_a_parser_loop_or_port_that_cannot_work_is_refused_before_loading():
    """Named ConfigErrors before the model loads (a plain ValueError after loading it, or a
    TypeError for port="80", before)."""
    with pytest.raises(ConfigError, match="unknown event loop 'bogus'"):
        dclr.serve("no/such/model", loop="bogus")
    with pytest.raises(ConfigError, match="unknown HTTP parser 'bogus'"):
        dclr.serve("no/such/model", http="bogus")
    with pytest.raises(ConfigError, match="port must be a whole number 0-65535, got '80'"):
        dclr.serve("no/such/model", port="80")
    with pytest.raises(ConfigError, match="port must be a whole number 0-65535, got True"):
        dclr.serve("no/such/model", port=True)
    with pytest.raises(ConfigError, match="max_texts must be >= 1"):
        dclr.serve("no/such/model", max_texts=0)


def test_a_missing_parser_is_named_before_loading(monkeypatch):
    from dclr.serving import protocols

    monkeypatch.setattr(protocols, "available_parsers", lambda: ("h11",))
    with pytest.raises(ConfigError, match="needs httptools"):
        dclr.serve("no/such/model", http="httptools")
