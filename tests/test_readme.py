"""README's Python example runs: its code block, at tiny scale (a random 2-layer model, 2 steps)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO_ROOT, make_tiny_model_dir

README = REPO_ROOT / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text[text.index("## Python API") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README's Python API section has no python code block"
    return match.group(1)


def at_tiny_scale(code: str, model: Path, out: Path) -> str:
    """The example with its three settings (MODEL, STEPS, OUT) replaced; nothing else changes."""
    settings = {"MODEL": repr(str(model)), "STEPS": "2", "OUT": repr(str(out))}
    for name, value in settings.items():
        code, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, flags=re.M)
        assert count == 1, f"README's example should set {name} once"
    return code


def test_readme_python_example_runs(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.setenv("DCLR_DATA_DIR", str(data_dir))
    model = make_tiny_model_dir(tmp_path / "model")
    code = at_tiny_scale(python_example(), model, tmp_path / "run")
    # twice, as in a notebook: the second run replaces the first (issue 38 item 6: it was
    # refused, with a fix naming only command-line flags)
    for _ in range(2):
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    printed = capsys.readouterr().out
    assert "(2, 32)" in printed and "STS-B dev" in printed
    summary = namespace["summary"]
    assert summary["steps"] == 2 and Path(summary["final_dir"]).is_dir()
    assert set(namespace["after"]) >= {"STSBenchmark", "SICKRelatedness"}


def test_the_sentence_transformers_snippet_reaches_the_packaged_model(minilm_path):
    """Issue 38 item 6: the snippet said "path/to/model", and SentenceTransformer does not read
    `python-package:NAME`; its first lines now give the packaged model's folder."""
    text = README.read_text()
    section = text[text.index("## With sentence-transformers") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    lines = code.splitlines()
    wanted = [line for line in lines if "resolve_model" in line]
    assert len(wanted) == 2, "the snippet imports resolve_model and calls it once"
    namespace: dict = {}
    exec("\n".join(wanted), namespace)  # noqa: S102 - our own README
    assert Path(namespace["path"]) == minilm_path
    assert 'SentenceTransformer("path/to/model")' not in code


def test_the_sentence_transformers_snippet_defines_its_data_and_names_its_extra():
    """Issue 47 point 9: the snippet used an undefined `sentences` and did not say it needs the
    `st` extra; the Serving section did not name the `serve` extra."""
    text = README.read_text()
    section = text[text.index("## With sentence-transformers") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert re.search(r"^sentences = ", code, re.M) and "'.[st]'" in code
    serving = text[text.index("## Serving") :]
    assert "'.[serve]'" in serving[: serving.index("```")]


def test_the_public_api_is_importable_from_dclr():
    import dclr

    for name in ("SentenceEncoder", "load_encoder", "encode", "evaluate_sts", "evaluate_retrieval",
                 "evaluate", "TrainConfig", "load_config", "train", "Trainer", "Method", "Batch",
                 "register"):  # fmt: skip
        assert getattr(dclr, name) is not None
    with pytest.raises(AttributeError):
        dclr.no_such_thing  # noqa: B018


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` runs each line of README's "Run the tests" block verbatim, in order, `pytest` last."""
    text = README.read_text()
    section = text[text.index("Run the tests:") :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README has no test command block after 'Run the tests:'"
    wanted = [line for line in match.group(1).splitlines() if line.strip()]
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    positions = [ci.index(line) for line in wanted]  # ValueError names a missing line
    assert positions == sorted(positions)
    assert ci[-1] == wanted[-1] == "pytest"
