"""dclr.st: DCLR and ConSERT as sentence-transformers losses.

The ST losses must compute dclr's own objectives: on fixed embeddings they equal dclr's DCLRLoss /
nt_xent_loss in value and gradient; on a tiny model they train through SentenceTransformerTrainer
on single sentences (SimCSE style) and on pairs, with the guide frozen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TINY, make_tiny_model_dir, spawn_gloo_ranks

from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.consert import nt_xent_loss
from dclr.losses.dclr import (
    DCLRLoss as DclrObjective,
)
from dclr.losses.dclr import (
    dclr_paper_loss,
    false_negative_weights,
    noise_negatives,
)
from dclr.losses.simcse import cosine_matrix, simcse_loss
from dclr.st import ConSERTLoss, DCLRLoss

N, D = 6, 8


class FixedTeacher:
    """dclr's Complementary protocol returning one fixed cosine matrix."""

    def __init__(self, cos: torch.Tensor) -> None:
        self.cos = cos

    def similarities(self, indices, sentences) -> torch.Tensor:
        return self.cos


def fixed_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    z1 = torch.randn(N, D, generator=gen)
    z2 = z1 + 0.3 * torch.randn(N, D, generator=gen)
    g = torch.randn(N, 4, generator=gen)
    teacher = cosine_matrix(g, g)
    teacher[0, 1] = teacher[1, 0] = 0.95  # one pair above phi = 0.9: a false negative dropped
    return z1, z2, teacher


def loss_and_grads(fn, z1: torch.Tensor, z2: torch.Tensor):
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss = fn(a, b)
    loss.backward()
    return loss.detach(), a.grad, b.grad


def tiny_st(path: Path, seed: int = 0, dropout: float = 0.1):
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer

    make_tiny_model_dir(path, seed=seed, dropout=dropout)
    word = Transformer(str(path), max_seq_length=32)
    return SentenceTransformer(modules=[word, Pooling(TINY["hidden_size"], "mean")], device="cpu")


# ---- the maths: equal to dclr's own loss --------------------------------------------------------
@pytest.mark.parametrize("form", ["paper", "official"])
@pytest.mark.parametrize("noise_mode", ["optimized", "none"])
def test_st_loss_equals_dclr_loss_on_fixed_embeddings(form, noise_mode):
    z1, z2, teacher = fixed_batch()
    options = dict(noise_mode=noise_mode, form=form, false_negative_threshold=0.9, seed=3)
    st = DCLRLoss(model=None, guide=FixedTeacher(teacher), **options)
    ours = DclrObjective.of(
        None, FixedTeacher(teacher), **{("dclr_form" if k == "form" else k): v
                                        for k, v in options.items()}
    )  # fmt: skip

    got = loss_and_grads(lambda a, b: st.compute_loss_from_embeddings(a, b, teacher), z1, z2)
    want = loss_and_grads(
        lambda a, b: ours.objective(a, b, Batch(features={}, step=0))["loss"], z1, z2
    )
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=0, rtol=0)
    assert st.last_parts["dropped_fraction"] > 0  # the 0.95 pair was dropped


