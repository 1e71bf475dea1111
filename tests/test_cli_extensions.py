"""Command groups of installed packages join `dclr` through the `dclr.cli` entry-point group
(issue 36): the lab's `experiment`, `runs` and `report` come that way, and dclr names no package."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import typer
from helpers import REPO_ROOT
from typer.testing import CliRunner

import dclr.cli.main
from dclr.cli.main import ENTRY_POINT_GROUP, register_extensions

TOY = """
import typer

def register(app: typer.Typer) -> None:
    @app.command("toy")
    def toy() -> None:
        typer.echo("toy ran")
"""


def _with_entry_points(monkeypatch, tmp_path: Path, points: list[metadata.EntryPoint]) -> None:
    (tmp_path / "toy_plugin.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        metadata, "entry_points", lambda group: [p for p in points if p.group == group]
    )


def test_an_installed_entry_point_adds_its_commands(monkeypatch, tmp_path):
    point = metadata.EntryPoint("toy", "toy_plugin:register", ENTRY_POINT_GROUP)
    _with_entry_points(monkeypatch, tmp_path, [point])
    app = typer.Typer()
    app.command("core")(lambda: None)
    register_extensions(app)
    result = CliRunner().invoke(app, ["toy"])
    assert result.exit_code == 0 and "toy ran" in result.stdout
    assert {"serve", "dualcse"} <= {g.name for g in app.registered_groups} | {
        c.name for c in app.registered_commands
    }


def test_a_broken_entry_point_is_named_and_the_rest_still_loads(monkeypatch, tmp_path, capsys):
    broken = metadata.EntryPoint("gone", "no_such_plugin:register", ENTRY_POINT_GROUP)
    good = metadata.EntryPoint("toy", "toy_plugin:register", ENTRY_POINT_GROUP)
    _with_entry_points(monkeypatch, tmp_path, [broken, good])
    app = typer.Typer()
    register_extensions(app)
    err = capsys.readouterr().err
    assert "no_such_plugin:register" in err and "ModuleNotFoundError" in err
    assert "toy" in {c.name for c in app.registered_commands}


def test_the_lab_declares_its_entry_point():
    project = tomllib.loads((REPO_ROOT / "lab" / "pyproject.toml").read_text())["project"]
    target = project["entry-points"][ENTRY_POINT_GROUP]["lab"]
    assert target == "dclr_lab.cli:register"
    import dclr_lab.cli

    assert callable(dclr_lab.cli.register)


def _lab_installed() -> bool:
    try:
        metadata.distribution("dclr-lab")
    except metadata.PackageNotFoundError:
        return False
    return True


PROBE = """
import json
from dclr.cli.main import app
names = [g.name for g in app.registered_groups] + [c.name for c in app.registered_commands]
print(json.dumps(sorted(n for n in names if n)))
"""


def test_dclr_has_the_lab_commands_exactly_when_the_lab_is_installed():
    """Installed (`pip install -e ./lab`): `dclr report` exists. A checkout on PYTHONPATH with no
    dclr-lab metadata: dclr has no lab commands and still runs; `python -m dclr_lab` has them."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    names = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert {"train", "eval", "serve"} <= names
    assert ({"report", "experiment", "runs"} <= names) is _lab_installed()
    assert "report" in names or not ({"experiment", "runs"} & names)  # all of the lab or none


def test_python_m_dclr_lab_is_dclr_with_the_lab():
    done = subprocess.run(
        [sys.executable, "-m", "dclr_lab", "report", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: dclr report" in done.stdout


def test_dclr_never_names_the_lab_in_its_extensions():
    assert not any("lab" in name for name in dclr.cli.main.EXTENSIONS)
