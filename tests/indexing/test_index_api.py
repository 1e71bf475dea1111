"""`dclr.build_index` and `dclr.open_index`: `dclr index build` and `dclr search` from Python, with
the same results (the CLI's JSON) and the same refusals. The search logic lived in the CLI
command, so Python users had to rebuild it from internals."""

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("faiss")

from helpers import make_tiny_model_dir  # noqa: E402

import dclr  # noqa: E402
from dclr.cli.main import app  # noqa: E402
from dclr.errors import ConfigError, InputError  # noqa: E402
from dclr.indexing.index import Hit  # noqa: E402

CORPUS = ["A man is playing a guitar.", "Two dogs run on the beach.", "The cat sleeps on the sofa.",
          "A woman slices an onion.", "Kids are playing football in a park."]  # fmt: skip


@pytest.fixture(scope="module")
def built(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-index")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t, "id": f"d{i}"}) + "\n"
                              for i, t in enumerate(CORPUS)))  # fmt: skip
    meta = dclr.build_index(tiny_model_dir, corpus, folder / "index", column="text",
                            kind="hnsw", pooler="mean", id_column="id", ef_search=64)  # fmt: skip
    return folder / "index", meta


def test_the_api_builds_what_the_cli_builds_and_searches_as_it_does(built):
    index, meta = built
    assert (meta["count"], meta["params"]["kind"], meta["params"]["ef_search"]) == (5, "hnsw", 64)
    searcher = dclr.open_index(index)
    hits = searcher.search(CORPUS[2], k=3)
    assert isinstance(hits[0], Hit) and (hits[0].row, hits[0].doc_id) == (2, "d2")
    cli = CliRunner().invoke(app, ["search", CORPUS[2], "--index", str(index), "-k", "3", "--json"])
    assert cli.exit_code == 0, cli.output
    assert [{"rank": r + 1, **h.__dict__} for r, h in enumerate(hits)] == json.loads(cli.output)[
        "results"
    ]
    both = searcher.search([CORPUS[2], CORPUS[4]], k=1)  # one list of hits per query
    assert [h[0].row for h in both] == [2, 4] and searcher.search([], k=1) == []


def test_the_api_refuses_what_the_cli_refuses(built, tiny_model_dir, tmp_path):
    index, _ = built
    other = make_tiny_model_dir(tmp_path / "other", seed=1)
    with pytest.raises(InputError, match="not comparable"):
        dclr.open_index(index, model=str(other))
    searcher = dclr.open_index(index)
    with pytest.raises(InputError, match="k must be >= 1"):
        searcher.search("a query", k=0)
    with pytest.raises(InputError, match="query 1 is not valid text: .*lone surrogate"):
        searcher.search(["fine", "bad \udcff"], k=1)
    with pytest.raises(InputError, match="not valid text: not a string"):
        searcher.search([b"bytes"], k=1)  # type: ignore[list-item]
    with pytest.raises(
        ConfigError,
        match=r"build_index: unknown option 'ef_serach' \(did you mean 'ef_search'\?\); known: \[",
    ):
        dclr.build_index(tiny_model_dir, tmp_path / "c.txt", tmp_path / "i", ef_serach=8)
