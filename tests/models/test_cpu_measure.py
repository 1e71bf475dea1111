"""The CPU policy measured on the user's machine (issue 46 item 1, a kind the package has no
recording of): the choices against hand-made figures, a short measurement kept in the user's
cache and followed, and `dclr cpu-policy` showing where the policy comes from."""

from __future__ import annotations

import errno
import json
import math
import os

import pytest
import torch
from typer.testing import CliRunner

from dclr import atomic
from dclr.cli.main import app
from dclr.errors import InputError
from dclr.models import cpu_kind, cpu_measure, onednn, static_int8
from dclr.models.smoothing import CALIBRATION_SENTENCES


def scaling(*speedups: float) -> list[dict]:
    return [{"tokens": 10 * (i + 1), "speedup_2t": s} for i, s in enumerate(speedups)]


def test_a_second_thread_from_where_it_pays_and_keeps_paying():
    assert cpu_measure.SECOND_THREAD_SPEEDUP == 1.33
    assert cpu_measure.one_thread_below(scaling(1.42, 1.02, 1.39, 1.58, 1.5)) == 30
    assert cpu_measure.one_thread_below(scaling(1.5, 1.6, 1.7)) == 10  # every size: from the first
    assert cpu_measure.one_thread_below(scaling(1.5, 1.6, 1.2)) == 31  # the largest fails: never


