"""DCLR in the trainer: complementary cache, frozen scorer, export without it, DDP equivalence."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import train_one_and_two_ranks

from dclr.data.corpus import ListCorpus, TextFileCorpus
from dclr.driver import trainer_for
from dclr.errors import InputError
from dclr.losses.complementary import (
    CachedComplementary,
    OnTheFlyComplementary,
    PlannedComplementary,
    TwoViewComplementary,
)
from dclr.models.encoder import SentenceEncoder
from dclr.progress import listening
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics

SENTENCES = [
    f"sentence number {i} about {w}"
    for i, w in enumerate(
        [
            "cats",
            "dogs",
            "music",
            "rain",
            "markets",
            "football",
            "books",
            "cars",
            "trains",
            "coffee",
            "tea",
            "bread",
        ]
        * 4
    )
]


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


def dclr_config(model_dir, corpus_file, out, **extra):
    values = {
        "model": str(model_dir),
        "method": "dclr",
        "corpus": str(corpus_file),
        "batch_size": 8,
        "max_steps": 6,
        "eval_steps": 0,
        "log_steps": 1,
        "test_eval": False,
        "output_dir": str(out),
        "complementary_pooler": "mean",
        "complementary_cache": str(Path(out).parent / "cache" / "comp.npy"),
        "false_negative_threshold": 0.95,  # 0.5 dropped every negative of this tiny model
        **extra,
    }
    if values["method"] != "dclr":  # DCLR's options exist in the dclr section only
        for key in ("complementary_pooler", "complementary_cache", "false_negative_threshold"):
            values.pop(key)
    return load_config(None, values)


def test_a_resumed_run_reuses_its_calibrated_phi(model_dir, corpus_file, tmp_path, monkeypatch):
    """--resume takes phi and the calibration record from the checkpoint: no calibration runs
    again, and the resumed run's losses, phi and records are the uninterrupted run's."""
    import dclr.methods.dclr as dclr_method

    def config(out):
        return dclr_config(
            model_dir, corpus_file, out, complementary_mode="on_the_fly",
            complementary_model=str(model_dir), phi_calibration="random_pairs",
            phi_calibration_target=0.25, save_steps=2, max_steps=4,
        )  # fmt: skip

    whole = trainer_for(config(tmp_path / "a")).train()
    trainer_for(config(tmp_path / "b")).train(stop_at_step=2)

    def measured_again(*args, **kwargs):
        raise AssertionError("a resumed run calibrated phi again")

    monkeypatch.setattr(dclr_method, "calibrate", measured_again)
    said: list[str] = []
    with listening(said.append):
        resumed = trainer_for(config(tmp_path / "b")).train(resume=True)
    assert any("from the run's checkpoint" in line for line in said), said
    assert whole.derived["false_negative_threshold"] == resumed.derived["false_negative_threshold"]
    assert whole.start_records == resumed.start_records
    assert whole.start_records["calibration"]["mode"] == "random_pairs"

    def losses(run):
        return [(r["step"], r["loss"]) for r in read_metrics(run, "train")]

    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_saved_calibration_is_reused_only_when_its_inputs_are_unchanged():
    from dclr.methods.dclr import saved_calibration

    record = {"mode": "random_pairs", "target": 0.001, "phi": 0.75, "sentences": 512}
    config = {
        "model": {"name": "m", "max_length": 32},
        "run": {"seed": 1},
        "data": {"data_dir": "d", "paraphrase_sources": "sts"},
        "dclr": {"phi_calibration": "random_pairs", "phi_calibration_target": 0.001},
    }
    start = {
        "derived": {"false_negative_threshold": 0.75},
        "start_records": {"calibration": record},
        "config": config,
    }
    assert saved_calibration(start, config) == record
    assert saved_calibration({}, config) is None  # a run started, or an older checkpoint
    assert saved_calibration({**start, "start_records": {}}, config) is None
    other_phi = {**start, "derived": {"false_negative_threshold": 0.5}}
    assert saved_calibration(other_phi, config) is None
    # resumed with --set changing what phi is derived from: calibrated again
    for section, key, value in [
        ("dclr", "phi_calibration_target", 0.01),
        ("dclr", "complementary_model", "other"),
        ("model", "max_length", 64),
        ("run", "seed", 2),
        ("data", "paraphrase_sources", "sick"),  # any data option: the corpus sampled
    ]:
        changed = {**config, section: {**config[section], key: value}}
        assert saved_calibration(start, changed) is None, key
    # a scorer folder retrained in place: its recorded weights differ from the folder's now
    weighed = {**start, "start_records": {"calibration": {**record, "scorer_weights": "ab12"}}}
    assert saved_calibration(weighed, config, "ab12") == {**record, "scorer_weights": "ab12"}
    assert saved_calibration(weighed, config, "cd34") is None


def test_cache_is_built_once_and_matches_on_the_fly(model_dir, corpus_file, tmp_path):
    encoder = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    corpus = TextFileCorpus(corpus_file)
    cache = tmp_path / "c.npy"
    cached = CachedComplementary.build_or_load(
        cache, encoder, corpus, "tiny", 32, show_progress=False
    )
    assert np.load(cache).dtype == np.float16
    mtime = cache.stat().st_mtime_ns
    again = CachedComplementary.build_or_load(
        cache, encoder, corpus, "tiny", 32, show_progress=False
    )
    assert cache.stat().st_mtime_ns == mtime  # loaded, not rebuilt
    ids = torch.tensor([3, 0, 7, 11])
    texts = [corpus[i] for i in ids]
    live = OnTheFlyComplementary(SentenceEncoder.from_pretrained(model_dir, pooler="mean"), 32)
    torch.testing.assert_close(
        again.similarities(ids, texts), live.similarities(ids, texts), atol=2e-3, rtol=0
    )  # fp16 storage
    assert cached.similarities(ids, texts).shape == (4, 4)


def test_cache_for_another_corpus_is_refused(model_dir, corpus_file, tmp_path):
    encoder = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    cache = tmp_path / "c.npy"
    CachedComplementary.build_or_load(
        cache, encoder, TextFileCorpus(corpus_file), "tiny", 32, show_progress=False
    )
    other = tmp_path / "other.txt"
    other.write_text("\n".join(SENTENCES[:-3]) + "\n")  # different file, different line count
    with pytest.raises(InputError, match="does not match") as err:
        CachedComplementary.build_or_load(cache, encoder, TextFileCorpus(other), "tiny", 32)
    assert "sentences" in str(err.value) and "fix:" in str(err.value)
    with pytest.raises(InputError, match="does not match"):
        CachedComplementary.build_or_load(cache, encoder, ListCorpus(SENTENCES), "tiny", 32)


def test_complementary_scorers_are_frozen(model_dir):
    for cls in (OnTheFlyComplementary, TwoViewComplementary):
        scorer = cls(SentenceEncoder.from_pretrained(model_dir, pooler="mean"), 32)
        assert not any(p.requires_grad for p in scorer.encoder.parameters())
        sims = scorer.similarities(torch.arange(3), SENTENCES[:3])
        assert not sims.requires_grad
    assert not OnTheFlyComplementary(
        SentenceEncoder.from_pretrained(model_dir, pooler="mean"), 32
    ).encoder.training


def test_dclr_trains_logs_its_parts_and_exports_only_the_encoder(model_dir, corpus_file, tmp_path):
    result = trainer_for(dclr_config(model_dir, corpus_file, tmp_path / "run")).train()
    rows = read_metrics(tmp_path / "run", "train")
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert all(r["noise_count"] == 8 for r in rows)  # ratio 1 x batch 8
    assert all(0 < r["dropped_fraction"] < 1 for r in rows)  # the weights decide
    assert all(np.isfinite(r["loss"]) for r in rows)
    from safetensors import safe_open

    with safe_open(str(result.final_dir / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert not any("mlp" in k or "complementary" in k for k in keys)
    assert json.loads((result.final_dir / "dclr.json").read_text())["pooler"] == "cls_before_pooler"


@pytest.mark.parametrize(
    ("mode", "scorer"),
    [("on_the_fly", OnTheFlyComplementary), ("two_views", TwoViewComplementary)],
)
def test_other_complementary_modes_train(model_dir, corpus_file, tmp_path, monkeypatch, mode,
                                         scorer):  # fmt: skip
    """Each mode trains, and its steps' weights come from its own scorer: two steps logged by
    another mode's scorer (the default cache, or on-the-fly for two_views) would pass too."""
    called = []
    for cls in (CachedComplementary, PlannedComplementary, OnTheFlyComplementary,
                TwoViewComplementary):  # fmt: skip

        def spy(self, indices, sentences, real=cls.similarities, cls=cls):
            called.append(cls)
            return real(self, indices, sentences)

        monkeypatch.setattr(cls, "similarities", spy)
    trainer_for(
        dclr_config(model_dir, corpus_file, tmp_path / mode, complementary_mode=mode, max_steps=2)
    ).train()
    assert len(read_metrics(tmp_path / mode, "train")) == 2
    assert called and set(called) == {scorer}


