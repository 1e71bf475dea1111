"""An index of run folders in an embedded SQLite database (standard library `sqlite3`).

The run folders are the truth; the index is a cache that answers `dclr runs list/show/compare`
without opening thousands of folders, and `rebuild(root)` recreates it from the folders alone.
A run folder is any directory holding `config.yaml` and `env.json` (what `run_training` writes);
`labels.json` (written by the experiment runner) records which experiments use the run and its
places in each: {"main": [{"backbone": "minilm", "method": "dclr"}], ...} (a list, because one
run can fill several cells of an experiment, e.g. the sensitivity sweeps' shared default point).
"""

from __future__ import annotations

import builtins  # annotations in Registry: its method `list` shadows the builtin
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dclr.lab_api import STS_TASKS, flat_config, read_recipe, write_text

INDEX_FILE = "index.sqlite"
LABELS_FILE = "labels.json"
# Config fields that say where things are, not what is trained: left out of the run identity.
LOCATION_FIELDS = ("output_dir", "data_dir", "complementary_cache", "extra")
# Options added after runs were recorded: at their defaults they are left out of the hash, so a
# run recorded before they existed keeps its identity (the speed and memory ones change no CPU
# run; `noise_objective: auto` keeps the paper form's ascent, what every recorded DCLR run took).
LATER_DEFAULTS = {
    "prefetch": "auto",
    "fused_optimizer": "auto",
    "compile": "off",
    "length_bucket": 0,
    "low_memory": False,
    "noise_gradient": "auto",  # DCLR's ascent: autograd on a CPU, as before the option existed
    "noise_objective": "auto",  # what DCLR's noise ascends: the loss form's own objective
    "sts_text": "raw",  # the dev STS text: the files as they are, as before the option
    "released_geometry": False,  # an extra dev measurement; what is trained is unchanged
    "clip_scope": "model",  # the NLI head's gradients outside the clipped norm, as before
    "prepared_mask": "auto",  # the same mask either way on a CPU; a GPU's computed once
    "async_checkpoints": "auto",  # the same checkpoint files, written on a thread or not
    "false_negative_rule": "fixed",  # DCLR's phi rule, the only one before the pair rules
    "pair_margin": 0.0,  # used by the pair rules only
}
_SKIP_DIRS = {"checkpoints", "best", "final", "tensorboard"}  # never hold a run folder

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,        -- the folder path relative to the index root
    config_hash TEXT NOT NULL,      -- identity of what is trained (see LOCATION_FIELDS)
    status TEXT NOT NULL,           -- complete (results.json) | incomplete
    method TEXT, model TEXT, seed INTEGER,
    steps INTEGER, best_step INTEGER, best_dev_metric REAL,
    sts_avg REAL, stsb REAL, sickr REAL,
    git_commit TEXT, device TEXT,
    config_json TEXT NOT NULL, results_json TEXT, env_json TEXT
);
CREATE TABLE IF NOT EXISTS labels (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    experiment TEXT NOT NULL,
    labels_json TEXT NOT NULL,
    PRIMARY KEY (run_id, experiment, labels_json)
);
CREATE INDEX IF NOT EXISTS runs_method ON runs(method, model);
CREATE INDEX IF NOT EXISTS runs_hash ON runs(config_hash);
CREATE INDEX IF NOT EXISTS labels_experiment ON labels(experiment);
"""

RUN_COLUMNS = (
    "run_id",
    "config_hash",
    "status",
    "method",
    "model",
    "seed",
    "steps",
    "best_step",
    "best_dev_metric",
    "sts_avg",
    "stsb",
    "sickr",
    "git_commit",
    "device",
    "config_json",
    "results_json",
    "env_json",
)


def config_hash(config: dict[str, Any], hashed: tuple[str, ...] = ()) -> str:
    """Short SHA-256 of the config without its location fields: equal hash, same training
    (`hashed`: later options hashed even at their defaults, as older code did)."""
    kept = {
        k: v
        for k, v in sorted(config.items())
        if k not in LOCATION_FIELDS
        and (k in hashed or not (k in LATER_DEFAULTS and LATER_DEFAULTS[k] == v))
    }
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class RunRecord:
    """What the index holds about one run folder."""

    run_id: str
    config: dict[str, Any]
    results: dict[str, Any] | None
    env: dict[str, Any] | None
    labels: dict[str, list[dict[str, Any]]]

    @property
    def status(self) -> str:
        return "complete" if self.results is not None else "incomplete"

    @property
    def scores(self) -> dict[str, float]:
        """The 7-task STS test table of best/ (empty when the run has none)."""
        return dict((self.results or {}).get("after") or {})

    def row(self) -> tuple[Any, ...]:
        results, scores = self.results or {}, self.scores
        return (
            self.run_id,
            config_hash(self.config),
            self.status,
            self.config.get("method"),
            self.config.get("model"),
            self.config.get("seed"),
            results.get("steps"),
            results.get("best_step"),
            results.get("best_dev_metric"),
            scores.get("avg"),
            scores.get("STSBenchmark"),
            scores.get("SICKRelatedness"),
            (self.env or {}).get("git_commit"),
            (self.env or {}).get("device"),
            json.dumps(self.config, sort_keys=True),
            None if self.results is None else json.dumps(self.results, sort_keys=True),
            None if self.env is None else json.dumps(self.env, sort_keys=True),
        )


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "env.json").is_file()


def read_run(path: Path, run_id: str) -> RunRecord:
    """Read a run folder (config, env, results when complete, labels when registered)."""

    def load_json(name: str) -> Any:
        file = path / name
        return json.loads(file.read_text()) if file.is_file() else None

    config = flat_config(read_recipe(path / "config.yaml"))  # bounded like any recipe
    return RunRecord(run_id, config, load_json("results.json"), load_json("env.json"),
                     load_json(LABELS_FILE) or {})  # fmt: skip


def _like_text(text: str) -> str:
    """`text` matched literally inside a LIKE pattern (ESCAPE '\\')."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Every run folder under `root`, in sorted order (models and checkpoints are not searched)."""
    for current, dirs, _files in os.walk(root):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        if is_run_dir(here):
            yield here