def test_the_paired_speedup_is_the_geometric_mean_of_ratios_with_its_t_interval():
    one, two = [3.0, 4.0, 6.0], [2.0, 2.0, 4.0]  # ratios 1.5, 2, 1.5
    speedup, (lo, hi) = cpu_measure.paired_speedup(one, two)
    logs = [math.log(1.5), math.log(2.0), math.log(1.5)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302652729749462 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert speedup == pytest.approx(math.exp(mean)) == pytest.approx((1.5 * 2 * 1.5) ** (1 / 3))
    assert (lo, hi) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert cpu_measure.paired_speedup([2.0], [1.0]) == (2.0, (2.0, 2.0))  # one pair: no spread
    assert cpu_measure.paired_speedup([2.0, 4.0], [1.0, 2.0]) == (2.0, (2.0, 2.0))


def test_runs_are_pooled_and_their_interval_is_over_the_runs():
    """With several runs the speedup is the geometric mean over every pass of every run, and its
    interval the t-interval over the runs' own speedups (kept per run): one run's passes share
    its drift. Run r takes 1 s a pass on one thread and 1 / (1.2 + 0.2 r) s on two."""
    speedup, (lo, hi) = cpu_measure.runs_speedup([1.2, 1.4, 1.6])
    logs = [math.log(1.2), math.log(1.4), math.log(1.6)]
    mean = sum(logs) / 3
    half = 4.302652729749462 * math.sqrt(sum((x - mean) ** 2 for x in logs) / 2) / math.sqrt(3)
    assert speedup == pytest.approx(math.exp(mean))
    assert (lo, hi) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    # the runs out of order: the middle pass by position (1 / 1.6 s) is not the median
    runs = [{1: {"tokens": 12, 1: [1.0, 1.0], 2: [1 / (1.2 + 0.2 * r)] * 2}} for r in (1, 2, 0)]
    (row,) = cpu_measure.scaling_rows(runs)
    assert row["speedup_2t_runs"] == [1.4, 1.6, 1.2] and row["tokens"] == 12
    assert row["speedup_2t"] == round(math.exp(mean), 2)
    assert row["speedup_2t_ci95"] == [round(math.exp(mean - half), 2),
                                      round(math.exp(mean + half), 2)]  # fmt: skip
    assert row["ms_1t"] == 1000.0 and row["ms_2t"] == round(1000 / 1.4, 2)  # median of 6 passes
    (one_run,) = cpu_measure.scaling_rows(runs[2:])
    assert "speedup_2t_runs" not in one_run and one_run["speedup_2t_ci95"] == [1.2, 1.2]


def test_each_run_is_measured_in_a_fresh_process(tiny_model_dir):
    assert cpu_measure.in_fresh_process(os.getpid) != os.getpid()
    rows = cpu_measure.thread_scaling(str(tiny_model_dir), CALIBRATION_SENTENCES, "aten",
                                      sizes=(1, 2), passes=2, rounds=1, runs=2)  # fmt: skip
    assert [r["texts"] for r in rows] == [1, 2]
    assert all(len(r["speedup_2t_runs"]) == 2 and r["speedup_2t"] > 0 for r in rows)


def test_one_and_two_threads_are_timed_in_turn(monkeypatch):
    seen: list[int] = []
    with cpu_measure.threads_restored():
        taken = cpu_measure.alternating_seconds(
            lambda _: seen.append(torch.get_num_threads()), None, rounds=4
        )
    assert seen == [1, 2] + [1, 2, 2, 1, 1, 2, 2, 1]  # one unmeasured call each, then in turn
    assert set(taken) == {1, 2} and all(s >= 0 for s in taken.values())


def test_the_kernel_and_the_int8_engine_by_their_rules():
    assert cpu_measure.kernel_choice({"a": 1.3, "b": 0.9, "bulk": 1.0}) == "onednn"  # gmean 1.05
    assert cpu_measure.kernel_choice({"a": 1.1, "b": 0.8, "bulk": 1.0}) == "aten"  # gmean 0.96
    # the geometric mean decides, not the arithmetic one (1.15 here)
    assert cpu_measure.kernel_choice({"a": 2.0, "b": 0.5, "bulk": 0.95}) == "aten"  # gmean 0.98
    assert cpu_measure.int8_engine({"static": 100.0, "dynamic": 119.0}) == "static"
    assert cpu_measure.int8_engine({"static": 100.0, "dynamic": 120.0}) == "dynamic"


def test_a_fast_dynamic_engine_that_rounds_coarsely_is_not_chosen():
    """Speed alone would pick fbgemm on a CPU where it is fast; its vectors must also come as
    close to fp32's as the floor asks (MiniLM's dynamic engine, 0.9735, does not)."""
    rates = {"static": 100.0, "dynamic": 200.0}
    floor = cpu_measure.INT8_COSINE_FLOOR
    assert cpu_measure.int8_engine(rates, {"static": 0.995, "dynamic": 0.9735}) == "static"
    assert cpu_measure.int8_engine(rates, {"static": 0.995, "dynamic": floor}) == "dynamic"
    assert cpu_measure.int8_engine({"static": 100.0, "dynamic": 119.0},
                                   {"static": 0.995, "dynamic": 0.999}) == "static"  # fmt: skip
    assert cpu_measure.int8_engine(rates, None) == "dynamic"  # a record from before: speed only
    assert cpu_measure.int8_engine({"dynamic": 1.0}, {"dynamic": 0.5}) == "dynamic"  # the only one


def test_without_data_the_built_in_sentences_are_measured(monkeypatch, tmp_path, data_dir):
    monkeypatch.delenv("DCLR_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no data in the default cache either
    texts, what = cpu_measure.sample_sentences(None, 70)
    assert len(texts) == 70 and set(texts) == set(CALIBRATION_SENTENCES) and "built-in" in what
    sts, what = cpu_measure.sample_sentences(data_dir, 50)
    assert sts == cpu_measure.sample_sentences(data_dir, 50)[0] and len(set(sts)) == 50
    assert "STS" in what
    with pytest.raises(InputError):  # a folder named but wrong is an error, not a fallback
        cpu_measure.sample_sentences(tmp_path / "nothing", 50)


@pytest.fixture
def unrecorded_kind(tmp_path, monkeypatch):
    """A CPU kind the package has no recording of, and an empty user cache."""
    monkeypatch.setattr(cpu_kind, "POLICIES", tmp_path / "package")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_kind, "hardware_key", lambda: "TestVendor-AVX2")
    monkeypatch.delenv(onednn.KERNEL_ENV, raising=False)
    monkeypatch.setattr(cpu_measure, "QUICK", {"texts": 64, "singles": 2, "passes": 1})
    cpu_kind.cpu_policy.cache_clear()
    yield tmp_path
    cpu_kind.cpu_policy.cache_clear()


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")
def test_a_measurement_is_kept_and_followed(unrecorded_kind, tiny_model_dir, monkeypatch):
    assert cpu_kind.cpu_policy() == cpu_kind.DEFAULT
    steps: list[str] = []
    record, path = cpu_measure.measure_this_machine(str(tiny_model_dir), step=steps.append)
    assert path == cpu_kind.user_policy_path("TestVendor-AVX2") and path.is_file()
    assert json.loads(path.read_text()) == record
    assert not list(path.parent.glob(".*tmp"))
    kept = path.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:  # a second measurement whose write fails
        patch.setattr(atomic.os, "fsync", full_disk)
        with pytest.raises(OSError):
            cpu_measure.measure_this_machine(str(tiny_model_dir))
    # written to a temporary name, then renamed: the first policy is there whole, no temp left
    assert path.read_bytes() == kept and not list(path.parent.glob(".*tmp"))
    assert len(steps) == 3 and record["hardware_key"] == "TestVendor-AVX2"
    assert [r["texts"] for r in record["thread_scaling"]] == list(cpu_measure.PASS_SIZES)
    assert set(record["int8_bulk_texts_per_s"]) == {"static", "dynamic"}
    cosines = record["int8_mean_cosine_to_fp32"]  # each engine's vectors against fp32's
    assert set(cosines) == {"static", "dynamic"} and all(
        0.5 < c <= 1.0001 for c in cosines.values()
    )
    assert record["int8_engine"] == cpu_measure.int8_engine(
        record["int8_bulk_texts_per_s"], cosines
    )
    assert record["int8_pairs_saturate"] is static_int8.pairs_saturate()  # recorded, not chosen
    policy = cpu_kind.cpu_policy()  # followed at once: the cached policy was cleared
    assert policy.source.startswith("measured on this machine")
    assert (policy.linear_kernel, policy.one_thread_below_tokens, policy.int8_engine) == (
        record["linear_kernel"], record["one_thread_below_tokens"], record["int8_engine"],
    )  # fmt: skip


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")
def test_the_command_shows_the_policy_and_its_source(unrecorded_kind, tiny_model_dir):
    runner = CliRunner()
    shown = runner.invoke(app, ["cpu-policy"])
    assert shown.exit_code == 0, shown.output
    assert "TestVendor-AVX2" in shown.output and "default" in shown.output
    kernel = "saturating" if static_int8.pairs_saturate() else "exact"  # a word: rich wraps
    assert "static int8 kernel" in shown.output and kernel in shown.output
    measured = runner.invoke(app, ["cpu-policy", "--measure", "--model", str(tiny_model_dir)])
    assert measured.exit_code == 0, measured.output
    assert "measured now" in measured.output and "measured on this machine" in measured.output
    assert "cosine" in measured.output  # what the engine was chosen by (a word: rich wraps)
    assert cpu_kind.user_policy_path("TestVendor-AVX2").is_file()
    import dclr  # `dclr cpu-policy` from Python: the policy in use and where it comes from

    found = dclr.cpu_policy()
    assert found["hardware_key"] == "TestVendor-AVX2" and found["measured"] is None
    assert found["source"].startswith("measured on this machine")
    kept = cpu_kind.read_policy(cpu_kind.user_policy_path("TestVendor-AVX2"))
    assert (found["linear_kernel"], found["int8_engine"]) == (kept.linear_kernel, kept.int8_engine)


def test_a_broken_measurement_fails_the_command_with_its_fix(unrecorded_kind):
    user = cpu_kind.user_policy_path("TestVendor-AVX2")
    user.parent.mkdir(parents=True)
    user.write_text("{")
    result = CliRunner().invoke(app, ["cpu-policy"])
    assert result.exit_code != 0
    assert "not a readable policy" in result.output and "--measure" in result.output


def test_a_cpu_server_without_a_measured_policy_says_how_to_measure_one(unrecorded_kind):
    from dclr.cli.serving import cpu_policy_hint

    hint = cpu_policy_hint("cpu")
    assert hint is not None and "TestVendor-AVX2" in hint and "dclr cpu-policy --measure" in hint
    assert cpu_policy_hint("cuda") is None
    user = cpu_kind.user_policy_path("TestVendor-AVX2")
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"linear_kernel": "aten"}))
    cpu_kind.cpu_policy.cache_clear()
    assert cpu_policy_hint("cpu") is None


