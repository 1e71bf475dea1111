"""The GPU step's options, checked on the CPU (issue 44): each is off there by default, so the
recorded trajectories hold (tests/training/test_trajectories.py); turned on, each must give the
same run (prefetch: bit for bit) or the same run to float rounding (fused AdamW, length buckets,
torch.compile), and the device-side NaN stop must still stop before anything is saved."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import nan_on_call, tiny_run_overrides

import dclr.losses.simcse as simcse_module
import dclr.training.loop as loop_module
from dclr.driver import trainer_for
from dclr.errors import ConfigError, TrainingDiverged
from dclr.recipe import load_config
from dclr.training.checkpoint import latest_checkpoint
from dclr.training.finite import FiniteGuard
from dclr.training.prefetch import Prefetcher
from dclr.training.tracking import read_metrics


def run_losses(model_dir: Path, corpus: Path, out: Path, **options) -> dict[int, float]:
    config = load_config(None, tiny_run_overrides(model_dir, corpus, out, max_steps=6, **options))
    trainer_for(config).train()
    return {r["step"]: r["loss"] for r in read_metrics(out, "train")}


# ---- the NaN stop on the device ------------------------------------------------------------
def test_lazy_guard_keeps_the_first_non_finite_step():
    guard = FiniteGuard(lazy=True)
    for step, value in enumerate([1.0, 0.5, math.nan, 0.2, math.inf]):
        guard.observe(torch.tensor(value), step, "ckpt")  # never raises by itself
    with pytest.raises(TrainingDiverged, match="step 3") as err:
        guard.check("ckpt")
    assert err.value.step == 3 and err.value.last_checkpoint == "ckpt"


def test_lazy_guard_passes_finite_losses_and_eager_guard_raises_at_once():
    lazy = FiniteGuard(lazy=True)
    lazy.check(None)  # nothing observed yet
    lazy.observe(torch.tensor(0.3), 0, None)
    lazy.check(None)
    with pytest.raises(TrainingDiverged, match="step 5"):
        FiniteGuard(lazy=False).observe(torch.tensor(math.nan), 4, None)


def test_device_side_nan_stop_still_precedes_every_checkpoint(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """The loop as it runs on a GPU (lazy guard): a NaN at step 7 is read at the step-9
    checkpoint, which is then not written; the step-6 checkpoint is the one kept."""
    monkeypatch.setattr(loop_module, "FiniteGuard", lambda lazy: FiniteGuard(lazy=True))
    monkeypatch.setattr(simcse_module, "simcse_loss", nan_on_call(simcse_module.simcse_loss, 7))
    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "run", max_steps=20, save_steps=3, log_steps=5
    )
    with pytest.raises(TrainingDiverged, match="step 7") as err:
        trainer_for(load_config(None, overrides)).train()
    assert err.value.last_checkpoint is not None
    assert err.value.last_checkpoint.endswith("step-00000006")
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-00000006"
    assert not (tmp_path / "run" / "final").exists()
    assert [r["step"] for r in read_metrics(tmp_path / "run", "train")] == [5]


# ---- batches prepared ahead ----------------------------------------------------------------
def test_prefetcher_returns_what_make_returns_in_order():
    made = []

    def make(step):
        made.append(step)
        return step * 10

    batches = Prefetcher(make, enabled=True)
    got = [batches.get(s, then=s + 1 if s < 4 else None) for s in range(5)]
    batches.close()
    assert got == [0, 10, 20, 30, 40]
    assert sorted(made) == [0, 1, 2, 3, 4]  # each step made once


def test_prefetcher_surfaces_an_error_of_the_batch_it_prepared():
    def make(step):
        if step == 2:
            raise ValueError("bad line in batch 2")
        return step

    batches = Prefetcher(make, enabled=True)
    assert batches.get(0, then=1) == 0
    assert batches.get(1, then=2) == 1
    with pytest.raises(ValueError, match="bad line"):
        batches.get(2, then=None)
    batches.close()


def test_prefetch_on_gives_the_same_run_bit_for_bit(model_dir, corpus_file, tmp_path):
    off = run_losses(model_dir, corpus_file, tmp_path / "off", prefetch="off")
    on = run_losses(model_dir, corpus_file, tmp_path / "on", prefetch="on")
    assert on == off and len(on) == 6


@pytest.mark.parametrize("prefetch", ["off", "on"])
def test_a_steps_seconds_count_the_wait_for_its_batch(
    model_dir, corpus_file, tmp_path, monkeypatch, prefetch
):
    """`train_seconds` (what gpu_check's step times read, against a peer timed by the wall
    clock) holds the time a step waits for its batch: tokenised on the main thread, or
    prepared ahead by a thread slower than the step."""
    import time

    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / prefetch, max_steps=4, prefetch=prefetch
    )
    trainer = trainer_for(load_config(None, overrides))
    make = trainer.host_batch
    monkeypatch.setattr(trainer, "host_batch", lambda step: (time.sleep(0.25), make(step))[1])
    result = trainer.train()
    assert result.train_seconds >= 4 * 0.25 - 0.25  # each batch's wait (the first may overlap)


# ---- kernels and shapes --------------------------------------------------------------------
def test_fused_adamw_and_length_buckets_give_the_same_run_to_rounding(
    model_dir, corpus_file, tmp_path
):
    """Length buckets are compared on padded batches, as on a GPU: packing (the CPU's default)
    strips every pad token before the backbone, so a bucket's extra padding never reached it
    and a padded forward that attended to that padding gave the same run. Without dropout: its
    masks are drawn per padded position, so a longer padded batch draws other masks."""
    base = run_losses(model_dir, corpus_file, tmp_path / "base")
    fused = run_losses(model_dir, corpus_file, tmp_path / "fused", fused_optimizer="on")
    padded = {"packing": "off", "dropout": 0.0}
    unbucketed = run_losses(model_dir, corpus_file, tmp_path / "padded", **padded)
    bucketed = run_losses(model_dir, corpus_file, tmp_path / "bucket", length_bucket=16, **padded)
    for reference, other in ((base, fused), (unbucketed, bucketed)):
        assert other.keys() == reference.keys() and len(other) == 6
        for step, loss in reference.items():
            assert other[step] == pytest.approx(loss, rel=1e-4, abs=1e-5)


def test_the_prepared_attention_mask_gives_the_same_run_bit_for_bit(
    model_dir, corpus_file, tmp_path
):
    """`model.prepared_mask` (auto: on a GPU) builds transformers' own mask in 4-D
    (`dclr.models.attention_mask`): a padded run is the same either way."""
    padded = {"packing": "off"}
    off = run_losses(model_dir, corpus_file, tmp_path / "off", prepared_mask="off", **padded)
    on = run_losses(model_dir, corpus_file, tmp_path / "on", prepared_mask="on", **padded)
    assert on == off and len(on) == 6


def test_length_bucket_pads_batches_to_its_multiple(model_dir, corpus_file, tmp_path):
    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "b", max_steps=3, length_bucket=8
    )
    trainer = trainer_for(load_config(None, overrides))
    trainer._setup()  # sets the model's bucket, as train() does
    lengths = {trainer.batch(s)[0].features["input_ids"].shape[1] for s in range(3)}
    assert lengths and all(n % 8 == 0 for n in lengths)


def test_fused_optimizer_is_chosen_on_a_gpu_only_by_default(model_dir, corpus_file, tmp_path):
    trainer = trainer_for(
        load_config(None, tiny_run_overrides(model_dir, corpus_file, tmp_path / "r"))
    )
    assert trainer._fused_adamw() is None  # the CPU: torch's default kernel, as recorded
    trainer.device = torch.device("cuda")  # what it would pick there (nothing runs)
    assert trainer._fused_adamw() is True
    assert trainer._prefetch_on and trainer._async_copy


@pytest.fixture
def eager_random():
    """Inductor draws dropout masks from its own generator; `fallback_random` makes it draw them
    as eager PyTorch does. Set through torch's own `patch`, not monkeypatch: pytest >= 9.2 undoes
    a setattr by restoring the target's `__dict__`, which for torch's config modules deletes the
    option itself, and every later compile in the process fails on it."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield


@pytest.mark.slow
def test_compiled_step_gives_the_same_run_to_rounding(
    model_dir, corpus_file, tmp_path, eager_random
):
    """With dropout drawn as eager PyTorch draws it, the compiled run must follow the eager one."""
    padded = {"length_bucket": 16, "packing": "off"}  # a compiled run does not pack
    base = run_losses(model_dir, corpus_file, tmp_path / "eager", **padded)
    compiled = run_losses(  # with the attention mask prepared, as on a GPU
        model_dir, corpus_file, tmp_path / "compiled", compile="default", prepared_mask="on",
        **padded,
    )  # fmt: skip
    assert compiled.keys() == base.keys()
    for step, loss in base.items():
        assert compiled[step] == pytest.approx(loss, rel=1e-4, abs=1e-5)


def test_a_compiled_dclr_run_compiles_its_noise_ascent_and_follows_the_eager_one(
    model_dir, corpus_file, tmp_path, monkeypatch, eager_random
):
    """With the step compiled, DCLR's closed-form ascent is compiled too (`compile_parts`); the
    run follows the eager closed-form run to rounding. At the paper's step size (1e-3) the whole
    ascent moved this tiny run's losses by about the tolerance, so a compiled ascent that took
    half its steps passed; at 0.05 the ascent moves them far outside it (checked below)."""
    import dclr.losses.dclr as dclr_loss

    compiled_parts = []
    real = dclr_loss.DCLRLoss.compile_parts
    monkeypatch.setattr(dclr_loss.DCLRLoss, "compile_parts",
                        lambda self, mode: compiled_parts.append(mode) or real(self, mode))  # fmt: skip
    dclr = {"method": "dclr", "weighting": "none", "length_bucket": 16, "packing": "off",
            "noise_step_size": 0.05}  # fmt: skip
    base = run_losses(model_dir, corpus_file, tmp_path / "eager", noise_gradient="closed_form",
                      **dclr)  # fmt: skip
    assert compiled_parts == []
    compiled = run_losses(model_dir, corpus_file, tmp_path / "compiled", compile="default", **dclr)
    assert compiled_parts == ["default"]
    assert compiled.keys() == base.keys()
    for step, loss in base.items():
        assert compiled[step] == pytest.approx(loss, rel=1e-4, abs=1e-5)
    # not degenerate: without the ascent the losses leave the tolerance by far
    still = run_losses(model_dir, corpus_file, tmp_path / "still", noise_gradient="closed_form",
                       **{**dclr, "noise_steps": 0})  # fmt: skip
    assert any(abs(still[s] - loss) > 10 * max(1e-4 * abs(loss), 1e-5) for s, loss in base.items())


def test_a_compiled_run_evaluates_in_eager_pytorch_without_compiling_again(
    model_dir, corpus_file, tmp_path, monkeypatch, data_dir
):
    """The dev evaluation's batches have other shapes than training's (and eval mode): through
    the compiled backbone each would compile again (minutes on a BERT-base on a GPU, and CUDA
    graph outputs overwritten between batches). With recompiles made errors, a compiled run with
    dev evaluations must still finish."""
    import torch._dynamo.config as dynamo_config

    torch._dynamo.reset()  # what earlier tests compiled (other shapes) is forgotten
    monkeypatch.setenv("DCLR_DATA_DIR", str(data_dir))
    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "run", max_steps=4, eval_steps=2, length_bucket=32,
        max_length=32, compile="default",  # packing "auto": off when compiled, as on a GPU
    )  # fmt: skip
    with dynamo_config.patch(error_on_recompile=True):  # torch's patch (see eager_random)
        trainer_for(load_config(None, overrides)).train()
    assert [r["step"] for r in read_metrics(tmp_path / "run", "eval")] == [2, 4]


