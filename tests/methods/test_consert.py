"""ConSERT: NT-Xent against a hand-written formula; view, few-shot and method options."""

import math
from pathlib import Path

import pytest
import torch
from helpers import interrupt_on_call, write_pseudo_corpus

from dclr.contract import PreparedRun
from dclr.data.sampling import few_shot_indices as sample_indices
from dclr.driver import trainer_for
from dclr.errors import ConfigError
from dclr.losses.consert import ConSERTLoss, nt_xent_loss
from dclr.losses.simcse import simcse_loss
from dclr.methods.registry import get_method
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics


def build_loss(config, model):
    """The method's objective around `model`, asked of a run with no data and no batch plan."""
    method = get_method(config.method)
    run = PreparedRun(config, method, model, [], None, 2, 0, torch.device("cpu"), Path("."))
    return method.build_objective(run, model)


def few_shot_indices(size, config):
    d = config.data
    return sample_indices(
        size, d.few_shot_sentences, d.few_shot_fraction, d.few_shot_sampling, config.run.seed
    )


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def hand_nt_xent(z1, z2, tau):
    """Every one of the 2N views against its positive and the 2(N-1) other-sentence views."""
    n = len(z1)
    views = z1 + z2
    total = 0.0
    for a in range(2 * n):
        positive = (a + n) % (2 * n)
        others = [b for b in range(2 * n) if b != a]
        assert len(others) == 1 + 2 * (n - 1)
        denominator = sum(math.exp(cos(views[a], views[b]) / tau) for b in others)
        total += -math.log(math.exp(cos(views[a], views[positive]) / tau) / denominator)
    return total / (2 * n)


Z1 = [[1.0, 0.0, 0.5], [0.2, 1.0, -0.3], [-1.0, 0.4, 0.1], [0.3, 0.3, 0.9]]
Z2 = [[0.9, 0.1, 0.4], [0.0, 1.0, 0.0], [-0.5, -0.5, 1.0], [0.1, -0.2, 0.7]]


def test_nt_xent_equals_hand_formula():
    got = nt_xent_loss(torch.tensor(Z1), torch.tensor(Z2), temperature=0.1)
    assert got.item() == pytest.approx(hand_nt_xent(Z1, Z2, 0.1), rel=1e-5)


def test_nt_xent_is_symmetric_in_the_views_and_differs_from_simcse():
    z1, z2 = torch.tensor(Z1), torch.tensor(Z2)
    assert nt_xent_loss(z1, z2, 0.1).item() == pytest.approx(nt_xent_loss(z2, z1, 0.1).item())
    assert nt_xent_loss(z1, z2, 0.1).item() != pytest.approx(simcse_loss(z1, z2, 0.1).item())


def test_nt_xent_known_value_for_orthogonal_identical_views():
    # z1 = z2 = I_4: positive cos 1, the 6 negatives cos 0 -> -log(e^{1/t} / (e^{1/t} + 6))
    tau = 0.5
    expected = -math.log(math.exp(2) / (math.exp(2) + 6))
    assert nt_xent_loss(torch.eye(4), torch.eye(4), tau).item() == pytest.approx(expected)


def test_nt_xent_gradient_matches_finite_difference():
    torch.manual_seed(0)
    z1 = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_loss(a, b, 0.1), (z1, z2))


def test_consert_loss_default_temperature_and_validation():
    assert ConSERTLoss(lambda **_: None).temperature == 0.1
    with pytest.raises(ConfigError, match="temperature"):
        ConSERTLoss(lambda **_: None, temperature=0)


