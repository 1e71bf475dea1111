"""Archived run records under docs/results are committed, not git-ignored.

The docs tell readers to `dclr runs restore docs/results/.../records`; a `runs/` ignore rule once
kept every archive out of git, so a fresh clone had nothing to restore.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def in_git_checkout() -> None:
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")


def test_archived_records_exist_and_are_not_ignored(in_git_checkout):
    files = sorted(p for p in RESULTS.glob("**/records/runs/*/*") if p.is_file())
    assert files, "no archived run records under docs/results"
    ignored = _git("check-ignore", "--no-index", *map(str, files)).stdout.split()
    assert ignored == []


def test_a_new_archive_would_not_be_ignored(in_git_checkout):
    """Any future `dclr runs archive NAME -o docs/results/SCALE/NAME/records` is kept too."""
    probe = RESULTS / "cpu-scale" / "new-experiment" / "records" / "runs" / "r-1" / "results.json"
    assert _git("check-ignore", "--no-index", str(probe)).returncode == 1  # 1: not ignored


# Studies that keep their own JSON records (not a run registry) and their own report builder.
STUDIES = ("pairs",)  # dclr_lab.pairs_report
ARCHIVED = sorted(
    p.parent
    for p in RESULTS.glob("*/*/records")
    if (p.parent / "report.md").is_file() and p.parent.name not in STUDIES
)
STUDY_FOLDERS = sorted(p.parent for p in RESULTS.glob("*/*/records") if p.parent.name in STUDIES)


@pytest.mark.parametrize("folder", ARCHIVED, ids=[p.name for p in ARCHIVED])
def test_a_committed_report_rebuilds_byte_identically_from_its_records(folder, tmp_path):
    """`dclr report NAME --root .../records` gives back the committed report.md, to the byte
    (the pairs study, which trains through sentence-transformers, has its own builder: below)."""
    from dclr_lab.registry import Registry
    from dclr_lab.report import build_report

    root = tmp_path / "records"
    shutil.copytree(folder / "records", root)
    with Registry(root) as registry:
        registry.rebuild()
        built = build_report(folder.name, registry, tmp_path / "report", "cpu")
    assert built.read_text() == (folder / "report.md").read_text()


@pytest.mark.parametrize("folder", STUDY_FOLDERS, ids=[p.name for p in STUDY_FOLDERS])
def test_a_study_report_rebuilds_byte_identically_from_its_records(folder, tmp_path):
    """`python -m dclr_lab.pairs_report -o FOLDER` gives back the committed report.md, to the byte."""
    from dclr_lab.pairs_report import build_report

    shutil.copytree(folder / "records", tmp_path / "records")
    built = build_report(tmp_path)
    assert built.read_text() == (folder / "report.md").read_text()
    assert (tmp_path / "pairs.png").is_file()