def test_st_loss_equals_the_hand_composed_paper_formula():
    """Independent of dclr's module: noise from the documented seed, weights, the paper's loss."""
    z1, z2, teacher = fixed_batch(1)
    st = DCLRLoss(model=None, guide=FixedTeacher(teacher), seed=5)

    def by_hand(a, b):
        gen = torch.Generator().manual_seed(5 * 1_000_003 + 0)
        noise = noise_negatives(a, b, N, 1.0, 4, 1e-3, 0.05, generator=gen)
        return dclr_paper_loss(a, b, noise, false_negative_weights(teacher, 0.9), 0.05)

    got = loss_and_grads(lambda a, b: st.compute_loss_from_embeddings(a, b, teacher), z1, z2)
    want = loss_and_grads(by_hand, z1, z2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_without_noise_and_weighting_it_is_simcse():
    z1, z2, _ = fixed_batch(2)
    st = DCLRLoss(model=None, noise_mode="none", weighting="none")
    got = loss_and_grads(lambda a, b: st.compute_loss_from_embeddings(a, b), z1, z2)
    want = loss_and_grads(lambda a, b: simcse_loss(a, b, 0.05), z1, z2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_noise_follows_the_call_counter():
    z1, z2, _ = fixed_batch(3)
    st = DCLRLoss(model=None, weighting="none", seed=1)
    first = st.compute_loss_from_embeddings(z1, z2)
    second = st.compute_loss_from_embeddings(z1, z2)
    assert st.step == 2
    assert first != second  # fresh noise on each call
    again = DCLRLoss(model=None, weighting="none", seed=1)
    assert again.compute_loss_from_embeddings(z1, z2) == first  # reproducible


def test_consert_equals_nt_xent():
    z1, z2, _ = fixed_batch(4)
    st = ConSERTLoss(model=None, temperature=0.1)
    got = loss_and_grads(st.compute_loss_from_embeddings, z1, z2)
    want = loss_and_grads(lambda a, b: nt_xent_loss(a, b, 0.1), z1, z2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=0, rtol=0)


# ---- constructor validation ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(weighting="complementary"), "needs a guide"),
        (dict(weighting="distill"), "needs a guide"),
        (dict(weighting="none", noise_mode="sometimes"), "noise_mode"),
        (dict(weighting="none", form="released"), "form"),
        (dict(weighting="none", temperature=0.0), "temperature"),
        (dict(weighting="none", false_negative_threshold=1.5), "phi"),
        (dict(weighting="none", noise_ratio=-1), "noise_ratio"),
        (dict(guide=object()), "similarities"),
    ],
)
def test_constructor_refuses_bad_options(options, message):
    with pytest.raises(ConfigError, match=message):
        DCLRLoss(model=None, **options)


def test_consert_refuses_a_bad_temperature():
    with pytest.raises(ConfigError, match="temperature"):
        ConSERTLoss(model=None, temperature=-1)


def test_config_dict_names_every_setting():
    st = DCLRLoss(model=None, weighting="none", form="official", noise_ratio=0.5)
    config = st.get_config_dict()
    assert config["form"] == "official" and config["noise_ratio"] == 0.5
    assert config["weighting"] == "none" and config["guide"] is None
    assert "Debiased" in st.citation
    assert ConSERTLoss(model=None).get_config_dict() == {"temperature": 0.1}


# ---- with a model -------------------------------------------------------------------------------
# The guide's cosines on SENTENCES lie in 0.925-0.989: at the default phi 0.9 it dropped every
# negative and its scores did not matter; at 0.96 it drops about 43% of the pairs.
GUIDE_PHI = 0.96


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("st")
    return tiny_st(root / "student", seed=0), tiny_st(root / "guide", seed=1)


def test_forward_equals_the_loss_of_the_model_embeddings(models):
    """Dropout off: both views equal the model's embeddings; the guide scores the batch."""
    student, guide = models
    student.eval()
    sentences = ["a cat sleeps", "the dog runs", "a red car", "big blue house"]
    features = student.tokenize(sentences)
    # the guide's pairs score 0.938-0.989 here: at the default 0.9 every negative was dropped,
    # whatever the guide said; at 0.957 two of the six pairs are
    phi = 0.957
    loss = DCLRLoss(student, guide=guide, seed=2, false_negative_threshold=phi)
    got = loss([features], None)

    with torch.no_grad():
        g = guide.encode(sentences, convert_to_tensor=True)
    z = student(dict(features))["sentence_embedding"]
    reference = DclrObjective.of(
        None, FixedTeacher(cosine_matrix(g, g)), seed=2, false_negative_threshold=phi
    )
    want = reference.objective(z, z, Batch(features={}, step=0))
    assert want["dropped_fraction"].item() == pytest.approx(1 / 3)
    torch.testing.assert_close(got, want["loss"])


