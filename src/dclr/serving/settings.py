"""Every setting of `dclr serve`, declared once: its name, type, default and help text.

`ServeSettings` holds five sections; each field is one setting, named as its command-line option
(`max_batch` is `--max-batch`; a repeatable option takes the singular: `allowed_hosts` is
`--allowed-host`). `dclr serve`'s options are generated from these fields
(`dclr.cli.tools.settings_signature`), and the service, the batcher, the guard, the protocols and
`/health` read the same objects, so a default changed here changes all of them.

- `Served`: what is served and how the model is loaded;
- `Connections`: the listening socket and the connection guard (`dclr.serving.protocols`);
- `Limits`: per-request bounds (checked by `dclr.serving.limits`, shown by `/health`);
- `Batching`: the batcher's budget and queue (`dclr.serving.batcher`);
- `Security`: the API key, the Host allow-list and requests in flight (`dclr.serving.guard`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dclr.models.precision_names import PRECISION_HELP

# ---- Connections ---------------------------------------------------------------------------------
# Open sockets at most (idle keep-alive and half-sent requests included); past it uvicorn answers
# 503. Requests actually handled at once are bounded separately (Security.max_in_flight).
MAX_CONNECTIONS = 1024
# Open sockets one client address may hold (loopback included) before its new silent ones are
# shed (see dclr.serving.protocols.ConnectionGuard).
MAX_CONNECTIONS_PER_CLIENT = 256
# Seconds a client gets to send a complete request head (nginx's client_header_timeout is 60 s;
# a real client sends its headers in one packet, so 10 s only hurts stalled connections).
HEADER_TIMEOUT_S = 10.0
# Seconds SIGTERM (or Ctrl-C) waits for the requests being answered before it cancels them and
# exits: one long request no longer holds a stop for its whole run (issue 47: 67.9 s). As long as
# the queue's own deadline, so every request admitted within it still gets its answer.
DRAIN_TIMEOUT_S = 10.0

# ---- Limits --------------------------------------------------------------------------------------
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

# ---- Batching ------------------------------------------------------------------------------------
# Tokens per forward pass. A packed pass of ~2k tokens already runs the dense layers at the
# bulk rate (MiniLM, 2 CPU threads: see docs/performance.md, "Serving"); larger passes only
# delay the one-text queries queued behind them (a pass of 2,048 tokens takes ~0.5 s there).
MAX_BATCH_TOKENS = 2048
# Texts per forward pass at most (bounds the per-text bookkeeping of one pass).
MAX_BATCH_TEXTS = 512
# Idle-server wait for company before encoding. 0: the worker only yields once to the event loop,
# so requests already read in the same loop turn join; a lone query does not wait (under load,
# passes fill by themselves while the previous one runs).
MAX_WAIT_S = 0.0
# Texts waiting at most: 64 requests of 64 texts.
MAX_PENDING_TEXTS = 4096
# Tokens waiting at most: 512 texts of 512 tokens (a few MiB of ids; ~1-2 min of MiniLM work on
# 2 cores, so the deadline check refuses long before this bound is reached on such a machine).
MAX_PENDING_TOKENS = 262_144
# A request without a timeout of its own is refused when it could not finish within this many
# seconds: under the 30-60 s that HTTP clients typically wait, so they get a 503, not silence.
MAX_QUEUE_WAIT_S = 10.0

# ---- Security ------------------------------------------------------------------------------------
# Hosts a loopback-bound server answers to by default.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Requests handled at once at most; more get 503. Each holds at most one body (max_body_bytes)
# and its queued texts (bounded by the batcher), so this bounds memory held by requests.
MAX_IN_FLIGHT = 128
# API keys shorter than this are refused (a guessable key is no key).
MIN_API_KEY_CHARS = 8


def setting(default: Any, help: str, **option: Any) -> Any:
    """A settings field: its default, its help text, and what else its command-line option needs
    (`flag`, `envvar`, `show_default`; `cli=False`: no option)."""
    return field(default=default, metadata={"help": help, **option})


@dataclass(frozen=True)
class Served:
    """What is served and how the model is loaded."""

    index: Path | None = setting(None, "Index folder to serve POST /search from.")
    pooler: str | None = setting(None, "Pooler (default: what the model folder records).")
    device: str = setting("auto", "auto | cpu | cuda")
    precision: str = setting("fp32", PRECISION_HELP)
    docs: bool = setting(
        False,
        "Serve the interactive /docs page (Swagger UI; the browser loads its files from "
        "cdn.jsdelivr.net). Off: the server loads nothing from elsewhere.",
    )
    served_model_name: str | None = setting(
        None,
        "The model's name in responses, /health, the schema and the page (default: a folder's "
        "base name, runs/x/best as 'x/best'; a hub id or python-package:NAME as given). A "
        "folder's path is never served.",
    )


HTTP_PARSERS = ("auto", "httptools", "h11")  # what `protocols.protocol_with` runs
EVENT_LOOPS = ("auto", "asyncio", "uvloop")  # what `server.event_loop` runs


@dataclass(frozen=True)
class Connections:
    """The listening socket, the HTTP parser and event loop, and the connection guard's bounds."""

    host: str = setting("127.0.0.1", "Address to bind; anything but loopback exposes the service.")
    port: int = setting(8000, "TCP port (0: any free port, printed).")
    max_connections: int = setting(
        MAX_CONNECTIONS,
        "Open sockets at most (idle and half-sent included); at the cap a socket that sent "
        "nothing makes room, else 503.",
    )
    max_connections_per_client: int = setting(
        MAX_CONNECTIONS_PER_CLIENT, "Open sockets one client address may hold (same rule)."
    )
    header_timeout: float = setting(
        HEADER_TIMEOUT_S, "Seconds a client has to send a request's headers (then 408)."
    )
    http: str = setting(
        "auto",
        "HTTP parser: httptools (C, the default when installed) or h11 (pure Python); both "
        "carry the same guards.",
    )
    loop: str = setting("auto", "Event loop: uvloop (the default when installed) or asyncio.")
    drain_timeout: float = setting(
        DRAIN_TIMEOUT_S,
        "Seconds a stop (SIGTERM, Ctrl-C) waits for requests being answered; then they are "
        "cancelled (their sockets closed) and the server exits.",
    )
    access_log: bool = setting(
        True,
        "Log one line per answered request to stdout (client address, method, path, status), "
        "as uvicorn does.",
    )

    def __post_init__(self) -> None:
        if min(self.max_connections, self.max_connections_per_client) < 1:
            raise ValueError("max_connections and max_connections_per_client must be >= 1")
        if not self.header_timeout > 0:  # 0 would answer every request 408
            raise ValueError(f"header_timeout must be > 0 seconds, got {self.header_timeout}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout}")
        if (
            not isinstance(self.port, int)
            or isinstance(self.port, bool)
            or not 0 <= self.port <= 65535
        ):
            raise ValueError(f"port must be a whole number 0-65535, got {self.port!r}")
        if self.http not in HTTP_PARSERS:
            raise ValueError(f"unknown HTTP parser {self.http!r}: use {', '.join(HTTP_PARSERS)}")
        if self.loop not in EVENT_LOOPS:
            raise ValueError(f"unknown event loop {self.loop!r}: use {', '.join(EVENT_LOOPS)}")


