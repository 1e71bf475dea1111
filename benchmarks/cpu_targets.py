"""Issue 46's targets for one CPU kind, judged from the tables `scripts/cpu_kind_check.py` wrote.

Reads `benchmarks/results/{serve_vs_peer,int8_encode,serve_faults}@NAME.json` (NAME: this
machine's `recording_name()`, or `--name`) and writes `cpu_targets@NAME.md` beside them: each
target, what the tables measured, and "met", "missed" or "—" (a table missing). Nothing is
measured here; the verdicts are the tables' own figures against the issue's bounds:

- `dclr serve` against infinity-emb: 32 clients × 1 text ≥ 1.5× its texts/s; one client's p50
  ≤ 0.75× its p50; 8 clients × 64 texts ≥ 1.5× with no request refused; peak memory ≤ its;
- int8 encode (the engine this kind's recording picks for `--precision int8`) ≥ 1.0×
  sentence-transformers' OpenVINO static int8 at a 7-task STS average at least the peer's, and
  ≥ 1.5× dclr fp32; its STS average within 0.3 of fp32 (the issue's "what to build");
- fp32 encode ≥ 1.5× sentence-transformers' torch backend;
- the fault table: no good request failed.

    python benchmarks/cpu_targets.py [--name AuthenticAMD-AVX2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INT8_VARIANT = {"static": "dclr_int8_packed", "dynamic": "dclr_int8_dynamic_packed"}

Row = tuple[str, str, str]


def _verdict(passed: bool | None) -> str:
    return "—" if passed is None else "met" if passed else "missed"


def serving_rows(serve: dict[str, Any] | None) -> list[Row]:
    """The four serving targets from a `serve_vs_peer` result (medians over its rounds)."""
    names = ("32 clients × 1 text ≥ 1.5× infinity-emb", "1 client p50 ≤ 0.75× infinity-emb",
             "8 clients × 64 texts ≥ 1.5× infinity-emb, 0 refused",
             "peak memory ≤ infinity-emb's")  # fmt: skip
    servers = (serve or {}).get("servers", {})
    if "dclr" not in servers or "infinity" not in servers:
        return [(name, "— (no serve_vs_peer table with the peer)", "—") for name in names]
    ours, peer = servers["dclr"], servers["infinity"]

    def scenario(server: dict[str, Any], name: str) -> dict[str, Any]:
        return server["scenarios"][name]

    many = scenario(ours, "c32x1")["texts_per_s"] / scenario(peer, "c32x1")["texts_per_s"]
    one = scenario(ours, "c1x1")["latency"]["p50_ms"] / scenario(peer, "c1x1")["latency"]["p50_ms"]
    bulk = scenario(ours, "c8x64")["texts_per_s"] / scenario(peer, "c8x64")["texts_per_s"]
    refused = scenario(ours, "c8x64")["errors"]  # every answer but 200 (503s among them)
    memory = (ours["peak_rss_mib"], peer["peak_rss_mib"])
    return [
        (names[0], f"{many:.2f}×", _verdict(many >= 1.5)),
        (names[1], f"{one:.2f}×", _verdict(one <= 0.75)),
        (names[2], f"{bulk:.2f}×, {refused} refused or failed", _verdict(bulk >= 1.5 and refused == 0)),
        (names[3], f"{memory[0]:.0f} MiB against {memory[1]:.0f} MiB",
         _verdict(memory[0] <= memory[1])),
    ]  # fmt: skip


def encode_rows(int8: dict[str, Any] | None, engine: str = "static") -> list[Row]:
    """The int8 and fp32 encode targets from an `int8_encode` result; `engine`: the int8 engine
    the kind's recording picks (`int8_engine`), so the row is the path `--precision int8` runs."""
    ours = INT8_VARIANT[engine]
    names = (f"int8 ({ours}) ≥ 1.0× ST OpenVINO static int8, STS avg ≥ the peer's",
             "int8 ≥ 1.5× dclr fp32", "int8 STS avg within 0.3 of fp32",
             "fp32 encode ≥ 1.5× ST torch")  # fmt: skip
    rate = (int8 or {}).get("sentences_per_s", {})
    sts = {k: v["avg"] for k, v in (int8 or {}).get("sts", {}).items() if "avg" in v}

    def quotient(a: str, b: str) -> float | None:
        return rate[a] / rate[b] if a in rate and b in rate else None

    rows: list[Row] = []
    peer = quotient(ours, "st_openvino_int8")
    if peer is None or ours not in sts or "st_openvino_int8" not in sts:
        rows.append((names[0], "— (not in the int8_encode table)", "—"))
    else:
        rows.append((names[0], f"{peer:.2f}×, STS {sts[ours]:.3f} against "
                     f"{sts['st_openvino_int8']:.3f}",
                     _verdict(peer >= 1.0 and sts[ours] >= sts["st_openvino_int8"])))  # fmt: skip
    fp32 = quotient(ours, "dclr_fp32_packed")
    rows.append((names[1], "—" if fp32 is None else f"{fp32:.2f}×",
                 _verdict(None if fp32 is None else fp32 >= 1.5)))  # fmt: skip
    if ours in sts and "dclr_fp32_packed" in sts:
        gap = sts[ours] - sts["dclr_fp32_packed"]
        rows.append((names[2], f"{gap:+.2f}", _verdict(abs(gap) <= 0.3)))
    else:
        rows.append((names[2], "—", "—"))
    torch_peer = quotient("dclr_fp32_packed", "st_fp32")
    rows.append((names[3], "—" if torch_peer is None else f"{torch_peer:.2f}×",
                 _verdict(None if torch_peer is None else torch_peer >= 1.5)))  # fmt: skip
    return rows


