"""scripts/device_bundle.py counts what the device tool sends beside the bundle: the files git
tracks and the untracked ones it does not ignore, not the ignored ones."""

from __future__ import annotations

import importlib.util
import subprocess

from helpers import REPO_ROOT


def load_script():
    spec = importlib.util.spec_from_file_location(
        "device_bundle", REPO_ROOT / "scripts" / "device_bundle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_working_tree_counts_tracked_and_unignored_files_only(tmp_path):
    script = load_script()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored.bin\n")
    for name in ("tracked.bin", "untracked.bin", "ignored.bin"):
        (tmp_path / name).write_bytes(b"\0" * 2**20)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.bin", ".gitignore"], check=True)
    mib = script.working_tree_mib(tmp_path)
    assert abs(mib - (2 + len("ignored.bin\n") / 2**20)) < 1e-9
    assert script.CARRY_MIB == 64


def test_outside_a_checkout_every_file_but_the_bundle_counts(tmp_path):
    """A copy of the tree without .git (the rehearsal's): all its files, not the bundle's."""
    script = load_script()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"\0" * 2**20)
    (tmp_path / ".device").mkdir()
    (tmp_path / ".device" / "model.bin").write_bytes(b"\0" * 2**21)
    assert script.working_tree_mib(tmp_path, tmp_path / ".device") == 1.0


def test_the_stamp_names_the_tree_a_device_run_measures(tmp_path, monkeypatch):
    """The device machine gets the tree without .git: `--stamp` records its commit and whether
    src/ or benchmarks/ moved on from it (the bundle is built once; the tree moves on)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    bundle = load_script()
    tree = tmp_path / "tree"
    for name in ("src/a.py", "benchmarks/results/r.json"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("1\n")

    def git(*args):
        return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").stdout.strip()
    out = tmp_path / ".device"
    assert bundle.stamp(out, tree) == f"{head} clean"
    (tree / "benchmarks/results/r.json").write_text("2\n")  # a report: not the code
    assert bundle.stamp(out, tree) == f"{head} clean"
    (tree / "src/a.py").write_text("2\n")
    assert bundle.stamp(out, tree) == f"{head} dirty"
    assert (out / "source").read_text() == f"{head} dirty\n"
    (tmp_path / "copied").mkdir()  # a tree without .git
    assert bundle.stamp(out, tmp_path / "copied") is None