@pytest.mark.parametrize(
    "overrides",
    [
        {"noise_mode": "none", "weighting": "none"},
        {"noise_mode": "random"},
        {"weighting": "self"},
        {"weighting": "distill"},
        {"dclr_form": "official"},
    ],
)
def test_every_ablation_runs(model_dir, corpus_file, tmp_path, monkeypatch, overrides):
    """Each ablation trains, and the loss it trains with holds the ablated option: a finite
    loss alone is what the default (optimized noise, complementary weighting, the paper's
    form) gives too."""
    import dclr.losses.dclr as dclr_loss

    built = []
    real = dclr_loss.DCLRLoss.__init__

    def spy(self, model, complementary, options, *args, **kwargs):
        built.append(options)
        real(self, model, complementary, options, *args, **kwargs)

    monkeypatch.setattr(dclr_loss.DCLRLoss, "__init__", spy)
    trainer_for(
        dclr_config(model_dir, corpus_file, tmp_path / "run", max_steps=2, **overrides)
    ).train()
    rows = read_metrics(tmp_path / "run", "train")
    assert len(rows) == 2 and all(np.isfinite(r["loss"]) for r in rows)
    (options,) = built
    assert {key: getattr(options, key) for key in overrides} == overrides


def test_dclr_with_both_parts_off_follows_simcse(model_dir, corpus_file, tmp_path):
    trainer_for(
        dclr_config(model_dir, corpus_file, tmp_path / "d", noise_mode="none", weighting="none")
    ).train()
    trainer_for(dclr_config(model_dir, corpus_file, tmp_path / "s", method="simcse")).train()
    d = [r["loss"] for r in read_metrics(tmp_path / "d", "train")]
    s = [r["loss"] for r in read_metrics(tmp_path / "s", "train")]
    assert d == s


