"""A benchmark's report on disk: the JSON, its markdown table beside it, both written atomically
(`dclr.atomic`: a cut run never leaves half a results file), and the table printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dclr.atomic import write_text


def save_report(out: Path, report: dict[str, Any], table: str) -> None:
    """`report` as `out` (.json), `table` as `out` with suffix .md; the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(report, indent=2) + "\n")
    write_text(out.with_suffix(".md"), table)
    print(table)
