"""dclr.models.resolve: what a model folder may make the process read (issue 39 item 5)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from dclr.errors import InputError
from dclr.models.encoder import SentenceEncoder
from dclr.models.resolve import MAX_MODEL_FILE_ENV, MAX_MODEL_FILE_MB, check_model_folder

MB = 1 << 20


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def pad(file, size):
    """`file` grown to `size` bytes with trailing spaces (still valid JSON)."""
    with file.open("ab") as fh:
        fh.write(b" " * (size - file.stat().st_size))


def test_a_padded_tokenizer_json_is_refused_unless_the_bound_is_raised(model_copy, monkeypatch):
    """A 300 MB tokenizer.json was read (19 s, peak RSS 1.95 GB) with no bound; here the bound is
    lowered to 1 MB so the padded file stays small."""
    pad(model_copy / "tokenizer.json", 2 * MB)
    monkeypatch.setenv(MAX_MODEL_FILE_ENV, "1")
    with pytest.raises(InputError, match=r"tokenizer.json is 2.0 MB; .* at most 1 MB") as err:
        SentenceEncoder.from_pretrained(model_copy, pooler="mean")
    assert f"{MAX_MODEL_FILE_ENV}=3" in str(err.value) and str(model_copy) in str(err.value)
    monkeypatch.setenv(MAX_MODEL_FILE_ENV, "3")  # the user who means it
    assert SentenceEncoder.from_pretrained(model_copy, pooler="mean").encode(["ok"]).shape[0] == 1


@pytest.mark.parametrize("name", ["config.json", "vocab.txt", "special_tokens_map.json"])
def test_every_file_read_whole_is_bounded_by_default_without_reading_it(model_copy, name):
    file = model_copy / name
    file.touch()  # a folder saved by an older transformers holds vocab.txt and the map
    os.truncate(file, (MAX_MODEL_FILE_MB + 236) * MB)  # 300 MB, sparse: costs no disk
    tic = time.monotonic()
    with pytest.raises(InputError, match=f"{name} is 300.0 MB"):
        check_model_folder(str(model_copy))
    assert time.monotonic() - tic < 1.0, "sizes are looked at, nothing is read"


def test_a_bad_bound_is_a_named_error(model_copy, monkeypatch):
    monkeypatch.setenv(MAX_MODEL_FILE_ENV, "lots")
    with pytest.raises(InputError, match=f"{MAX_MODEL_FILE_ENV}='lots' is not a positive"):
        check_model_folder(str(model_copy))


def test_the_cached_snapshot_of_a_hub_id_is_bounded_too(tiny_model_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants

    repo = tmp_path / "hub" / "models--someone--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = shutil.copytree(tiny_model_dir, repo / "snapshots" / ("0" * 40))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    check_model_folder("someone/tiny")  # within the bound
    os.truncate(snapshot / "tokenizer.json", 300 * MB)
    with pytest.raises(InputError, match="tokenizer.json is 300.0 MB"):
        check_model_folder("someone/tiny")
    check_model_folder("someone/not-cached")  # nothing local to bound
