"""benchmarks/serve_vs_peer.py's own arithmetic: dclr's model time per request from /health's
counters, its median over rounds, and the line that splits the one-client p50 (issue 46: the
AVX2 figures needed it measured by hand)."""

import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import serve_vs_peer  # noqa: E402


def test_model_ms_is_busy_seconds_per_request():
    before = {"requests": 50, "busy_s": 0.30}
    after = {"requests": 250, "busy_s": 1.58}
    assert serve_vs_peer.model_ms(before, after) == round(1000 * 1.28 / 200, 2) == 6.4
    assert serve_vs_peer.model_ms(before, before) is None  # no request: no figure


def _row(p50, model):
    return {"requests": 200, "errors": 0, "statuses": [200], "texts_per_s": 100.0,
            "latency": {"p50_ms": p50, "p95_ms": p50 + 1}, "cpu_s_per_1000_texts": 8.0,
            "share_of_bulk": 0.1, "model_ms_per_request": model}  # fmt: skip


def test_rounds_keep_the_median_and_the_report_splits_the_one_client_p50():
    rounds = [{"scenarios": {s: _row(p50, model) for s in serve_vs_peer.PLAN},
               "peak_rss_mib": 700.0} for p50, model in ((10.0, 9.0), (8.0, 7.0), (9.0, 7.5))]  # fmt: skip
    # out of order: the middle round by position (8.0, 7.0) is not the median (9.0, 7.5)
    combined = serve_vs_peer.combine(rounds)
    assert combined["scenarios"]["c1x1"]["model_ms_per_request"] == 7.5
    report = {"servers": {"dclr": combined}, "precision": "fp32", "model": "m",
              "machine": {"cpus": 2, "cpu": "c"}, "load_start": [0], "load_end": [0],
              "bulk_texts_per_s": 1000.0, "rounds": 3, "order": ["dclr"],
              "infinity_version": None}  # fmt: skip
    shown = serve_vs_peer.markdown(report)
    assert "model passes take 7.5 ms per request" in shown and "of a p50 of 9.0 ms" in shown
    assert "so 1.5 ms is spent outside the model" in shown


def test_a_run_under_isa_limits_says_it_is_emulated_and_on_which_host():
    combined = serve_vs_peer.combine([{"scenarios": {s: _row(8.0, 7.0) for s in serve_vs_peer.PLAN},
                                       "peak_rss_mib": 700.0}])  # fmt: skip
    report = {"servers": {"dclr": combined}, "precision": "fp32", "model": "m",
              "machine": {"cpus": 2, "cpu": "c", "hardware_key": "AuthenticAMD-AVX2",
                          "cpu_model": "family 25 model 17"},
              "load_start": [0], "load_end": [0], "bulk_texts_per_s": 1000.0, "rounds": 1,
              "order": ["dclr"], "infinity_version": None,
              "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2"}}  # fmt: skip
    shown = serve_vs_peer.markdown(report)
    assert "Emulated: kernels limited by ATEN_CPU_CAPABILITY=avx2 on a family 25 model 17" in shown
    assert "Emulated" not in serve_vs_peer.markdown({**report, "isa_limits": {}})


def test_the_rounds_medians_and_the_ratio_column_are_dclr_over_infinity():
    def rounds(*figures):  # (p50, texts/s) per round, out of order: the mean is not the median
        return [{"scenarios": {s: {**_row(p50, None), "texts_per_s": rate}
                               for s in serve_vs_peer.PLAN},
                 "peak_rss_mib": 700.0} for p50, rate in figures]  # fmt: skip

    dclr = serve_vs_peer.combine(rounds((9.0, 300.0), (20.0, 100.0), (10.0, 200.0)))
    peer = serve_vs_peer.combine(rounds((40.0, 50.0), (20.0, 80.0), (21.0, 60.0)))
    one = dclr["scenarios"]["c1x1"]
    assert (one["latency"]["p50_ms"], one["texts_per_s"]) == (10.0, 200.0)  # medians, not means
    report = {"servers": {"dclr": dclr, "infinity": peer}, "precision": "fp32", "model": "m",
              "machine": {"cpus": 2, "cpu": "c"}, "load_start": [0], "load_end": [0],
              "bulk_texts_per_s": 1000.0, "rounds": 3, "order": ["dclr", "infinity"],
              "infinity_version": "0.0.0"}  # fmt: skip
    rows = {line.split(" | ")[0][2:]: line
            for line in serve_vs_peer.markdown(report).splitlines() if "| dclr |" in line}  # fmt: skip
    assert rows["c1x1"].endswith("| p50 0.48× |")  # 10 / 21 ms: one client compares latency
    assert rows["c32x1"].endswith("| 3.33× |")  # 200 / 60 texts/s: the others, throughput
