"""A fence around the uvicorn internals `dclr.serving.protocols` relies on (issue 45 item 5).

The guarded protocols subclass uvicorn's `H11Protocol` and `HttpToolsProtocol`, override some of
their methods, call private ones, and `GuardedHttpToolsProtocol._parse` is a modified copy of
`HttpToolsProtocol.data_received`. pyproject.toml pins the uvicorn releases this was checked
against; these tests fail loudly when a uvicorn release changes what the overrides assume, so that
widening the pin means reading the new code, not finding out in production.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from pathlib import Path

import pytest

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from packaging.requirements import Requirement  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from dclr.serving.protocols import protocol_with  # noqa: E402
from dclr.serving.settings import Connections  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# uvicorn's methods the guard overrides or calls, with the signatures it was written against.
SIGNATURES = {
    (H11Protocol, "__init__"): ["self", "config", "server_state", "app_state", "_loop"],
    (H11Protocol, "connection_made"): ["self", "transport"],
    (H11Protocol, "data_received"): ["self", "data"],
    (H11Protocol, "connection_lost"): ["self", "exc"],
    (H11Protocol, "handle_events"): ["self"],
    (H11Protocol, "send_400_response"): ["self", "msg"],
    (HttpToolsProtocol, "__init__"): ["self", "config", "server_state", "app_state", "_loop"],
    (HttpToolsProtocol, "connection_made"): ["self", "transport"],
    (HttpToolsProtocol, "data_received"): ["self", "data"],
    (HttpToolsProtocol, "connection_lost"): ["self", "exc"],
    (HttpToolsProtocol, "send_400_response"): ["self", "msg"],
    (HttpToolsProtocol, "on_headers_complete"): ["self"],
    (HttpToolsProtocol, "on_message_complete"): ["self"],
    (HttpToolsProtocol, "_unset_keepalive_if_required"): ["self"],
    (HttpToolsProtocol, "_should_upgrade"): ["self"],
    (HttpToolsProtocol, "handle_websocket_upgrade"): ["self"],
    (HttpToolsProtocol, "_unsupported_upgrade_warning"): ["self"],
}

# uvicorn's HttpToolsProtocol.data_received as `_parse` copies it (0.55.0): if this changes,
# port the change into `_parse` and update this text.
DATA_RECEIVED = """
    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()

        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
"""


def test_the_installed_uvicorn_is_in_the_pinned_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [r for r in project["optional-dependencies"]["serve"] if r.startswith("uvicorn")]
    requirement = Requirement(spec)
    assert requirement.specifier.contains(uvicorn.__version__), (
        f"uvicorn {uvicorn.__version__} is outside {spec}: read the changes to its protocols "
        "against dclr.serving.protocols (and this fence) before widening the pin"
    )
    assert "<" in str(requirement.specifier), "the uvicorn pin needs an upper bound"


@pytest.mark.parametrize(("cls", "name"), list(SIGNATURES), ids=lambda x: getattr(x, "__name__", x))
def test_the_overridden_and_called_methods_keep_their_signatures(cls, name):
    assert list(inspect.signature(getattr(cls, name)).parameters) == SIGNATURES[cls, name]


def test_the_copied_data_received_is_uvicorns():
    source = inspect.getsource(HttpToolsProtocol.data_received)
    assert source.strip() == DATA_RECEIVED.strip(), (
        "uvicorn changed HttpToolsProtocol.data_received: port the change into "
        "GuardedHttpToolsProtocol._parse (dclr.serving.protocols) and update DATA_RECEIVED"
    )


def test_the_attributes_the_guard_reads_are_set_by_uvicorn():
    for cls in (H11Protocol, HttpToolsProtocol):
        init = inspect.getsource(cls.__init__) + inspect.getsource(cls.connection_made)
        for attribute in ("self.connections", "self.transport", "self.client", "self.loop",
                          "self.cycle"):  # fmt: skip
            assert re.search(rf"{re.escape(attribute)}\b.*=", init), (cls.__name__, attribute)
    assert "self.conn = h11.Connection(" in inspect.getsource(H11Protocol.__init__)
    assert "h11_max_incomplete_event_size" in inspect.signature(uvicorn.Config).parameters


# ---- behaviour: each guarded protocol, driven in-process -----------------------------------------
class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def set_protocol(self, protocol):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


async def _app(scope, receive, send):
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _feed(http: str, *chunks: bytes) -> tuple[Transport, object]:
    async def run():
        config = uvicorn.Config(_app, http="h11", log_level="critical")
        config.load()
        cls = protocol_with(Connections(http=http, header_timeout=30.0))
        protocol = cls(config, ServerState(), {}, asyncio.get_running_loop())
        transport = Transport()
        protocol.connection_made(transport)
        for chunk in chunks:
            protocol.data_received(chunk)
        armed = protocol._header_timer is not None
        await asyncio.sleep(0.05)  # the request cycle, if any, runs
        protocol.connection_lost(None)
        return transport, armed

    return asyncio.run(run())


PARSERS = ["h11", "httptools"]


@pytest.mark.parametrize("http", PARSERS)
def test_ambiguous_framing_is_a_json_400_and_a_close(http):
    transport, _ = _feed(
        http,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    assert transport.written.startswith(
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json"
    )
    assert b'"code": "ambiguous_framing"' in transport.written and transport.closed


@pytest.mark.parametrize("http", PARSERS)
def test_malformed_http_is_a_json_400_and_a_close(http):
    transport, _ = _feed(http, b"GARBAGE\r\n\r\n")
    assert b'"code": "bad_http_request"' in transport.written and transport.closed


@pytest.mark.parametrize("http", PARSERS)
def test_the_header_deadline_is_armed_on_a_partial_head_and_disarmed_by_a_whole_one(http):
    _, armed = _feed(http, b"GET / HTTP/1.1\r\nHost: a\r\n")
    assert armed
    transport, armed = _feed(http, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert not armed and transport.written.startswith(b"HTTP/1.1 204")


def test_uvicorn_adds_no_concurrency_limit_of_its_own(monkeypatch):
    """Issue 47 point 2: uvicorn's `limit_concurrency` also counts request tasks, which outlive
    their closed connections for a moment; under 1,300 trickled bodies it answered 2 of 230 good
    requests a plain-text "Service Unavailable" (benchmarks/serve_faults.py phase 9). The guard
    keeps the connections to the hard cap, and every refusal is its JSON 503."""
    import uvicorn

    from dclr.serving import server

    seen = {}

    def run(self, sockets=None):
        seen["config"] = self.config
        for sock in sockets or []:
            sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    server.run(object(), Connections(port=0))
    config = seen["config"]
    assert config.limit_concurrency is None
    assert config.timeout_graceful_shutdown == Connections().drain_timeout