# ---- fp16: the loss scale ------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [None, 4], ids=["plain", "gradcache"])
def test_fp16_steps_scale_the_loss_and_a_resumed_run_goes_on_at_the_saved_scale(
    model_dir, corpus_file, tmp_path, monkeypatch, chunk
):
    """fp16 (the paper recipes' precision) runs on a GPU only, so here the loop is given CPU
    autocast in fp16 and a GradScaler("cpu"). The step used to read the scale without ever calling
    `scaler.scale`, so `unscale_` found no scale and raised on the first step; the scale was not
    in the checkpoint either."""
    monkeypatch.setattr(loop_module.Trainer, "_autocast_dtype", lambda self: torch.float16)
    run = tmp_path / "run"

    def config(steps: int):
        options = {
            "max_steps": steps,
            "save_steps": 2,
            **({"grad_cache_chunk": chunk} if chunk else {}),
        }
        return load_config(None, tiny_run_overrides(model_dir, corpus_file, run, **options))

    trainer_for(config(4)).train()
    records = read_metrics(run, "train")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in records)
    checkpoint = latest_checkpoint(run / "checkpoints")
    saved = torch.load(checkpoint / "trainer.pt", weights_only=True)["scaler"]
    assert saved["scale"] > 1.0  # fp16's scale (65,536 at the start), not a plain loss

    restored: list[dict] = []
    real_load = torch.amp.GradScaler.load_state_dict
    monkeypatch.setattr(
        torch.amp.GradScaler,
        "load_state_dict",
        lambda self, state: (restored.append(state), real_load(self, state))[1],
    )
    trainer_for(config(6)).train(resume=True)
    assert restored == [saved]
    assert [r["step"] for r in read_metrics(run, "train")][-2:] == [5, 6]


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_gradcache_refuses_the_compile_modes_that_record_cuda_graphs(
    model_dir, corpus_file, tmp_path, mode
):
    """GradCache holds each chunk's output while the next chunk runs the same graph (a replay
    overwrites it) and sums gradients over several backwards: refused by name, not left to fail
    on the GPU; `compile: default` (no graphs) still combines with it."""
    options = {"grad_cache_chunk": 4}
    with pytest.raises(ConfigError, match=f"grad_cache_chunk and compile: {mode}"):
        load_config(
            None, tiny_run_overrides(model_dir, corpus_file, tmp_path, compile=mode, **options)
        )
    load_config(
        None, tiny_run_overrides(model_dir, corpus_file, tmp_path, compile="default", **options)
    )