def test_one_column_is_encoded_twice_with_its_own_dropout_each(models):
    """SimCSE style, in training: the two views of one text column are two forwards, each with
    its own dropout masks, so they differ. (In eval mode, as above, one forward reused as both
    views gives the same loss: only dropout tells the two apart.)"""
    student, guide = models
    student.train()  # dropout 0.1 (tiny_st)
    sentences = ["a cat sleeps", "the dog runs", "a red car", "big blue house"]
    features = student.tokenize(sentences)
    torch.manual_seed(0)  # the guide encodes in eval mode: it draws no dropout masks
    got = DCLRLoss(student, guide=guide, seed=2, false_negative_threshold=0.957)([features], None)
    with torch.no_grad():
        g = guide.encode(sentences, convert_to_tensor=True)
    torch.manual_seed(0)
    z1 = student(dict(features))["sentence_embedding"]
    z2 = student(dict(features))["sentence_embedding"]
    assert not torch.equal(z1, z2)  # dropout draws another mask for the second view
    reference = DclrObjective.of(
        None, FixedTeacher(cosine_matrix(g, g)), seed=2, false_negative_threshold=0.957
    )
    torch.testing.assert_close(got, reference.objective(z1, z2, Batch(features={}, step=0))["loss"])
    same = reference.objective(z1, z1, Batch(features={}, step=0))["loss"]
    assert not torch.allclose(got, same)  # one forward used twice would give this


def test_guide_is_frozen_and_gets_no_gradient(models):
    student, guide = models
    guide.train()
    loss = DCLRLoss(student, guide=guide)
    assert not any(p.requires_grad for p in guide.parameters())
    assert not guide.training
    student.train()
    value = loss([student.tokenize(["one two", "three four", "five six"])], None)
    value.backward()
    assert all(p.grad is None for p in guide.parameters())
    assert any(p.grad is not None for p in student.parameters())
    student.zero_grad()


def test_guide_with_another_tokenizer_reads_the_decoded_text(models, tmp_path):
    student, guide = models
    loss = DCLRLoss(student, guide=guide)
    assert not loss.must_retokenize  # same vocabulary, same length limit
    other = tiny_st(tmp_path / "other", seed=2)
    other.max_seq_length = 16  # shorter than the student's 32: must retokenize
    loss = DCLRLoss(student, guide=other)
    assert loss.must_retokenize
    cos = loss.guide_similarities([student.tokenize(["a cat", "a dog", "a car"])], None)
    assert cos.shape == (3, 3)


def train(model, dataset, loss, tmp_path, steps: int = 2, batch_size: int = 4):
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=1e-3,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=1,
        seed=0,
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    trainer.train()
    after = model.state_dict()
    return sum(not torch.equal(before[k], after[k]) for k in before)


SENTENCES = ["a cat sleeps", "the dog runs", "a red car", "big blue house", "the man eats",
             "a small book", "the woman runs", "a big park"]  # fmt: skip


@pytest.mark.parametrize("kind", ["dclr", "consert"])
def test_trainer_on_single_sentences(models, tmp_path, kind):
    datasets = pytest.importorskip("datasets")
    student, guide = models
    before_guide = {k: v.clone() for k, v in guide.state_dict().items()}
    if kind == "dclr":
        loss = DCLRLoss(student, guide=guide, false_negative_threshold=GUIDE_PHI)
    else:
        loss = ConSERTLoss(student)
    changed = train(student, datasets.Dataset.from_dict({"text": SENTENCES}), loss, tmp_path)
    assert changed > 0
    assert all(torch.equal(v, guide.state_dict()[k]) for k, v in before_guide.items())


def test_trainer_on_pairs(models, tmp_path):
    datasets = pytest.importorskip("datasets")
    student, guide = models
    pairs = {"anchor": SENTENCES, "positive": [s.upper() for s in SENTENCES]}
    loss = DCLRLoss(student, guide=guide, form="official", false_negative_threshold=GUIDE_PHI)
    assert train(student, datasets.Dataset.from_dict(pairs), loss, tmp_path) > 0