def fault_rows(faults: dict[str, Any] | None) -> list[Row]:
    """The fault table's target: every good request of every scenario answered 200."""
    name = "fault table: 0 good requests failed"
    if not faults:
        return [(name, "— (no serve_faults table)", "—")]
    sections = {k: v for k, v in faults.items() if isinstance(v, dict)}
    failed = sum(int(v.get("good_failed", 0)) for v in sections.values())
    short = [k for k, v in sections.items() if v.get("every_good_request_200") is False]
    measured = f"{failed} failed" + (f"; not all 200 in {', '.join(short)}" if short else "")
    return [(name, measured, _verdict(failed == 0 and not short))]


def int8_engine(name: str) -> str:
    """The int8 engine the packaged recording `name` (else its hardware key's, as
    `dclr.models.cpu_kind.cpu_policy` falls back) picks; the default without one."""
    from dclr.models.cpu_kind import DEFAULT, policy_path, read_policy

    for candidate in (name, name.split("-family")[0]):
        if policy_path(candidate).is_file():
            return read_policy(policy_path(candidate)).int8_engine
    return DEFAULT.int8_engine


def read(kind: str, name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{kind}@{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def judge(name: str) -> list[Row]:
    return (serving_rows(read("serve_vs_peer", name))
            + encode_rows(read("int8_encode", name), int8_engine(name))
            + fault_rows(read("serve_faults", name)))  # fmt: skip


def render(name: str, rows: list[Row]) -> str:
    lines = [f"# Issue 46's targets on {name}", "",
             "From the tables `scripts/cpu_kind_check.py` wrote (`benchmarks/results/"
             f"{{serve_vs_peer,int8_encode,serve_faults}}@{name}.json`); "
             "`python benchmarks/cpu_targets.py` judges them, measuring nothing.", "",
             "| target | measured | verdict |", "| --- | --- | --- |"]  # fmt: skip
    lines += [f"| {target} | {measured} | {verdict} |" for target, measured, verdict in rows]
    lines += ["", "The int8 STS rows compare each engine with its own calibration in that run (dclr's "
              "shipped 32 sentences, the peer's `--calibration-n` draw); "
              "`benchmarks/int8_calibration_spread.py` compares them on equal draws."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", default=None, help="a recording name (default: this machine's)")
    args = parser.parse_args(argv)
    if args.name is None:
        from dclr.models.cpu_kind import recording_name

        args.name = recording_name()
    from dclr.atomic import write_text

    text = render(args.name, judge(args.name))
    write_text(RESULTS / f"cpu_targets@{args.name}.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
