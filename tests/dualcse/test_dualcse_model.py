"""The dual encoder: pair inputs, save -> load -> identical embeddings for both kinds, stock
sentence-transformers loading of each encoder folder, implicitness, clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from dclr.dualcse.model import DUALCSE_CONFIG, SEMANTICS, DualEncoder
from dclr.errors import ConfigError, InputError
from dclr.models.export import save_encoder

MAX_ABS_DIFF = 1e-5  # float32 forward passes of the same weights, batched differently
SENTENCES = [
    "It's a bit chilly in here.",
    "Please close the window.",
    "Hi",
    'Robbie responds, "I need to learn more about it", and walks off towards the park again.',
    "unicode: café naïve résumé",
]


@pytest.fixture
def dual(tiny_encoder):
    """Factory: a tiny DualEncoder of either kind; a bi model's implicit encoder gets other weights."""

    def make(kind: str) -> DualEncoder:
        if kind == "cross":
            return DualEncoder("cross", {"cross": tiny_encoder("mean")}).eval()
        implicit = tiny_encoder("mean")
        gen = torch.Generator().manual_seed(7)
        with torch.no_grad():  # distinct weights, so r != u
            for p in implicit.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        return DualEncoder("bi", {"explicit": tiny_encoder("mean"), "implicit": implicit}).eval()

    return make


def test_cross_encodes_the_pair_sentence_then_prompt_word(dual):
    model = dual("cross")
    batch = model.tokenize(["Hi"], "implicit")
    tokens = model.encoder_for("implicit").tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    assert tokens == ["[CLS]", "hi", "[SEP]", "implicit", "[SEP]"]
    assert batch["token_type_ids"][0].tolist() == [0, 0, 0, 1, 1]


def test_truncation_shortens_the_sentence_never_the_prompt(dual):
    model = dual("cross")
    batch = model.tokenize([" ".join(["word"] * 50)], "explicit", max_length=10)
    tokenizer = model.encoder_for("explicit").tokenizer
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    assert len(tokens) == 10 and tokens[-3:] == ["[SEP]", "explicit", "[SEP]"]


def test_encode_matches_the_forward_pass_on_a_padded_batch(dual):
    for kind in ("cross", "bi"):
        model = dual(kind)
        for semantics in SEMANTICS:
            with torch.no_grad():
                direct = model(semantics, **model.tokenize(SENTENCES, semantics)).numpy()
            assert (
                np.abs(model.encode(SENTENCES, semantics, batch_size=2) - direct).max()
                < MAX_ABS_DIFF
            )


@pytest.mark.parametrize("kind", ["cross", "bi"])
def test_save_load_gives_identical_embeddings(dual, tmp_path, kind):
    model = dual(kind)
    path = model.save(tmp_path / "model", extra={"step": 3})
    info = json.loads((path / DUALCSE_CONFIG).read_text())
    assert info["kind"] == kind and info["step"] == 3
    loaded = DualEncoder.from_pretrained(path)
    assert loaded.kind == kind
    for semantics in SEMANTICS:
        assert np.array_equal(
            loaded.encode(SENTENCES, semantics), model.encode(SENTENCES, semantics)
        )
    assert np.array_equal(loaded.implicitness(SENTENCES), model.implicitness(SENTENCES))


def test_the_two_embeddings_differ_and_implicitness_is_their_cosine_distance(dual):
    for kind in ("cross", "bi"):
        model = dual(kind)
        r = model.encode(SENTENCES, "explicit", normalize=True)
        u = model.encode(SENTENCES, "implicit", normalize=True)
        assert np.abs(r - u).max() > 1e-3
        expected = 1 - (r * u).sum(1)
        assert np.allclose(model.implicitness(SENTENCES), expected, atol=1e-6)


def test_bi_with_identical_encoders_has_zero_implicitness(tiny_encoder):
    model = DualEncoder("bi", {"explicit": tiny_encoder("mean"), "implicit": tiny_encoder("mean")})
    assert np.allclose(model.implicitness(SENTENCES), 0.0, atol=1e-6)


def test_each_encoder_folder_loads_in_sentence_transformers(dual, tmp_path):
    cross = dual("cross")
    path = cross.save(tmp_path / "cross")
    st = SentenceTransformer(str(path / "encoder"), device="cpu")
    for semantics in SEMANTICS:
        theirs = st.encode([(s, semantics) for s in SENTENCES], convert_to_numpy=True)
        assert np.abs(theirs - cross.encode(SENTENCES, semantics)).max() < MAX_ABS_DIFF
    bi = dual("bi")
    path = bi.save(tmp_path / "bi")
    for semantics in SEMANTICS:
        theirs = SentenceTransformer(str(path / semantics), device="cpu").encode(SENTENCES)
        assert np.abs(theirs - bi.encode(SENTENCES, semantics)).max() < MAX_ABS_DIFF


def test_a_normalizing_pipeline_gives_sentence_transformers_vectors(dual, tmp_path):
    """Trained from all-MiniLM-L6-v2 (its pipeline ends in Normalize), the exported folders end
    in Normalize too: DualEncoder.encode then returns unit vectors, as SentenceTransformer(folder)
    does (it returned the raw ones: same directions, other lengths); normalize=False still gives
    the raw ones."""
    for kind in ("cross", "bi"):
        model = dual(kind)
        for encoder in model.encoders.values():
            encoder.normalizes = True  # as loaded from a folder whose pipeline normalises
        loaded = DualEncoder.from_pretrained(model.save(tmp_path / kind))
        for semantics in SEMANTICS:
            if kind == "cross":
                st = SentenceTransformer(str(tmp_path / kind / "encoder"), device="cpu")
                theirs = st.encode([(s, semantics) for s in SENTENCES], convert_to_numpy=True)
            else:
                st = SentenceTransformer(str(tmp_path / kind / semantics), device="cpu")
                theirs = st.encode(SENTENCES)
            ours = loaded.encode(SENTENCES, semantics)
            assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
            assert np.abs(theirs - ours).max() < MAX_ABS_DIFF
            raw = loaded.encode(SENTENCES, semantics, normalize=False)
            assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)


def test_unknown_semantics_is_an_input_error_with_the_choices(dual):
    model = dual("cross")
    with pytest.raises(InputError, match="unknown semantics 'literal'") as err:
        model.encode(SENTENCES, "literal")
    assert "explicit, implicit" in err.value.fix
    with pytest.raises(InputError, match="unknown semantics"):
        model.tokenize(SENTENCES, "both")


def test_loading_errors_name_the_folder_and_the_fix(tiny_encoder, tmp_path):
    single = save_encoder(tiny_encoder("mean"), tmp_path / "single")
    with pytest.raises(InputError, match="not a DualCSE model folder") as err:
        DualEncoder.from_pretrained(single)
    assert err.value.path == str(single) and "dclr dualcse rte" in err.value.fix
    with pytest.raises(InputError, match="does not exist"):
        DualEncoder.from_pretrained(tmp_path / "missing")
    (single / DUALCSE_CONFIG).write_text('{"format": "dualcse-1", "kind": "tri"}')
    with pytest.raises(InputError, match="unsupported DualCSE model"):
        DualEncoder.from_pretrained(single)


def test_constructor_checks(tiny_encoder):
    with pytest.raises(ConfigError, match="unknown encoder kind"):
        DualEncoder("triple", {"cross": tiny_encoder()})
    with pytest.raises(ConfigError, match="needs encoders"):
        DualEncoder("bi", {"cross": tiny_encoder()})
