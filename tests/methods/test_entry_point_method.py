"""A method from an installed package, no edit to dclr: one options file, one plugin file and an
entry point in the `dclr.methods` group, trained with `dclr train recipe.yaml`.

The package is "installed" the way pip leaves one: its modules and a `*.dist-info` folder with
`entry_points.txt` on the import path (`importlib.metadata` reads exactly that), in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import make_tiny_model_dir, write_pseudo_corpus

OPTIONS = '''
from dataclasses import dataclass

from dclr.errors import ConfigError


@dataclass
class SpreadOptions:
    """Options of the outside method: one field, declared once."""

    scale: float = 1.0

    def validate(self, config) -> None:
        if not self.scale > 0:
            raise ConfigError(f"scale must be > 0, got {self.scale}")
'''
PLUGIN = """
import torch
from torch import nn

from dclr.methods.base import Method
from spreadplugin.options import SpreadOptions


class SpreadObjective(nn.Module):
    def __init__(self, model, scale):
        super().__init__()
        self.model, self.scale = model, scale

    def forward(self, batch):
        z = nn.functional.normalize(self.model(**batch.features), dim=-1)
        spread = (z @ z.T).pow(2).mean()
        return {"loss": self.scale * spread, "spread": spread.detach()}


class Spread(Method):
    name = "spread"
    section = SpreadOptions

    def build_objective(self, run, model):
        return SpreadObjective(model, run.config.section(self.name).scale)


METHOD = Spread()
"""


def install_plugin(site: Path) -> None:
    package = site / "spreadplugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "options.py").write_text(OPTIONS)
    (package / "plugin.py").write_text(PLUGIN)
    info = site / "spreadplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spreadplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dclr.methods]\nspread = spreadplugin.plugin:METHOD\n")


@pytest.mark.slow
def test_an_installed_packages_method_trains_with_dclr_train(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_plugin(site)
    model = make_tiny_model_dir(tmp_path / "model")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 32)
    recipe = tmp_path / "spread.yaml"
    recipe.write_text(
        textwrap.dedent(f"""\
        method: spread
        model: {{name: {model}, pooler: mean, mlp_head: false}}
        data: {{corpus: {corpus}}}
        optimisation: {{batch_size: 4, max_steps: 2}}
        run: {{eval_steps: 0, log_steps: 1, test_eval: false}}
        spread: {{scale: 3.0}}
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "TQDM_DISABLE": "1"}  # fmt: skip
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "dclr", "train", str(recipe), "-o", str(run)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(abs(r["loss"] - 3.0 * r["spread"]) < 1e-5 for r in train)
    assert (run / "final" / "model.safetensors").is_file()
    # without the package on the path the method is unknown, and the error lists the known ones
    bare = subprocess.run(
        [sys.executable, "-m", "dclr", "train", str(recipe), "-o", str(tmp_path / "bare")],
        capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"}, timeout=600,
    )  # fmt: skip
    assert bare.returncode != 0 and "unknown method 'spread'" in bare.stdout + bare.stderr