def set_labels(run_dir: Path, experiment: str, labels: list[dict[str, Any]]) -> None:
    """Record in the run folder that `experiment` uses this run, at these places (labels)."""
    file = run_dir / LABELS_FILE
    current = json.loads(file.read_text()) if file.is_file() else {}
    current[experiment] = labels
    write_text(file, json.dumps(current, indent=2, sort_keys=True) + "\n")


class Registry:
    """The SQLite index of the run folders under `root` (default file: root/index.sqlite)."""

    def __init__(
        self, root: str | Path, db_path: str | Path | None = None, read_only: bool = False
    ) -> None:
        """`read_only`: create nothing; a root without an index is indexed in memory (what
        `dclr runs list` does, so listing never writes a file)."""
        self.root = Path(root)
        if not read_only:
            self.root.mkdir(parents=True, exist_ok=True)
        self.db_path = Path(db_path) if db_path is not None else self.root / INDEX_FILE
        fresh = not self.db_path.exists()
        where = ":memory:" if read_only and fresh else self.db_path
        self.db = sqlite3.connect(where, timeout=30)  # several writers: wait, not fail
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.executescript(SCHEMA)
        if fresh:  # no index yet (a new root, or run folders copied in): build it from the folders
            self.rebuild()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_id(self, run_dir: Path) -> str:
        path = Path(run_dir).resolve()
        try:
            return path.relative_to(self.root.resolve()).as_posix()
        except ValueError:  # a folder outside the root is indexed by its absolute path
            return path.as_posix()

    def register(self, run_dir: str | Path) -> RunRecord:
        """Insert or refresh one run folder (call after `run_training` returns)."""
        record = read_run(Path(run_dir), self.run_id(Path(run_dir)))
        with self.db:
            self._upsert(record)
        return record

    def _upsert(self, record: RunRecord) -> None:
        marks = ", ".join("?" for _ in RUN_COLUMNS)
        self.db.execute(
            f"INSERT OR REPLACE INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({marks})",
            record.row(),
        )
        self.db.execute("DELETE FROM labels WHERE run_id = ?", (record.run_id,))
        self.db.executemany(
            "INSERT INTO labels VALUES (?, ?, ?)",
            sorted(
                {
                    (record.run_id, exp, json.dumps(lab, sort_keys=True))
                    for exp, cells in record.labels.items()
                    for lab in cells
                }
            ),
        )

    def rebuild(self) -> int:
        """Drop the index and re-create it from the run folders under the root; returns the count."""
        records = [read_run(p, self.run_id(p)) for p in find_run_dirs(self.root)]
        with self.db:
            self.db.execute("DELETE FROM labels")
            self.db.execute("DELETE FROM runs")
            for record in records:
                self._upsert(record)
        return len(records)

    # ---- queries ---------------------------------------------------------------------------
    def list(
        self,
        experiment: str | None = None,
        method: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[sqlite3.Row]:
        sql = "SELECT DISTINCT runs.* FROM runs LEFT JOIN labels USING (run_id) WHERE 1"
        args: list[Any] = []
        for column, value in (
            ("labels.experiment", experiment),
            ("runs.method", method),
            ("runs.status", status),
        ):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " ORDER BY runs.run_id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return self.db.execute(sql, args).fetchall()

    def get(self, run_id: str) -> sqlite3.Row | None:
        """A run by its id (runs/FOLDER) or its folder's name, else the one run whose id holds
        `run_id` (a part of the name, the hash in it) or whose config hash starts with it; None
        when none or several match (never a guess between them: `matches` lists them)."""
        rows = self.matches(run_id)
        return rows[0] if len(rows) == 1 else None

    def matches(self, run_id: str) -> builtins.list[sqlite3.Row]:
        """The runs `get` chooses among, in order of preference: the id itself, a folder's
        name, then every run whose id holds `run_id` or whose config hash starts with it."""
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None:
            return [row]
        text = _like_text(run_id)
        rows = self.db.execute(  # a folder's name, as `dclr runs list` shows it under runs/
            "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id", (f"%/{text}",)
        ).fetchall()
        if len(rows) == 1:
            return rows
        return self.db.execute(
            "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' "
            "OR config_hash LIKE ? ESCAPE '\\' ORDER BY run_id",
            (f"%{text}%", f"{text}%"),
        ).fetchall()

    def stages(self, root: str) -> builtins.list[sqlite3.Row]:
        """The stages of the schedule whose root folder is `root` (its id, runs/ROOT, or its
        name), in order: `ROOT/stage-1`, `ROOT/stage-2` (`dclr.driver.run_stages`); [] when
        `root` names no schedule, or the name fits the roots of two schedules."""
        text = _like_text(root.rstrip("/"))
        rows = self.db.execute(
            "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' OR run_id LIKE ? ESCAPE '\\' "
            "ORDER BY run_id",
            (f"{text}/stage-%", f"%/{text}/stage-%"),
        ).fetchall()
        rows = [r for r in rows if re.fullmatch(r"stage-\d+", r["run_id"].rsplit("/", 1)[1])]
        roots = {r["run_id"].rsplit("/", 1)[0] for r in rows}
        if len(roots) != 1:
            return []
        return sorted(rows, key=lambda r: int(r["run_id"].rsplit("-", 1)[1]))

    def labels(self, run_id: str) -> dict[str, builtins.list[dict[str, Any]]]:
        rows = self.db.execute(
            "SELECT experiment, labels_json FROM labels WHERE run_id = ? ORDER BY 1, 2", (run_id,)
        ).fetchall()
        out: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(r["experiment"], []).append(json.loads(r["labels_json"]))
        return out

    def experiment_runs(self, experiment: str) -> builtins.list[tuple[sqlite3.Row, dict[str, Any]]]:
        """(run row, labels) for every place of every run the experiment uses."""
        rows = self.db.execute(
            "SELECT runs.*, labels.labels_json FROM runs JOIN labels USING (run_id) "
            "WHERE labels.experiment = ? ORDER BY runs.run_id",
            (experiment,),
        ).fetchall()
        return [(r, json.loads(r["labels_json"])) for r in rows]

    def snapshot(self) -> builtins.list[tuple[Any, ...]]:
        """Every stored row, sorted: two indexes of the same folders give equal snapshots."""
        runs = self.db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs").fetchall()
        labels = self.db.execute("SELECT run_id, experiment, labels_json FROM labels").fetchall()
        return sorted(("run", *tuple(r)) for r in runs) + sorted(
            ("label", *tuple(r)) for r in labels
        )


def compare(a: sqlite3.Row, b: sqlite3.Row) -> tuple[dict[str, tuple[Any, Any]], list[tuple]]:
    """Config fields that differ (name -> (a, b)) and score rows (task, a, b, b - a)."""
    ca, cb = json.loads(a["config_json"]), json.loads(b["config_json"])
    diff = {k: (ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}
    sa = (json.loads(a["results_json"]) or {}).get("after", {}) if a["results_json"] else {}
    sb = (json.loads(b["results_json"]) or {}).get("after", {}) if b["results_json"] else {}
    scores = []
    for task in (*STS_TASKS, "avg", "alignment", "uniformity"):
        if task in sa or task in sb:
            va, vb = sa.get(task), sb.get(task)
            delta = vb - va if va is not None and vb is not None else None
            scores.append((task, va, vb, delta))
    return diff, scores