@dataclass(frozen=True)
class Limits:
    """Per-request bounds: texts per request, characters per text, body bytes, search k
    (checked by `dclr.serving.limits`)."""

    max_texts: int = setting(MAX_TEXTS, "Texts per request.")
    max_chars: int = setting(MAX_CHARS, "Characters per text.")
    max_body_bytes: int = setting(MAX_BODY_BYTES, "Request body bytes.")
    max_k: int = setting(MAX_K, "Search results per query.")

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class Batching:
    """The batcher's settings (see `dclr.serving.batcher`): a forward pass's budget, the queue's
    bounds and the queue-wait bound of requests that send no timeout."""

    max_batch: int = setting(MAX_BATCH_TEXTS, "Texts per forward pass across batched requests.")
    max_batch_tokens: int = setting(
        MAX_BATCH_TOKENS,
        "Tokens per forward pass across batched requests (packed: bounds activation memory, "
        "and how long a one-text query waits behind indexing traffic).",
    )
    max_pending: int = setting(MAX_PENDING_TEXTS, "Queued texts before requests get 503.")
    max_pending_tokens: int = setting(MAX_PENDING_TOKENS, "Queued tokens before requests get 503.")
    max_queue_wait: float = setting(
        MAX_QUEUE_WAIT_S,
        "Seconds a request that sends no timeout header may wait: one that would not finish in "
        "time at the measured rate gets 503 at once.",
    )
    encode_workers: int | None = setting(
        None,
        "Forward passes run at once, each on its share of the CPU threads (default: 2 on a CPU "
        "with 2+ threads, 1 on a GPU).",
        show_default=False,
    )
    max_wait: float = setting(
        MAX_WAIT_S, "Seconds an idle worker waits for company before encoding.", cli=False
    )

    def __post_init__(self) -> None:
        sizes = (self.max_batch_tokens, self.max_batch, self.max_pending,
                 self.max_pending_tokens, self.encode_workers or 1)  # fmt: skip
        if min(sizes) < 1 or self.max_wait < 0:
            raise ValueError("batch and queue sizes and workers must be >= 1, max_wait_s >= 0")
        if self.max_queue_wait <= 0:
            raise ValueError("max_queue_wait_s must be > 0")


