"""Supervised NLI training: SimCSE-supervised, the NLI head, joint and two-stage schedules."""

import math
from pathlib import Path

import pytest
import torch
from helpers import (
    interrupt_on_call,
    pseudo_sentence,
    write_pseudo_corpus,
)

from dclr.contract import Batch
from dclr.driver import run_schedule, trainer_for
from dclr.errors import ConfigError
from dclr.losses.supervised import NLIHead, SupervisedNLILoss
from dclr.methods.registry import get_method
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics


def stage_configs(config):
    return get_method(config.method).stages(config)


LABELS = ["entailment", "neutral", "contradiction"]


@pytest.fixture(scope="module")
def model_dir(tiny_dropout_model_dir):  # conftest: built once per session
    return tiny_dropout_model_dir


@pytest.fixture(scope="module")
def nli_folder(tmp_path_factory):
    """40 premises with one hypothesis per label, SentEval's s1/s2/labels layout."""
    gen = torch.Generator().manual_seed(0)
    s1, s2, labels = [], [], []
    for _ in range(40):
        premise = pseudo_sentence(gen, 3, 9)
        for label in LABELS:
            s1.append(premise)
            s2.append(pseudo_sentence(gen, 3, 9))
            labels.append(label)
    folder = tmp_path_factory.mktemp("data") / "SNLI"
    folder.mkdir()
    for name, lines in (("s1", s1), ("s2", s2), ("labels", labels)):
        (folder / f"{name}.train").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_pseudo_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", 64, seed=1)


def config(model_dir, out, **options):
    return load_config(
        None,
        {"model": str(model_dir), "batch_size": 8, "max_steps": 3, "eval_steps": 0,
         "log_steps": 1, "test_eval": False, "output_dir": str(out), **options},
    )  # fmt: skip


def losses(run_dir):
    return {r["step"]: r for r in read_metrics(run_dir, "train")}


def test_supervised_simcse_on_senteval_nli_trains_reproducibly(model_dir, nli_folder, tmp_path):
    options = {"schedule": "sup", "nli_data": str(nli_folder)}
    a = trainer_for(config(model_dir, tmp_path / "a", **options))
    assert len(a.run.data) == 40  # one (premise, entailment, contradiction) triple per premise
    a.train()
    trainer_for(config(model_dir, tmp_path / "b", **options)).train()
    first, second = losses(tmp_path / "a"), losses(tmp_path / "b")
    assert len(first) == 3 and all(math.isfinite(r["loss"]) for r in first.values())
    assert [r["loss"] for r in first.values()] == [r["loss"] for r in second.values()]


def test_supervised_simcse_on_a_simcse_csv(model_dir, tmp_path):
    gen = torch.Generator().manual_seed(2)
    rows = [",".join(pseudo_sentence(gen, 3, 9) for _ in range(3)) for _ in range(16)]
    csv = tmp_path / "nli.csv"
    csv.write_text("sent0,sent1,hard_neg\n" + "\n".join(rows) + "\n")
    trainer_for(config(model_dir, tmp_path / "r", schedule="sup", nli_data=str(csv))).train()
    assert len(losses(tmp_path / "r")) == 3
    with pytest.raises(ConfigError, match="needs labelled pairs"):
        trainer_for(
            config(
                model_dir,
                tmp_path / "x",
                schedule="sup",
                supervised_loss="nli_head",
                nli_data=str(csv),
            )
        )


def test_joint_schedule_logs_both_parts_and_trains_the_head(model_dir, nli_folder, tmp_path):
    cfg = config(
        model_dir, tmp_path / "j", schedule="joint", supervised_loss="nli_head",
        nli_data=str(nli_folder), method="consert", pooler="avg_top2", mlp_head=False,
        view1="token_shuffle", view2="feature_cutoff", view2_rate=0.2, joint_weight=0.5,
    )  # fmt: skip
    trainer = trainer_for(cfg)
    assert len(trainer.run.data) == 120  # every labelled pair
    trainer.train()
    rows = losses(tmp_path / "j")
    for row in rows.values():
        assert row["loss"] == pytest.approx(row["classification"] + 0.5 * row["contrastive"], 1e-5)
    exported = tmp_path / "j" / "final"
    assert not any("classifier" in p.name for p in exported.rglob("*"))


