"""A report as a list of blocks (headings, text, tables, images), rendered twice: Markdown with
the PNG files beside it, and self-contained HTML with the PNGs inlined."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Report:
    title: str
    blocks: list[tuple[str, Any]]

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def text(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.blocks.append(("table", (header, rows)))

    def image(self, path: Path, alt: str) -> None:
        self.blocks.append(("img", (path, alt)))

    def markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            if kind == "h2":
                lines += [f"## {value}", ""]
            elif kind == "p":
                lines += [value, ""]
            elif kind == "table":
                header, rows = value
                lines.append("| " + " | ".join(header) + " |")
                lines.append("| " + " | ".join("---" for _ in header) + " |")
                lines += ["| " + " | ".join(row) + " |" for row in rows]
                lines.append("")
            elif kind == "img":
                path, alt = value
                lines += [f"![{alt}]({path.name})", ""]
        return "\n".join(lines)

    def html(self) -> str:
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title><style>body{{font-family:sans-serif;"
            "max-width:60em;margin:2em auto}table{border-collapse:collapse}td,th{border:1px "
            "solid #ccc;padding:.2em .6em;text-align:right}img{max-width:100%}</style></head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for kind, value in self.blocks:
            if kind == "h2":
                parts.append(f"<h2>{html.escape(value)}</h2>")
            elif kind == "p":
                parts.append(f"<p>{html.escape(value)}</p>")
            elif kind == "table":
                header, rows = value
                parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header))
                for row in rows:
                    cells = "".join(f"<td>{html.escape(c)}</td>" for c in row)
                    parts.append(f"<tr>{cells}</tr>")
                parts.append("</table>")
            elif kind == "img":
                path, alt = value
                data = base64.b64encode(Path(path).read_bytes()).decode()
                parts.append(f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>")
        parts.append("</body></html>")
        return "\n".join(parts)
