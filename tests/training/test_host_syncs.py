"""dclr.training.host_syncs (issue 44: "no host synchronisation in an ordinary step"): the loop as
it runs on a GPU makes no read of a device value of its own in an ordinary step, and a read
planted in the objective is found with its step and line. On the CPU the recorder catches the
calls that would wait on a GPU (a torch-function and a dispatch mode); CUDA's own detector is
checked with its warning, not a GPU."""

from __future__ import annotations

import traceback
import warnings

import pytest
import torch
from helpers import tiny_run_overrides

import dclr.losses.simcse as simcse_module
import dclr.training.host_syncs as host_syncs
import dclr.training.loop as loop_module
from dclr.driver import trainer_for
from dclr.models.attention_mask import TRANSFORMERS_MAJOR
from dclr.recipe import load_config
from dclr.training.finite import FiniteGuard
from dclr.training.host_syncs import HostSync, HostSyncs, record_host_syncs

# The GPU's choices, taken on the CPU: the NaN stop read at log steps only (lazy guard), padded
# batches (no packing), fused AdamW (the CPU's foreach AdamW reads each step count), batches made
# on the prefetch thread (there the sampler's ids are read on the host, as on a GPU), the attention
# mask prepared in 4-D (dclr.models.attention_mask: transformers then reads nothing to build it).
GPU_PATH = {"packing": "off", "fused_optimizer": "on", "prefetch": "on", "prepared_mask": "on"}


def gpu_like_run(model_dir, corpus_file, out, monkeypatch, **options) -> HostSyncs:
    """7 steps, a log at 3, 6 and 7 (the last): ordinary steps 1, 2, 4 and 5."""
    monkeypatch.setattr(loop_module, "FiniteGuard", lambda lazy: FiniteGuard(lazy=True))
    overrides = tiny_run_overrides(
        model_dir, corpus_file, out, max_steps=7, log_steps=3, **{**GPU_PATH, **options}
    )
    return record_host_syncs(trainer_for(load_config(None, overrides)))