def test_clip_scope_all_puts_the_nli_head_in_the_clipped_norm(
    model_dir, nli_folder, tmp_path, monkeypatch
):
    """ConSERT's released code clips loss_model.parameters() (the encoder and the head);
    `clip_scope: all` does, `model` (the default, the recorded trajectories') clips the encoder's
    alone. The norm clipped under `all` is the root of both squared norms, and with clipping
    active (a small max_grad_norm) the two runs part after the first update."""
    import dclr.training.loop as loop_module

    real = torch.nn.utils.clip_grad_norm_
    calls: dict[str, list] = {}

    def run(scope):
        seen = calls.setdefault(scope, [])

        def spy(parameters, max_norm, *args, **kwargs):
            parameters = list(parameters)
            norms = [p.grad.detach().norm() for p in parameters if p.grad is not None]
            seen.append((parameters, float(torch.stack(norms).norm())))
            return real(parameters, max_norm, *args, **kwargs)

        monkeypatch.setattr(loop_module.torch.nn.utils, "clip_grad_norm_", spy)
        cfg = config(
            model_dir, tmp_path / scope, schedule="joint", supervised_loss="nli_head",
            nli_data=str(nli_folder), joint_weight=0.5, max_grad_norm=1e-3, clip_scope=scope,
            max_steps=2,
        )  # fmt: skip
        trainer = trainer_for(cfg)
        trainer.train()
        return trainer, [r["loss"] for r in losses(tmp_path / scope).values()]

    encoder_only, model_losses = run("model")
    both, all_losses = run("all")
    model_ids = {id(p) for p in encoder_only.model.parameters()}
    clipped = calls["model"][0][0]
    assert {id(p) for p in clipped} == model_ids
    head = [p for p in calls["all"][0][0] if id(p) not in {id(q) for q in both.model.parameters()}]
    hidden = both.model.backbone.config.hidden_size
    assert sorted(tuple(p.shape) for p in head) == [(3,), (3, 3 * hidden)]  # (u, v, |u-v|) -> 3
    # step 1: same weights, same batch: the head adds its own squared norm to the encoder's
    (_, encoder_norm), (_, total_norm) = calls["model"][0], calls["all"][0]
    head_norm = math.sqrt(total_norm**2 - encoder_norm**2)
    assert head_norm > 0.01 * encoder_norm
    assert model_losses[0] == all_losses[0] and model_losses[1:] != all_losses[1:]


def test_joint_weight_zero_is_the_nli_head_alone(tiny_encoder, tokenizer):
    encoder = tiny_encoder(pooler="mean").eval()
    head = NLIHead(encoder.hidden_size)
    features = dict(tokenizer(["a b", "c d e", "f", "g h"], padding=True, return_tensors="pt"))
    labels = torch.tensor([0, 2])
    alone = SupervisedNLILoss(encoder, "nli_head", head=head)(Batch(features, labels=labels))[
        "loss"
    ]

    def contrastive(batch):
        return {"loss": torch.tensor(5.0)}

    joint = SupervisedNLILoss(
        encoder, "joint", head=head, contrastive=contrastive, joint_weight=0.0
    )(Batch(features, labels=labels))
    assert torch.equal(joint["loss"], alone)
    with pytest.raises(ValueError, match="needs labels"):
        SupervisedNLILoss(encoder, "nli_head", head=head)(Batch(features))


def test_sup_then_unsup_runs_two_stages(model_dir, nli_folder, corpus_file, tmp_path):
    cfg = config(
        model_dir, tmp_path / "two", schedule="sup_then_unsup", nli_data=str(nli_folder),
        corpus=str(corpus_file),
    )  # fmt: skip
    first, second = stage_configs(cfg)
    assert (first.method, first.section("nli").schedule) == ("nli", "sup")
    assert second.method == "simcse"  # the unsupervised stage: the contrastive method alone
    assert second.model.name == str(tmp_path / "two" / "stage-1" / "final")
    with pytest.raises(ConfigError, match="run_schedule"):
        trainer_for(cfg)
    results = run_schedule(cfg)
    assert [r.steps for r in results] == [3, 3]
    assert (tmp_path / "two" / "stage-2" / "final" / "model.safetensors").is_file()
    assert len(losses(tmp_path / "two" / "stage-2")) == 3