def test_a_build_without_onednn_measures_what_it_has(unrecorded_kind, tiny_model_dir, monkeypatch):
    """Where torch has no oneDNN linear (e.g. an ARM build): aten and dynamic int8 only."""
    from dclr.models import static_int8

    monkeypatch.setattr(onednn, "available", lambda: False)
    monkeypatch.setattr(static_int8, "available", lambda: False)
    record, _ = cpu_measure.measure_this_machine(str(tiny_model_dir))
    assert (record["linear_kernel"], record["int8_engine"]) == ("aten", "dynamic")
    assert record["speedups"] == {} and list(record["int8_bulk_texts_per_s"]) == ["dynamic"]
    assert cpu_measure.kernel_choice({}) == "aten"
    assert cpu_measure.int8_engine({"dynamic": 1.0}) == "dynamic"


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")
def test_a_busy_machine_is_told_its_measurement_is_skewed(
    unrecorded_kind, tiny_model_dir, monkeypatch
):
    monkeypatch.setattr(cpu_kind.os, "getloadavg", lambda: (64.0, 64.0, 64.0))  # load_average()
    result = CliRunner().invoke(app, ["cpu-policy", "--measure", "--model", str(tiny_model_dir)])
    assert result.exit_code == 0, result.output
    assert "load average 64.0 at the start" in result.output and "quiet" in result.output