# ---- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"view1": "word_drop"}, "unknown view strategy"),
        ({"view2": "token_cutoff", "view2_rate": 1.0}, r"view2_rate must be in \[0, 1\)"),
        ({"view1_rate": -0.5}, r"view1_rate must be in \[0, 1\)"),
        ({"view1": "adversarial"}, "needs labels"),
        ({"view1": "token_shuffle", "grad_cache_chunk": 4}, "grad_cache_chunk"),
        ({"few_shot_sentences": 0}, "few_shot_sentences"),
        ({"few_shot_fraction": 0.0}, "few_shot_fraction"),
        ({"few_shot_fraction": 1.5}, "few_shot_fraction"),
        ({"few_shot_sentences": 10, "few_shot_fraction": 0.1}, "not both"),
        ({"few_shot_sampling": "last"}, "few_shot_sampling"),
        ({"method": "consert2"}, "method"),
    ],
)
def test_bad_consert_options_are_rejected(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", **override})


def test_build_loss_wires_method_and_views():
    # Every option off its default and the two rates apart: a loss built at ConSERT's default
    # tau (0.1), a view taking the other view's rate or a fixed seed would all be seen.
    config = load_config(
        None,
        {"model": "m", "method": "consert", "view1": "token_cutoff", "view1_rate": 0.1,
         "view2": "feature_cutoff", "view2_rate": 0.2, "temperature": 0.07, "seed": 3},
    )  # fmt: skip
    loss = build_loss(config, model=None)
    assert isinstance(loss, ConSERTLoss)
    assert loss.temperature == 0.07
    assert (loss.views.view1.strategy, loss.views.view2.strategy) == (
        "token_cutoff",
        "feature_cutoff",
    )
    assert (loss.views.view1.rate, loss.views.view2.rate) == (0.1, 0.2)
    assert loss.views.seed == 3
    default = build_loss(load_config(None, {"model": "m"}), model=None)
    assert default.views is None  # the default keeps SimCSE's doubled forward


# ---- few-shot -------------------------------------------------------------------------------
def fewshot(**options):
    return load_config(None, {"model": "m", **options})


def test_few_shot_first_n_and_seeded_random_n():
    assert few_shot_indices(100, fewshot()) is None
    assert few_shot_indices(100, fewshot(few_shot_sentences=10)) == list(range(10))
    a = few_shot_indices(100, fewshot(few_shot_sentences=10, few_shot_sampling="random"))
    b = few_shot_indices(100, fewshot(few_shot_sentences=10, few_shot_sampling="random"))
    c = few_shot_indices(100, fewshot(few_shot_sentences=10, few_shot_sampling="random", seed=1))
    assert a == b and a != c and len(set(a)) == 10 and a != list(range(10))


def test_few_shot_fraction_and_too_many():
    assert len(few_shot_indices(1000, fewshot(few_shot_fraction=0.003))) == 3
    assert len(few_shot_indices(100, fewshot(few_shot_fraction=0.001))) == 2  # at least two
    with pytest.raises(ConfigError, match="more than the corpus"):
        few_shot_indices(5, fewshot(few_shot_sentences=10))


# ---- training ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_pseudo_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", 120)


def run(model_dir, corpus_file, out, **options):
    config = load_config(
        None,
        {"model": str(model_dir), "corpus": str(corpus_file), "batch_size": 8, "max_steps": 3,
         "eval_steps": 0, "log_steps": 1, "test_eval": False, "output_dir": str(out), **options},
    )  # fmt: skip
    trainer = trainer_for(config)
    trainer.train()
    return trainer, {r["step"]: r["loss"] for r in read_metrics(out, "train")}


@pytest.mark.parametrize(
    "options",
    [
        {"method": "consert", "pooler": "avg_top2", "mlp_head": False, "temperature": 0.1,
         "view1": "token_shuffle", "view2": "feature_cutoff", "view2_rate": 0.2},
        {"method": "dclr", "weighting": "self", "view1": "span_cutoff", "view1_rate": 0.2,
         "view2": "token_cutoff", "view2_rate": 0.2},
    ],
    ids=["consert-shuffle-feature", "dclr-span-token"],
)  # fmt: skip
def test_training_with_views_is_reproducible(model_dir, corpus_file, tmp_path, options):
    _, first = run(model_dir, corpus_file, tmp_path / "a", **options)
    _, second = run(model_dir, corpus_file, tmp_path / "b", **options)
    assert len(first) == 3 and all(math.isfinite(v) for v in first.values())
    assert first == second  # seeded views and dropout: the same trajectory


def test_few_shot_training_uses_the_subset(model_dir, corpus_file, tmp_path):
    trainer, _ = run(
        model_dir, corpus_file, tmp_path / "r", few_shot_sentences=16, few_shot_sampling="random"
    )
    assert len(trainer.run.data) == 16
    saved = load_config(tmp_path / "r" / "config.yaml")
    assert saved.data.few_shot_sentences == 16 and saved.data.few_shot_sampling == "random"


def test_resume_with_views_reproduces_the_trajectory(model_dir, corpus_file, tmp_path, monkeypatch):
    import dclr.losses.consert as consert_module

    options = {"method": "consert", "view1": "token_shuffle", "view2": "span_cutoff",
               "view2_rate": 0.3, "max_steps": 6, "save_steps": 2}  # fmt: skip

    def config(out):
        return load_config(
            None,
            {"model": str(model_dir), "corpus": str(corpus_file), "batch_size": 8,
             "eval_steps": 0, "log_steps": 1, "test_eval": False, "output_dir": str(out),
             **options},
        )  # fmt: skip

    trainer_for(config(tmp_path / "a")).train()
    real = consert_module.nt_xent_loss
    # interrupted at step 5, after the step-4 checkpoint
    monkeypatch.setattr(consert_module, "nt_xent_loss", interrupt_on_call(real, 5))
    with pytest.raises(KeyboardInterrupt):
        trainer_for(config(tmp_path / "b")).train()
    monkeypatch.setattr(consert_module, "nt_xent_loss", real)
    trainer_for(config(tmp_path / "b")).train(resume=True)

    def trajectory(run_dir):
        return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}

    assert trajectory(tmp_path / "a") == trajectory(tmp_path / "b")