def test_a_stopped_schedule_says_to_resume_its_root(model_dir, nli_folder, corpus_file, tmp_path,
                                                     monkeypatch):  # fmt: skip
    """A signal in a stage said `--resume ROOT/stage-2`: that finished the stage alone and never
    the schedule. Interrupted outside the steps, it said "nothing to resume, run the same
    command again", which the stage's checkpoint then refused."""
    import dclr.driver as driver
    from dclr.training.runfolder import TrainingStopped, interrupted_state

    cfg = config(
        model_dir, tmp_path / "two", schedule="sup_then_unsup", nli_data=str(nli_folder),
        corpus=str(corpus_file),
    )  # fmt: skip
    real = driver.run_one

    def stopped_in_stage_two(stage, method, resume=False, **kwargs):
        if stage.run.output_dir.endswith("stage-2"):  # stopped after its step 2
            (Path(stage.run.output_dir) / "checkpoints" / "step-00000002").mkdir(parents=True)
            raise TrainingStopped(
                2, f"{stage.run.output_dir}/checkpoints/step-2", stage.run.output_dir
            )
        return real(stage, method, resume=resume, **kwargs)

    monkeypatch.setattr(driver, "run_one", stopped_in_stage_two)
    with pytest.raises(TrainingStopped, match=rf"--resume {tmp_path / 'two'}`$"):
        driver.run_training(cfg)
    said = interrupted_state(tmp_path / "two")
    assert said.startswith("interrupted in stage-2 of the schedule (stage-1 finished and kept)")
    assert said.endswith(f"`dclr train --resume {tmp_path / 'two'}` goes on from there")


def test_a_schedule_whose_stage_is_in_use_is_refused_before_anything_is_cleared(
    model_dir, nli_folder, corpus_file, tmp_path
):
    """`--overwrite ROOT` deleted the stage folders while another process held a stage's lock;
    under torchrun the stage's refusal came after the ranks met, and rank 1 died in DDP's set-up
    with a gloo traceback."""
    from dclr.runlock import FolderLock, LockHeld

    cfg = config(
        model_dir, tmp_path / "two", schedule="sup_then_unsup", nli_data=str(nli_folder),
        corpus=str(corpus_file),
    )  # fmt: skip
    from dclr.driver import run_training

    run_training(cfg)
    kept = tmp_path / "two" / "stage-1" / "final"
    held = FolderLock(tmp_path / "two" / "stage-2", "another dclr train")
    with held, pytest.raises(LockHeld, match="stage-2 is in use by pid"):
        run_training(cfg, overwrite=True)
    assert kept.is_dir() and (tmp_path / "two" / "results.json").is_file()


def test_second_stage_takes_its_own_learning_rate_and_epochs(model_dir, tmp_path):
    # ConSERT's released sup->unsup / joint->unsup: stage 1 at 2e-5 for 1 epoch, stage 2 at 5e-7
    # for 25 epochs
    cfg = config(
        model_dir, tmp_path / "two", schedule="joint_then_unsup", nli_data="x",
        supervised_loss="nli_head", learning_rate=2e-5, second_stage_learning_rate=5e-7,
        second_stage_epochs=25, contrastive="consert",
    )  # fmt: skip
    first, second = stage_configs(cfg)
    assert (first.optimisation.learning_rate, first.optimisation.max_steps) == (2e-5, 3)
    assert second.optimisation.learning_rate == 5e-7
    assert (second.optimisation.epochs, second.optimisation.max_steps) == (25, None)
    plain = stage_configs(
        config(model_dir, tmp_path / "p", schedule="sup_then_unsup", nli_data="x")
    )
    assert plain[1].optimisation.learning_rate == plain[0].optimisation.learning_rate
    assert plain[1].optimisation.max_steps == 3