def test_simcse_on_the_gpu_path_reads_nothing_of_its_own_in_an_ordinary_step(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    syncs = gpu_like_run(model_dir, corpus_file, tmp_path / "run", monkeypatch)
    assert syncs.ordinary == [1, 2, 4, 5] and syncs.steps == 7
    assert [e for e in syncs.in_ordinary_steps() if e.ours] == []
    if TRANSFORMERS_MAJOR >= 5:  # and none in a library: transformers' mask check is gone
        assert syncs.in_ordinary_steps() == []
    # with the mask left to transformers, its check (`padding_mask.all()`, to skip the mask when
    # nothing is padded) reads once per forward, reached through our forward
    syncs = gpu_like_run(model_dir, corpus_file, tmp_path / "own", monkeypatch, prepared_mask="off")
    others = syncs.in_ordinary_steps()
    assert all(e.via and e.via.startswith("dclr/models/encoder.py") for e in others)
    assert [e.step for e in others] == syncs.ordinary
    # the log steps read the loss (the lazy NaN stop and the record): seen, and not ordinary
    logged = [e for e in syncs.events if e.ours and e.step in (3, 6, 7)]
    assert logged and {e.step for e in logged} == {3, 6, 7}


@pytest.mark.parametrize(
    ("read", "op"),
    [(lambda loss: float(loss.detach()), "__float__"),  # the kind of read issue 44 found
     (lambda loss: loss.detach().cpu(), "cpu"),  # a copy to the host
     (lambda loss: loss.detach().reshape(1).nonzero(), "nonzero")],  # a data-dependent size
    ids=["float", "cpu", "nonzero"],
)  # fmt: skip
def test_a_read_planted_in_the_objective_is_found_at_its_line_in_every_step(
    model_dir, corpus_file, tmp_path, monkeypatch, read, op
):
    """Red on a planted bug: a host read in the objective, found once per ordinary step."""
    real = simcse_module.simcse_loss

    def reading_loss(*args, **kwargs):
        loss = real(*args, **kwargs)
        read(loss)  # a host read of the device loss, every step
        return loss

    monkeypatch.setattr(simcse_module, "simcse_loss", reading_loss)
    syncs = gpu_like_run(model_dir, corpus_file, tmp_path / "run", monkeypatch)
    ours = [e for e in syncs.in_ordinary_steps() if e.ours]
    assert [e.step for e in ours] == [1, 2, 4, 5]
    assert {e.op for e in ours} == {op}
    assert {e.where.split(":")[0] for e in ours} == {"tests/training/test_host_syncs.py"}
    assert all(e.where.endswith("in <lambda>") for e in ours)  # the planted line itself
    summary = syncs.summary()
    assert summary["ours_in_ordinary_steps"] == 4 and summary["max_per_ordinary_step"] >= 1


def test_dclr_on_the_gpu_path_reads_only_what_a_gpu_does_not_wait_for(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """DCLR's reads of its own, each once per ordinary step, and neither a wait on a GPU: the
    check of the noise negatives, which runs on a CPU only (on a GPU a non-finite noise vector
    makes the loss non-finite, which the lazy guard stops), and the cached complementary model's
    read of the batch's corpus rows, `Batch.indices`, the sampler's tensor, which stays on the
    host (`Trainer._on_device` moves the features and labels only: checked here)."""
    syncs = gpu_like_run(
        model_dir, corpus_file, tmp_path / "run", monkeypatch,
        method="dclr", complementary_model=str(model_dir), complementary_pooler="mean",
        phi_calibration="none",
    )  # fmt: skip
    ours = [e for e in syncs.in_ordinary_steps() if e.ours]
    places = {(e.op, e.where.split(":")[0], e.where.split(" in ")[-1]) for e in ours}
    assert places == {
        ("__bool__", "dclr/losses/dclr.py", "noise_negatives"),
        ("cpu", "dclr/losses/complementary.py", "anchor_vectors"),
        ("numpy", "dclr/losses/complementary.py", "anchor_vectors"),
    }
    assert sorted(e.step for e in ours) == sorted([1, 2, 4, 5] * 3)


@pytest.mark.parametrize("mode", ["on_the_fly", "two_views"])
def test_a_complementary_model_that_encodes_in_the_step_prepares_its_mask_too(
    model_dir, corpus_file, tmp_path, monkeypatch, mode
):
    """DCLR's on-the-fly complementary model encodes each batch in eval mode inside the step:
    it takes the step's mask choice (`step_mask_choice`), so transformers reads nothing there
    either (the eval-mode default would leave its read, once per step)."""
    syncs = gpu_like_run(
        model_dir, corpus_file, tmp_path / "run", monkeypatch,
        method="dclr", complementary_model=str(model_dir), complementary_pooler="mean",
        phi_calibration="none", complementary_mode=mode,
    )  # fmt: skip
    assert [e for e in syncs.in_ordinary_steps() if not e.ours] == []


def test_the_step_mask_choice_of_a_frozen_model():
    from dclr.models.attention_mask import step_mask_choice

    assert step_mask_choice("auto", torch.device("cuda")) == "on"
    assert step_mask_choice("auto", torch.device("cpu")) == "auto"  # a CPU: transformers' mask
    assert step_mask_choice("off", torch.device("cuda")) == "off"
    assert step_mask_choice("on", torch.device("cpu")) == "on"


def test_a_batch_goes_to_the_device_with_its_corpus_rows_left_on_the_host(
    model_dir, corpus_file, tmp_path
):
    """What makes the complementary model's read of `Batch.indices` free on a GPU. The "meta"
    device stands in for the GPU: the features move there, the indices stay on the CPU."""
    trainer = trainer_for(load_config(None, tiny_run_overrides(model_dir, corpus_file, tmp_path)))
    trainer._setup()
    host = trainer.host_batch(0)
    trainer.device = torch.device("meta")
    moved, _ = trainer._on_device(host)
    assert {t.device.type for t in moved.features.values()} == {"meta"}
    assert moved.indices.device.type == "cpu" and moved.indices is host[0].indices


CONSERT_VIEWS = {"method": "consert", "view1": "token_shuffle", "view2": "feature_cutoff",
                 "view2_rate": 0.2}  # fmt: skip


def test_consert_views_are_drawn_with_the_batch_and_read_nothing_in_the_step(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """ConSERT's views need the content mask on the host (they are drawn from a CPU generator):
    drawn with the batch (`DrawsAhead`, on the prefetch thread on a GPU), the step reads
    nothing of its own. Red when the objective draws them itself: the mask's copy to the host,
    once per ordinary step."""
    syncs = gpu_like_run(model_dir, corpus_file, tmp_path / "ahead", monkeypatch, **CONSERT_VIEWS)
    assert [e for e in syncs.in_ordinary_steps() if e.ours] == []
    monkeypatch.setattr(simcse_module.SimCSELoss, "draw_ahead", lambda self, batch: None)
    syncs = gpu_like_run(model_dir, corpus_file, tmp_path / "in-step", monkeypatch, **CONSERT_VIEWS)
    copies = [e for e in syncs.in_ordinary_steps() if e.ours and e.op == "cpu"]
    assert [e.step for e in copies] == [1, 2, 4, 5]
    assert {e.where.split(" in ")[-1] for e in copies} == {"shuffle_permutation"}


def test_a_batch_goes_to_the_device_with_the_views_drawn_for_it(model_dir, corpus_file, tmp_path):
    """The views drawn with the host batch move to the device with its features (the "meta"
    device stands in for the GPU) and are those the objective would draw in the step."""
    overrides = tiny_run_overrides(model_dir, corpus_file, tmp_path, **CONSERT_VIEWS)
    trainer = trainer_for(load_config(None, overrides))
    state = trainer._setup()
    host, _ = trainer.host_batch(3)
    assert host.drawn is not None and set(host.drawn) == {"view1", "view2"}
    assert set(host.drawn["view1"]) == {"position_ids"}
    assert set(host.drawn["view2"]) == {"columns", "content"}
    in_step = state.objective.views.draw(trainer.model, dict(host.features), 3)
    for view, drawn in host.drawn.items():
        for name, tensor in drawn.items():
            assert torch.equal(tensor, in_step[view][name]), (view, name)
    trainer.device = torch.device("meta")
    moved, _ = trainer._on_device((host, 8))
    assert {t.device.type for d in moved.drawn.values() for t in d.values()} == {"meta"}


def frame(path: str, line: int, name: str) -> traceback.FrameSummary:
    return traceback.FrameSummary(path, line, name)


def test_a_read_inside_a_library_is_placed_there_and_via_our_caller():
    site = "/venv/lib/python3.11/site-packages"
    stack = [
        frame("/repo/src/dclr/training/loop.py", 10, "train"),
        frame("/repo/src/dclr/models/encoder.py", 20, "forward"),
        frame(f"{site}/transformers/masking_utils.py", 30, "sdpa_mask"),
        frame(f"{torch.__path__[0]}/_tensor.py", 40, "__bool__"),  # torch's own: skipped
        frame(host_syncs.__file__, 50, "seen"),  # the recorder: skipped
    ]
    assert host_syncs._where(stack) == (
        "transformers/masking_utils.py:30 in sdpa_mask",
        "dclr/models/encoder.py:20 in forward",
    )
    assert host_syncs._where(stack[:2]) == ("dclr/models/encoder.py:20 in forward", None)
    installed = [frame(f"{site}/dclr/losses/dclr.py", 5, "noise_negatives")]
    assert host_syncs._where(installed) == ("dclr/losses/dclr.py:5 in noise_negatives", None)


def test_the_summary_counts_by_hand():
    events = [
        HostSync(1, "_local_scalar_dense", "dclr/a.py:1 in f"),
        HostSync(1, "nonzero", "transformers/m.py:2 in g", via="dclr/b.py:3 in h"),
        HostSync(2, "_local_scalar_dense", "dclr/a.py:1 in f"),
        HostSync(3, "_local_scalar_dense", "dclr/c.py:4 in log"),  # a log step
    ]
    summary = HostSyncs("cpu-calls", 3, [1, 2], events).summary()
    assert summary == {
        "detector": "cpu-calls", "steps": 3, "ordinary_steps": 2,
        "syncs_in_ordinary_steps": 3, "ours_in_ordinary_steps": 2, "max_per_ordinary_step": 2,
        "syncs_in_other_steps": 1,
        "where": {"dclr/a.py:1 in f": 2,
                  "transformers/m.py:2 in g (via dclr/b.py:3 in h)": 1},
    }  # fmt: skip


def test_the_cuda_detector_takes_cudas_warning_and_shows_the_others(monkeypatch):
    """CUDA's detector warns "called a synchronizing CUDA operation" (from any thread); the
    recorder takes those, lets every other warning through, and puts the mode back."""
    modes = [0]
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    seen, shown = [], []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *rest, **kw: shown.append(message))
    with host_syncs._cuda_detector(seen.append):
        assert modes[-1] == "warn"
        for _ in range(2):  # "always": the same line twice is two reads
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert seen == ["cuda synchronize", "cuda synchronize"]
    assert [str(m) for m in shown] == ["something else"]
    assert modes[-1] == 0


@pytest.mark.parametrize(
    ("ops", "op"),
    [(lambda t: t.nonzero(), "nonzero"), (lambda t: t[t > 0], "index (boolean mask)"),
     (lambda t: t.item(), "item"), (lambda t: bool(t), "__bool__"), (lambda t: t.tolist(), "tolist"),
     (lambda t: t.numpy(), "numpy"), (lambda t: [0, 1][t.long()], "__index__")],
    ids=["nonzero", "mask", "item", "bool", "tolist", "numpy", "index"],
)  # fmt: skip
def test_the_cpu_recorder_sees_each_read_once(ops, op):
    seen = []
    with host_syncs._cpu_detector(seen.append):
        ops(torch.tensor([1.0]))
        torch.tensor([1.0, 2.0]).sum() * 2  # no read: nothing
        torch.tensor([1.0]).to("cpu")  # a run's own device: not a read
    assert seen == [op]