# ---- few-shot at 1 and 10 texts (ConSERT: 1, 10, 100, 1000, 10000, all 89,192) ----------------
def test_data_smaller_than_a_batch_is_refused_by_default(model_dir, corpus_file, tmp_path):
    with pytest.raises(ConfigError, match="small_data"):
        run(model_dir, corpus_file, tmp_path / "r", method="consert", few_shot_sentences=5)


@pytest.mark.parametrize("n", [1, 5])
def test_shrink_batch_trains_on_all_texts_each_step(model_dir, corpus_file, tmp_path, n):
    with pytest.warns(UserWarning, match="shrink_batch"):
        trainer, losses = run(
            model_dir, corpus_file, tmp_path / "r", method="consert", temperature=0.1,
            view1="token_shuffle", view2="embedding_dropout", view2_rate=0.1,
            few_shot_sentences=n, small_data="shrink_batch",
        )  # fmt: skip
    assert trainer.run.batch_size == n and len(trainer.run.data) == n
    assert sorted(trainer.run.global_batch(2).tolist()) == list(range(n))
    if n == 1:  # one text: NT-Xent has no negative, the loss is exactly 0 (nothing to learn)
        assert set(losses.values()) == {0.0}
    else:
        assert all(math.isfinite(v) and v > 0 for v in losses.values())


def test_repeat_fills_a_batch_with_copies(model_dir, corpus_file, tmp_path):
    with pytest.warns(UserWarning, match="repeat"):
        trainer, losses = run(
            model_dir, corpus_file, tmp_path / "r", method="consert", few_shot_sentences=3,
            small_data="repeat",
        )  # fmt: skip
    assert trainer.run.batch_size == 8 and len(trainer.run.data) == 9  # 3 copies of 3 texts
    assert len(set(trainer.run.data)) == 3 and all(math.isfinite(v) for v in losses.values())


def test_sts_all_is_consert_89192_texts(data_dir):
    from dclr.data.corpus import load_corpus

    texts = load_corpus("sts_all", data_dir)
    assert len(texts) == 89_192  # consert.txt l.92: "all 89,192 available texts"
    assert len(load_corpus("sts", data_dir)) == 29_511  # distinct scored sentences