@pytest.mark.slow
def test_torchrun_dclr_follows_the_single_process_trajectory(model_dir, corpus_file, tmp_path):
    """Two ranks train one process's trajectory, the complementary model's weights dropping part
    of each batch; each run builds its own complementary cache (under torchrun the ranks share
    the pass), and the two caches hold the same bits."""
    caches = {name: tmp_path / "cache" / f"{name}.npy" for name in ("one", "two")}
    options = {
        "model": model_dir,
        "method": "dclr",
        "corpus": corpus_file,
        "batch_size": 8,
        "max_steps": 4,
        "eval_steps": 0,
        "log_steps": 1,
        "test_eval": False,
        "dropout": 0.0,
        "learning_rate": 1e-3,
        "complementary_pooler": "mean",
        "false_negative_threshold": 0.95,
    }
    own = {name: {"complementary_cache": cache} for name, cache in caches.items()}
    one, two = train_one_and_two_ranks(options, tmp_path, own)
    assert np.array_equal(np.load(caches["one"]), np.load(caches["two"]))
    single = {r["step"]: r for r in read_metrics(one, "train")}
    ddp = {r["step"]: r for r in read_metrics(two, "train")}
    assert sorted(ddp) == [1, 2, 3, 4]
    for step, row in single.items():
        assert ddp[step]["loss"] == pytest.approx(row["loss"], rel=1e-5), step
        assert ddp[step]["dropped_fraction"] == row["dropped_fraction"]
    # not degenerate: at phi 0.5 this tiny model dropped every negative (losses ~1e-6, inside
    # any tolerance); at 0.95 the weights decide part of each batch and the losses are ~0.1-0.5
    assert all(0 < r["dropped_fraction"] < 1 and r["loss"] > 0.05 for r in single.values())


def test_dense_batches_and_calibrated_phi_in_the_trainer(
    model_dir, corpus_file, data_dir, tmp_path
):
    """paraphrase_density places gold pairs in the training batches; phi_calibration replaces
    phi with the scorer's quantile and logs it."""
    from dclr.data.paraphrases import GoldIndex, gold_paraphrase_pairs

    config = dclr_config(
        model_dir, corpus_file, tmp_path / "run", max_steps=2, data_dir=str(data_dir),
        paraphrase_density=0.5, complementary_mode="on_the_fly", complementary_model=str(model_dir),
        phi_calibration="random_pairs", phi_calibration_target=0.25,
    )  # fmt: skip
    trainer = trainer_for(config)
    gold = GoldIndex(gold_paraphrase_pairs(data_dir))
    for step in range(2):
        flags = np.asarray(
            gold.matrix([trainer.run.data[int(i)] for i in trainer.run.global_batch(step)])
        )
        assert flags.sum() == 2 * 2  # 8 * 0.5 / 2 = 2 pairs, each counted (i, j) and (j, i)
    trainer.train()
    (row,) = read_metrics(tmp_path / "run", "calibration")
    assert row["mode"] == "random_pairs" and -1 <= row["phi"] <= 1 and row["sentences"] > 1
    drops = [r["dropped_fraction"] for r in read_metrics(tmp_path / "run", "train")]
    assert max(drops) > 0  # a q = 0.25 quantile threshold drops in-batch negatives