def test_dclr_train_runs_a_two_stage_schedule(model_dir, nli_folder, corpus_file, tmp_path):
    from dclr.driver import run_training

    cfg = config(
        model_dir, tmp_path / "two", schedule="joint_then_unsup", nli_data=str(nli_folder),
        corpus=str(corpus_file), supervised_loss="nli_head",
    )  # fmt: skip
    summary = run_training(cfg)
    assert [s["steps"] for s in summary["stages"]] == [3, 3]
    assert summary["best_dir"] == str(tmp_path / "two" / "stage-2" / "best")
    stamp = (tmp_path / "two" / "stage-1" / "results.json").stat().st_mtime_ns
    again = run_training(cfg, resume=True)  # both stages done: nothing is retrained
    assert (tmp_path / "two" / "stage-1" / "results.json").stat().st_mtime_ns == stamp
    assert again["stages"] == summary["stages"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"schedule": "sup"}, "needs nli_data"),
        ({"schedule": "joint", "nli_data": "x"}, "supervised_loss: nli_head"),
        ({"schedule": "later", "nli_data": "x"}, "schedule"),
        ({"joint_weight": -1}, "joint_weight"),
        ({"schedule": "sup_then_unsup", "nli_data": "x", "second_stage_learning_rate": 0}, "> 0"),
        (
            {
                "schedule": "joint",
                "nli_data": "x",
                "supervised_loss": "nli_head",
                "second_stage_epochs": 2,
            },
            "two-stage",
        ),
    ],
)
def test_bad_supervised_options(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", **override})


# ---- adversarial view -------------------------------------------------------------------------
class Capture(torch.nn.Module):
    """A contrastive stub that records the views it is given."""

    def objective(self, z1, z2, batch=None):
        self.views = (z1.detach(), z2.detach())
        return {"loss": torch.tensor(0.0)}


def adversarial_loss(encoder, epsilon, first=False):
    from dclr.losses.supervised import AdversarialView
    from dclr.views.pair import ViewSpec

    head = NLIHead(encoder.hidden_size)
    capture = Capture()
    view = AdversarialView(epsilon, ViewSpec("none"), adversarial_first=first)
    loss = SupervisedNLILoss(encoder, "joint", head=head, contrastive=capture, adversarial=view)
    return loss, capture


def nli_batch(tokenizer):
    texts = ["a man runs", "two dogs play in the park", "a man moves", "cats sleep"]
    features = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    return features, torch.tensor([0, 2])


def test_adversarial_view_moves_the_embeddings_uphill(tiny_encoder, tokenizer):
    encoder = tiny_encoder(pooler="mean").eval()  # no dropout: views differ only by the attack
    features, labels = nli_batch(tokenizer)
    loss, capture = adversarial_loss(encoder, epsilon=0.0)
    loss(Batch(features, labels=labels))
    assert torch.equal(*capture.views)  # epsilon 0: the adversarial view is the other view
    loss, capture = adversarial_loss(encoder, epsilon=1.0, first=True)
    out = loss(Batch(features, labels=labels))
    z_adv, z_clean = capture.views
    assert (z_adv - z_clean).abs().max() > 1e-4
    head = loss.head
    with torch.no_grad():
        clean = torch.nn.functional.cross_entropy(head(*z_clean.chunk(2)), labels)
        attacked = torch.nn.functional.cross_entropy(head(*z_adv.chunk(2)), labels)
    assert out["classification"].item() == pytest.approx(clean.item(), rel=1e-5)
    assert attacked > clean  # the FGSM step increases the supervised loss


def test_the_other_view_drawn_with_the_batch_is_the_one_drawn_in_the_step(tiny_encoder, tokenizer):
    """`SupervisedNLILoss.draw_ahead` (the loop draws it with the batch): the adversarial joint's
    other view, or the contrastive loss's own views; the step's vectors are the same either way."""
    from dclr.losses.consert import ConSERTLoss
    from dclr.losses.supervised import AdversarialView
    from dclr.views.pair import PositiveViews, ViewSpec

    encoder = tiny_encoder(pooler="mean").eval()
    features, labels = nli_batch(tokenizer)
    head = NLIHead(encoder.hidden_size)
    view = AdversarialView(0.5, ViewSpec("token_shuffle"), seed=2)
    capture = Capture()
    loss = SupervisedNLILoss(encoder, "joint", head=head, contrastive=capture, adversarial=view)
    drawn = loss.draw_ahead(Batch(features, step=4, labels=labels))
    assert set(drawn) == {"other"} and set(drawn["other"]) == {"position_ids"}
    loss(Batch(features, step=4, labels=labels))
    in_step = capture.views
    loss(Batch(features, step=4, labels=labels, drawn=drawn))
    for a, b in zip(in_step, capture.views, strict=True):
        assert torch.equal(a, b)
    views = PositiveViews(ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2), seed=2)
    joint = SupervisedNLILoss(
        encoder, "joint", head=head, contrastive=ConSERTLoss(encoder, views=views)
    )
    drawn = joint.draw_ahead(Batch(features, step=4, labels=labels))
    assert set(drawn) == {"view1", "view2"}
    plain = joint(Batch(features, step=4, labels=labels))["loss"]
    ahead = joint(Batch(features, step=4, labels=labels, drawn=drawn))["loss"]
    assert torch.equal(plain, ahead)
    assert SupervisedNLILoss(encoder, "nli_head", head=head).draw_ahead(Batch(features)) is None