def test_trainer_with_precomputed_guide_similarities(models, tmp_path):
    """A cached guide: each row's `label` is its index into the cached vectors."""
    import numpy as np

    from dclr.losses.complementary import CachedComplementary

    datasets = pytest.importorskip("datasets")
    student, guide = models
    vectors = guide.encode(SENTENCES, normalize_embeddings=True).astype(np.float16)
    cached = CachedComplementary(vectors)
    seen = []
    real = cached.similarities

    def spy(indices, sentences):
        seen.append((indices.tolist(), list(sentences)))
        return real(indices, sentences)

    cached.similarities = spy
    data = datasets.Dataset.from_dict({"text": SENTENCES, "label": list(range(len(SENTENCES)))})
    loss = DCLRLoss(student, guide=cached, false_negative_threshold=GUIDE_PHI)
    assert train(student, data, loss, tmp_path) > 0
    for indices, sentences in seen:  # indices and decoded texts name the same rows
        assert [SENTENCES[i] for i in indices] == sentences


# ---- across devices -----------------------------------------------------------------------------
def _rank_worker(rank: int, world: int, init_file: str, out_dir: str, gather: bool = True) -> None:
    import torch.distributed as dist

    from dclr import distributed as dclr_dist
    from dclr.st.embed import ddp_scale, gather_strings

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    z1, z2, teacher = fixed_batch(5)
    rows = slice(rank * N // world, (rank + 1) * N // world)
    a, b = z1[rows].clone().requires_grad_(True), z2[rows].clone().requires_grad_(True)
    st = DCLRLoss(model=None, guide=FixedTeacher(teacher), seed=7, gather_across_devices=gather)
    if not gather:
        teacher = teacher[rows, rows]  # a local guide scores the local rows
    with dclr_dist.gathering(gather):  # as DCLRLoss.forward wraps the whole step
        loss = st.compute_loss_from_embeddings(a, b, teacher) * ddp_scale()
        names = gather_strings([f"rank{rank}"])
        scale = ddp_scale()
    loss.backward()
    torch.save(
        {"loss": loss.detach(), "a": a.grad, "b": b.grad, "scale": scale, "names": names},
        f"{out_dir}/rank{rank}.pt",
    )
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_see_the_global_batch(tmp_path):
    """Each rank's loss is the global loss (x world size, which DDP's averaging undoes) and its
    rows get the single-process gradient of the global batch (x world size)."""
    world = 2
    spawn_gloo_ranks(_rank_worker, world, tmp_path, str(tmp_path))
    z1, z2, teacher = fixed_batch(5)
    single = DCLRLoss(model=None, guide=FixedTeacher(teacher), seed=7)
    loss, ga, gb = loss_and_grads(
        lambda a, b: single.compute_loss_from_embeddings(a, b, teacher), z1, z2
    )
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        rows = slice(rank * N // world, (rank + 1) * N // world)
        assert got["scale"] == world and got["names"] == ["rank0", "rank1"]
        torch.testing.assert_close(got["loss"] / world, loss)
        torch.testing.assert_close(got["a"] / world, ga[rows])
        torch.testing.assert_close(got["b"] / world, gb[rows])


@pytest.mark.slow
def test_without_gathering_each_rank_sees_its_own_rows(tmp_path):
    """gather_across_devices=False (issue 27 item 6): each rank's loss and gradients are the
    single-process ones of its own rows, unscaled (DDP's average is then the mean of the
    ranks' losses, as MultipleNegativesRankingLoss without gathering)."""
    world = 2
    spawn_gloo_ranks(_rank_worker, world, tmp_path, str(tmp_path), False)
    z1, z2, teacher = fixed_batch(5)
    for rank in range(world):
        rows = slice(rank * N // world, (rank + 1) * N // world)
        local = teacher[rows, rows]
        alone = DCLRLoss(model=None, guide=FixedTeacher(local), seed=7)
        loss, ga, gb = loss_and_grads(
            lambda a, b, alone=alone, local=local: alone.compute_loss_from_embeddings(a, b, local),
            z1[rows], z2[rows],
        )  # fmt: skip
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["scale"] == 1 and got["names"] == [f"rank{rank}"]
        torch.testing.assert_close(got["loss"], loss)
        torch.testing.assert_close(got["a"], ga)
        torch.testing.assert_close(got["b"], gb)
    assert DCLRLoss(model=None, weighting="none").get_config_dict()["gather_across_devices"]


def test_dclr_loss_without_a_guide_says_weighting_is_off():
    import warnings

    from dclr.st import DCLRLoss

    model = torch.nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="weighting is off"):
        DCLRLoss(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DCLRLoss(model, weighting="none")  # asked for: no warning


def test_dclr_parts_reach_the_trainer_logs_and_the_card_names_the_guide(models, tmp_path):
    """Issue 27 item 6: dropped_fraction and noise_count never reached the trainer's logs, and
    the card recorded a local guide as "SentenceTransformer"."""
    datasets = pytest.importorskip("datasets")
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from transformers import TrainerCallback

    from dclr.st import log_dclr_parts

    student, guide = models
    loss = DCLRLoss(student, guide=guide, false_negative_threshold=GUIDE_PHI)
    assert loss.get_config_dict()["guide"] == "guide"  # the folder's name, not its path
    seen: list[dict] = []

    class Recorder(TrainerCallback):  # stands for TensorBoard: a reporting callback
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append(dict(logs or {}))

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=4,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=2,
    )  # fmt: skip
    data = datasets.Dataset.from_dict({"text": SENTENCES})
    trainer = SentenceTransformerTrainer(model=student, args=args, train_dataset=data, loss=loss,
                                         callbacks=[Recorder()])  # fmt: skip
    log_dclr_parts(trainer, loss)
    trainer.train()
    steps = [entry for entry in seen if "loss" in entry]
    assert len(steps) == 2
    for entry in steps:
        assert 0.0 <= entry["dclr/dropped_fraction"] <= 1.0
        assert entry["dclr/noise_count"] == 4.0  # k = 1 x batch of 4
        assert "dclr/contrastive" in entry
    assert any(0 < entry["dclr/dropped_fraction"] < 1 for entry in steps)  # the guide decides


# ---- one declaration of the options (issue 24 item 2) --------------------------------------------
class AnchorTeacher(FixedTeacher):
    def __init__(self, cos, anchors):
        super().__init__(cos)
        self.anchors = anchors

    def anchor_vectors(self, indices, sentences):
        return self.anchors


def test_the_st_face_takes_every_option_dclr_train_takes():
    """The objective's options are declared once (DCLROptions): `dclr train`'s dclr section is
    them plus where the scores come from, and the sentence-transformers face accepts each one."""
    import dataclasses

    from dclr.options.dclr import DCLROptions, DCLRSection, option_names

    train_only = {  # the positive views and the source of the guide's scores: ST has its own
        "view1", "view1_rate", "view2", "view2_rate", "complementary_model",
        "complementary_pooler", "complementary_mode", "complementary_cache", "complementary_rows",
        "phi_calibration", "phi_calibration_target",
    }  # fmt: skip
    section = {f.name for f in dataclasses.fields(DCLRSection)}
    assert section - train_only == set(option_names())
    defaults = dataclasses.asdict(DCLROptions())
    st = DCLRLoss(model=None, guide=FixedTeacher(torch.eye(2)), **defaults)
    assert st.objective.options == DCLROptions()
    config = st.get_config_dict()
    assert config["noise_weighting"] == "none" and config["gather_across_devices"] is True
    with pytest.raises(ConfigError, match="did you mean noise_weighting"):
        DCLRLoss(model=None, weighting="none", noise_weightin="complementary")


def test_noise_weighting_from_the_st_face_equals_dclr_train():
    """The paper's weighting of noise negatives (the ST face lacked it before): the same loss
    and gradients as dclr's own objective given the same guide vectors."""
    z1, z2, teacher = fixed_batch(2)
    gen = torch.Generator().manual_seed(4)
    anchors = torch.nn.functional.normalize(torch.randn(N, D, generator=gen), dim=-1)
    options = dict(noise_weighting="complementary", false_negative_threshold=0.2, seed=3,
                   noise_mode="random")  # fmt: skip
    st = DCLRLoss(model=None, guide=AnchorTeacher(teacher, anchors), **options)
    ours = DclrObjective.of(None, AnchorTeacher(teacher, anchors), **options)
    got = loss_and_grads(
        lambda a, b: st.compute_loss_from_embeddings(a, b, teacher, anchors), z1, z2
    )
    want = loss_and_grads(lambda a, b: ours.objective(a, b, Batch(features={}))["loss"], z1, z2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=0, rtol=0)
    assert st.last_parts["noise_dropped_fraction"] > 0
