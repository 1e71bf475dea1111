"""Metadata files dclr reads back, damaged or hand-edited: each is an error naming the file and
the fix (and the line, for JSON cut short), never a library traceback."""

import json
import shutil

import pytest
from helpers import make_tiny_model_dir, write_pseudo_corpus

from dclr.data.readers import open_source
from dclr.errors import InputError
from dclr.models.encoder import SentenceEncoder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from dclr.models.export import save_encoder

    tiny = make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")
    folder = tmp_path_factory.mktemp("exported") / "model"  # dclr.json, modules.json
    save_encoder(SentenceEncoder.from_pretrained(tiny, pooler="mean"), folder)
    return folder


def copy(model_dir, tmp_path):
    return shutil.copytree(model_dir, tmp_path / "copy")


def test_a_cut_off_dclr_json_is_named(model_dir, tmp_path):
    folder = copy(model_dir, tmp_path)
    text = (folder / "dclr.json").read_text()
    (folder / "dclr.json").write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match="not valid JSON") as err:
        SentenceEncoder.from_pretrained(folder)
    assert str(err.value.path).endswith("dclr.json") and "export the model again" in str(err.value)


def test_a_module_path_outside_the_folder_is_refused(model_dir, tmp_path):
    folder = copy(model_dir, tmp_path)
    (folder / "dclr.json").unlink()  # the pooler now comes from modules.json
    modules = [{"idx": 1, "name": "1", "path": "../../../../etc", "type": "x.Pooling"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(InputError, match="outside the model folder"):
        SentenceEncoder.from_pretrained(folder)


def test_a_model_that_needs_its_own_code_is_refused_by_design(model_dir, tmp_path):
    folder = copy(model_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    custom = {"AutoConfig": "configuration_custom.CustomConfig",
              "AutoModel": "modeling_custom.CustomModel"}  # fmt: skip
    config.update(model_type="custom", auto_map=custom)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="never runs a model's code"):
        SentenceEncoder.from_pretrained(folder, pooler="mean")
    del config["auto_map"]  # an architecture transformers does not know, no code offered
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="could not load .*custom"):
        SentenceEncoder.from_pretrained(folder, pooler="mean")


def test_a_cut_off_bulk_manifest_and_a_bare_index_json_are_named(model_dir, tmp_path):
    from dclr.indexing.bulk import BulkSettings, bulk_encode, read_bulk
    from dclr.indexing.index import read_meta

    texts = write_pseudo_corpus(tmp_path / "t.txt", 12)
    out = tmp_path / "bulk"
    bulk_encode(str(model_dir), open_source(texts), out, BulkSettings(5), pooler="mean")
    manifest = out / "manifest.json"
    manifest.write_text(manifest.read_text()[:100])
    with pytest.raises(InputError, match="not valid JSON") as err:
        read_bulk(out)
    assert str(err.value.path) == str(manifest) and err.value.line is not None
    index = tmp_path / "index"
    index.mkdir()
    (index / "index.json").write_text(json.dumps({"format": "dclr-index-1", "files": []}))
    with pytest.raises(InputError, match="params"):
        read_meta(index)
    bare = {"format": "dclr-index-1", "params": {}, "files": {}, "count": 3, "pooler": "mean",
            "model_fingerprint": "x"}  # fmt: skip
    (index / "index.json").write_text(json.dumps(bare))
    with pytest.raises(InputError, match="needs `dim`"):
        read_meta(index)