def test_joint_training_with_an_adversarial_view(model_dir, nli_folder, tmp_path):
    cfg = config(
        model_dir, tmp_path / "adv", schedule="joint", supervised_loss="nli_head",
        nli_data=str(nli_folder), view1="token_shuffle", view2="adversarial",
        adversarial_epsilon=0.5,
    )  # fmt: skip
    trainer_for(cfg).train()
    rows = losses(tmp_path / "adv")
    assert len(rows) == 3 and all(math.isfinite(r["contrastive"]) for r in rows.values())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"view2": "adversarial", "adversarial_epsilon": 0.1}, "needs labels"),
        ({"view2": "adversarial", "schedule": "joint", "supervised_loss": "nli_head",
          "nli_data": "x"}, "adversarial_epsilon > 0"),
        ({"view1": "adversarial", "view2": "adversarial", "schedule": "joint",
          "supervised_loss": "nli_head", "nli_data": "x", "adversarial_epsilon": 0.1}, "only one"),
    ],
)  # fmt: skip
def test_bad_adversarial_options(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", **override})


def built_objective(options, data):
    """The objective `dclr train` builds (NLI's `build_objective`) for a recipe of `options` on
    `data`, with no model: the options it hands the loss are read back from the loss."""
    from types import SimpleNamespace

    from dclr.contract import PreparedRun

    cfg = load_config(None, {"method": "nli", "model.name": "m", "nli.nli_data": "x", **options})
    method = get_method("nli")
    methods = {name: get_method(name) for name in ("nli", cfg.section("nli").contrastive)}
    encoder = SimpleNamespace(hidden_size=8)  # all `build_objective` reads of the run's model
    run = PreparedRun(cfg, method, encoder, data, None, 2, 0, torch.device("cpu"), Path("."),
                      methods=methods)  # fmt: skip
    return method.build_objective(run, None)


def test_the_built_objective_reads_the_nli_sections_options():
    """Each option off its default, and off the contrastive section's value of the same name:
    `nli.temperature` and `simcse.temperature` are both 0.05 by default, so a default-valued
    check cannot tell which one the loss reads. The joint run's adversarial view is wired as
    configured (epsilon, the other view with its rate, which view is first, the seed); the
    training tests above only see a finite loss, whatever the view."""
    from dclr.data.nli import NliPair, NliTriple
    from dclr.losses.supervised import AdversarialView
    from dclr.views.pair import ViewSpec

    triples = [NliTriple("a", "b", "c")]
    sup = built_objective({"nli.schedule": "sup", "nli.temperature": 0.1}, triples)
    assert (sup.kind, sup.temperature, sup.hard_negatives) == ("simcse", 0.1, True)
    pairs = [NliPair("a", "b", 0)]
    joint = {"nli.schedule": "joint", "nli.supervised_loss": "nli_head", "nli.joint_weight": 0.3,
             "nli.adversarial_epsilon": 0.5, "nli.contrastive": "consert",
             "consert.temperature": 0.2, "run.seed": 3}  # fmt: skip
    second = built_objective(
        {**joint, "consert.view1": "token_cutoff", "consert.view1_rate": 0.2,
         "consert.view2": "adversarial"}, pairs,
    )  # fmt: skip
    assert (second.kind, second.joint_weight, second.contrastive.temperature) == ("joint", 0.3, 0.2)
    assert second.adversarial == AdversarialView(0.5, ViewSpec("token_cutoff", 0.2), False, 3)
    first = built_objective(
        {**joint, "consert.view1": "adversarial", "consert.view2": "span_cutoff",
         "consert.view2_rate": 0.4}, pairs,
    )  # fmt: skip
    assert first.adversarial == AdversarialView(0.5, ViewSpec("span_cutoff", 0.4), True, 3)


def test_resume_of_a_joint_run_restores_the_nli_head(model_dir, nli_folder, tmp_path, monkeypatch):
    options = {"schedule": "joint", "supervised_loss": "nli_head", "nli_data": str(nli_folder),
               "max_steps": 6, "save_steps": 2}  # fmt: skip
    trainer_for(config(model_dir, tmp_path / "a", **options)).train()
    real = NLIHead.forward
    # interrupted at step 5, after the step-4 checkpoint
    monkeypatch.setattr(NLIHead, "forward", interrupt_on_call(real, 5))
    with pytest.raises(KeyboardInterrupt):
        trainer_for(config(model_dir, tmp_path / "b", **options)).train()
    monkeypatch.setattr(NLIHead, "forward", real)
    checkpoint = tmp_path / "b" / "checkpoints" / "step-00000004"
    assert (checkpoint / "nli_head.safetensors").is_file()
    trainer_for(config(model_dir, tmp_path / "b", **options)).train(resume=True)
    a, b = losses(tmp_path / "a"), losses(tmp_path / "b")
    assert {s: r["classification"] for s, r in a.items()} == {
        s: r["classification"] for s, r in b.items()
    }
    assert {s: r["loss"] for s, r in a.items()} == {s: r["loss"] for s, r in b.items()}