@dataclass(frozen=True)
class Security:
    """Who may talk to the service (see `dclr.serving.guard`). `allowed_hosts` None: any Host
    (`dclr serve` on a loopback bind fills in `LOOPBACK_HOSTS`, see `for_bind`)."""

    max_in_flight: int = setting(MAX_IN_FLIGHT, "Requests handled at once before new ones get 503.")
    api_key: str | None = setting(
        None,
        "Require 'Authorization: Bearer KEY' on every API route (prefer the DCLR_API_KEY "
        "environment variable: a command line is visible to other users).",
        envvar="DCLR_API_KEY",
        show_default=False,
    )
    allowed_hosts: tuple[str, ...] | None = setting(
        None,
        "Host header names to answer (repeatable). Default on a loopback bind: localhost, "
        "127.0.0.1, ::1 (defeats DNS rebinding); elsewhere: any.",
        flag="--allowed-host",
    )
    allow_no_auth: bool = setting(
        False,
        "Allow a non-loopback --host without an API key (e.g. behind a proxy that authenticates).",
    )

    def __post_init__(self) -> None:
        if self.api_key and len(self.api_key) < MIN_API_KEY_CHARS:
            raise ValueError("the API key must have at least 8 characters")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")


@dataclass(frozen=True)
class ServeSettings:
    """Every setting of `dclr serve`, by section; the model to serve is the command's argument."""

    served: Served = field(default_factory=Served)
    connections: Connections = field(default_factory=Connections)
    limits: Limits = field(default_factory=Limits)
    batching: Batching = field(default_factory=Batching)
    security: Security = field(default_factory=Security)

    @classmethod
    def from_options(cls, values: dict[str, Any]) -> ServeSettings:
        """Settings from one flat mapping of setting names to values (the command's options)."""
        built = {}
        for name, section in sections().items():
            names = [f.name for f in fields(section) if f.name in values]
            built[name] = section(**{n: values[n] for n in names})
        return cls(**built)


def sections() -> dict[str, type]:
    """ServeSettings' sections by attribute name, in order."""
    return {f.name: f.default_factory for f in fields(ServeSettings)}  # type: ignore[misc]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def for_bind(settings: ServeSettings) -> ServeSettings:
    """The settings `dclr serve` runs with: a non-loopback bind needs an API key (or
    `allow_no_auth`), and a loopback one answers only to `LOOPBACK_HOSTS` unless told otherwise.
    Raises ValueError with the fix."""
    host, security = settings.connections.host, settings.security
    loopback = is_loopback(host)
    if not loopback and not security.api_key and not security.allow_no_auth:
        raise ValueError(
            f"--host {host} exposes the service beyond this machine, and no API key is set\n"
            "  fix: set DCLR_API_KEY (or --api-key), or pass --allow-no-auth when a reverse "
            "proxy in front authenticates (see docs/serving.md)"
        )
    given = security.allowed_hosts
    hosts = tuple(given) if given else (LOOPBACK_HOSTS if loopback else None)
    security = replace(security, api_key=security.api_key or None, allowed_hosts=hosts)
    return replace(settings, security=security)


def exposure_warning(settings: ServeSettings) -> str | None:
    """What to warn of before serving: a bind beyond loopback with no API key (`for_bind` lets it
    through only with allow_no_auth, when a proxy authenticates), else None."""
    host = settings.connections.host
    if is_loopback(host) or settings.security.api_key:
        return None
    return f"binding {host} exposes the service (no authentication) beyond this machine"


def from_keywords(options: dict[str, Any], source: str = "dclr.serve") -> ServeSettings:
    """The settings `dclr serve` would run with, from Python keyword options (their names as
    `dclr serve --help` lists them, with _ for -): an unknown name is refused with the closest,
    a setting with an environment variable ($DCLR_API_KEY) reads it when not given, as the
    command line does, and `for_bind`'s checks apply. Raises ConfigError."""
    import os

    from dclr.configfile import unknown_option_error
    from dclr.errors import ConfigError

    known = {f.name: f for section in sections().values() for f in fields(section)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise unknown_option_error(
            unknown, list(known), source, "`dclr serve --help` explains each"
        )
    values = dict(options)
    for name, spec in known.items():
        envvar = spec.metadata.get("envvar")
        if name not in values and envvar and os.environ.get(envvar):
            values[name] = os.environ[envvar]
    if values.get("allowed_hosts") is not None:
        values["allowed_hosts"] = tuple(values["allowed_hosts"])
    try:
        return for_bind(ServeSettings.from_options(values))
    except (ValueError, TypeError) as err:  # TypeError: a value of the wrong type (port="80")
        raise ConfigError(str(err)) from None