@pytest.mark.parametrize("chunk", [None, 4], ids=["plain", "gradcache"])
def test_fp16_gradients_reach_clipping_unscaled_as_in_fp32(
    model_dir, corpus_file, tmp_path, monkeypatch, chunk
):
    """The loss scale is applied once and taken off once: the gradient norm that clipping sees in
    fp16 (CPU autocast, GradScaler("cpu")) is fp32's, step for step, once the scale has backed off
    from the steps it skips (non-finite gradients). Scaled twice, it would be 2^14 or more times
    larger; never taken off, the same. GradCache runs its own backward with the scale the loop
    hands it: a scale left out there makes the norm 2^14 or more times smaller, which the test
    above (finite losses, a saved scale) does not see."""
    options = {"grad_cache_chunk": chunk} if chunk else {}
    norms: dict[str, list[float]] = {"fp32": [], "fp16": []}
    real = torch.nn.utils.clip_grad_norm_
    key = "fp32"

    def spy(params, max_norm, *args, **kwargs):
        total = real(params, max_norm, *args, **kwargs)
        norms[key].append(float(total))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    for key in ("fp32", "fp16"):
        if key == "fp16":
            monkeypatch.setattr(loop_module.Trainer, "_autocast_dtype", lambda self: torch.float16)
        overrides = tiny_run_overrides(
            model_dir, corpus_file, tmp_path / key, max_steps=8, **options
        )
        trainer_for(load_config(None, overrides)).train()
    finite = [(a, b) for a, b in zip(norms["fp32"], norms["fp16"], strict=True) if math.isfinite(b)]
    assert len(finite) >= 4  # the scale backed off within the first steps
    for fp32, fp16 in finite:
        assert fp16 == pytest.approx(fp32, rel=0.05)