def test_the_cache_knows_a_model_retrained_in_place(model_dir, corpus_file, tmp_path):
    """The complementary cache records the model's weights (`model_identity`), not only its
    path: a folder whose weights change is another model, so its default cache is another file
    and a named cache built from the old weights is refused, never reused silently."""
    import shutil

    from dclr.losses.complementary import model_identity

    folder = tmp_path / "guide"
    shutil.copytree(model_dir, folder)
    corpus = TextFileCorpus(corpus_file)
    before = model_identity(str(folder))
    assert str(folder) in before and "weights sha256" in before
    old_path, _ = CachedComplementary.locate(None, "mean", corpus, str(folder), 32)
    named = tmp_path / "c.npy"
    encoder = SentenceEncoder.from_pretrained(folder, pooler="mean")
    CachedComplementary.build_or_load(named, encoder, corpus, str(folder), 32, show_progress=False)
    weights = folder / "model.safetensors"
    os.utime(weights)  # touched, same bytes: the same model
    assert model_identity(str(folder)) == before
    retrained = SentenceEncoder.from_pretrained(folder, pooler="mean")
    with torch.no_grad():
        for p in retrained.backbone.parameters():
            p.add_(0.01)
    retrained.backbone.save_pretrained(folder)  # the folder now holds other weights
    assert model_identity(str(folder)) != before
    new_path, _ = CachedComplementary.locate(None, "mean", corpus, str(folder), 32)
    assert new_path != old_path
    with pytest.raises(InputError, match="does not match this run"):
        CachedComplementary.build_or_load(
            named, retrained, corpus, str(folder), 32, show_progress=False
        )


def test_a_cache_from_before_the_weights_were_recorded_is_upgraded_not_rebuilt(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """A named cache whose record holds the bare model spec (written by an older dclr), and a
    default cache under the old key, are taken (with a warning) and their record upgraded."""
    import dclr.losses.complementary as complementary

    monkeypatch.setattr(complementary, "default_cache_root", lambda: tmp_path / "shared")
    corpus = TextFileCorpus(corpus_file)
    encoder = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    spec = str(model_dir)
    named = tmp_path / "c.npy"
    CachedComplementary.build_or_load(named, encoder, corpus, spec, 32, show_progress=False)
    record = json.loads(named.with_suffix(".json").read_text())
    old = {**record, "model": spec}  # what the record held before
    named.with_suffix(".json").write_text(json.dumps(old))
    with pytest.warns(UserWarning, match="before dclr recorded the model's weights"):
        CachedComplementary.build_or_load(named, encoder, corpus, spec, 32, show_progress=False)
    assert json.loads(named.with_suffix(".json").read_text()) == record  # upgraded
    # a default cache under the key of the old record: found, not encoded again
    legacy = complementary._default_path(old)
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(named.read_bytes())
    legacy.with_suffix(".json").write_text(json.dumps(old))
    path, _ = CachedComplementary.locate(None, "mean", corpus, spec, 32)
    assert path == legacy
    monkeypatch.setattr(complementary, "encode_rows", lambda *a, **k: 1 / 0)  # never called
    with pytest.warns(UserWarning, match="upgraded"):
        CachedComplementary.build_or_load(None, encoder, corpus, spec, 32, show_progress=False)


def test_a_hub_model_in_the_local_cache_is_recorded_with_its_weights(
    model_dir, tmp_path, monkeypatch
):
    """A hub id's snapshot in the local Hugging Face cache is what loading reads: its weights
    are digested as a folder's are, so an updated snapshot is another model; a hub id that is
    not cached (or not a valid id) is recorded by name."""
    import shutil

    import huggingface_hub.constants

    from dclr.losses.complementary import model_identity

    cache = tmp_path / "hub"
    repo = cache / "models--someone--guide"
    snapshot = repo / "snapshots" / ("a" * 40)
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    same_weights = model_identity(str(model_dir)).split(" (")[1]
    assert model_identity("someone/guide") == f"someone/guide ({same_weights}"
    assert model_identity("someone/not-cached") == "someone/not-cached"
    assert model_identity("not a valid id!") == "not a valid id!"
    (repo / "refs" / "main").write_text("b" * 40)  # the hub's main moved to other weights
    other = repo / "snapshots" / ("b" * 40)
    shutil.copytree(model_dir, other)
    (other / "model.safetensors").write_bytes(b"other")
    assert model_identity("someone/guide") != f"someone/guide ({same_weights}"
