"""Issue 45 item 1: every setting of `dclr serve` is declared once, in `ServeSettings`.

The command's options are generated from the settings; these tests compare the two (name,
default, help) and pin `dclr serve --help` to the options and defaults it had before the
settings were declared in one place (the command as of 7ff2184)."""

from __future__ import annotations

import dataclasses

import typer

from dclr.cli.main import app
from dclr.serving.settings import (
    LOOPBACK_HOSTS,
    ServeSettings,
    exposure_warning,
    for_bind,
    sections,
)

# `dclr serve`'s options and defaults before issue 45 (each written out by hand in the command).
BEFORE = {
    "index": None, "host": "127.0.0.1", "port": 8000, "pooler": None, "device": "auto",
    "precision": "fp32", "max_texts": 256, "max_chars": 8192, "max_body_bytes": 4194304,
    "max_k": 100, "max_batch": 512, "max_batch_tokens": 2048, "max_pending": 4096,
    "max_pending_tokens": 262144, "max_queue_wait": 10.0, "encode_workers": None,
    "max_in_flight": 128, "max_connections": 1024, "max_connections_per_client": 256,
    "header_timeout": 10.0, "http": "auto", "loop": "auto", "api_key": None,
    "allowed_hosts": None, "allow_no_auth": False, "docs": False, "served_model_name": None,
}  # fmt: skip
# Options added since, with their defaults.
ADDED = {"drain_timeout": 10.0, "access_log": True}  # issue 47 points 6 and 9


def serve_options() -> dict[str, typer.core.click.Option]:
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params if p.param_type_name == "option"}


def settings_fields() -> dict[str, dataclasses.Field]:
    return {
        f.name: f
        for section in sections().values()
        for f in dataclasses.fields(section)
        if f.metadata.get("cli", True)
    }


def test_every_option_is_a_setting_with_its_name_default_and_help():
    options, fields = serve_options(), settings_fields()
    assert list(options) == list(fields)
    for name, field in fields.items():
        option = options[name]
        assert option.default == field.default, name
        assert option.help == field.metadata["help"], name
        assert option.opts == [field.metadata.get("flag", "--" + name.replace("_", "-"))], name


def test_the_options_and_defaults_are_those_before_issue_45():
    options = serve_options()
    assert {name: o.default for name, o in options.items()} == {**BEFORE, **ADDED}
    assert options["allowed_hosts"].opts == ["--allowed-host"] and options["allowed_hosts"].multiple
    assert options["api_key"].envvar == "DCLR_API_KEY"


def test_a_setting_is_declared_in_one_section_only():
    names = [f.name for s in sections().values() for f in dataclasses.fields(s)]
    assert len(names) == len(set(names))


def test_the_options_build_the_settings():
    settings = ServeSettings.from_options({**BEFORE, "max_batch": 7, "allowed_hosts": ["a.b"]})
    assert settings.batching.max_batch == 7
    assert settings == dataclasses.replace(
        ServeSettings(),
        batching=dataclasses.replace(ServeSettings().batching, max_batch=7),
        security=dataclasses.replace(ServeSettings().security, allowed_hosts=["a.b"]),
    )


def test_a_loopback_bind_answers_only_loopback_hosts():
    assert for_bind(ServeSettings()).security.allowed_hosts == LOOPBACK_HOSTS
    assert ServeSettings().security.allowed_hosts is None  # create_app's default: any Host


def test_only_an_open_bind_without_a_key_is_warned_of():
    """The CLI prints it and dclr.serve warns it: one message, one condition."""
    open_bind = for_bind(ServeSettings.from_options({"host": "0.0.0.0", "allow_no_auth": True}))
    assert exposure_warning(open_bind) == (
        "binding 0.0.0.0 exposes the service (no authentication) beyond this machine"
    )
    keyed = for_bind(ServeSettings.from_options({"host": "0.0.0.0", "api_key": "k" * 32}))
    assert exposure_warning(keyed) is None
    assert exposure_warning(for_bind(ServeSettings.from_options({}))) is None


def test_connection_settings_that_would_refuse_every_request_are_refused():
    """--header-timeout 0 answered every request 408; the connection bounds are checked as the
    per-request limits are."""
    import pytest

    from dclr.serving.settings import Connections

    for bad, words in [
        ({"header_timeout": 0}, "header_timeout must be > 0"),
        ({"drain_timeout": -1}, "drain_timeout must be >= 0"),
        ({"max_connections": 0}, "max_connections"),
        ({"max_connections_per_client": 0}, "max_connections"),
        ({"port": 70000}, "port must be a whole number 0-65535"),
    ]:
        with pytest.raises(ValueError, match=words):
            Connections(**bad)
    Connections(header_timeout=0.5, drain_timeout=0, port=0)  # the edges that are fine
