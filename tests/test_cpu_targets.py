"""benchmarks/cpu_targets.py: issue 46's targets judged from a CPU kind's tables, each figure
the hand arithmetic of made-up results, each bound tried on both sides."""

import json
import sys

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import cpu_targets  # noqa: E402


def server(many: float, p50: float, bulk: float, refused: int, peak: float) -> dict:
    return {"peak_rss_mib": peak, "scenarios": {
        "c32x1": {"texts_per_s": many, "errors": 0, "latency": {"p50_ms": 999.0}},
        "c1x1": {"texts_per_s": 1.0, "errors": 0, "latency": {"p50_ms": p50}},
        "c8x64": {"texts_per_s": bulk, "errors": refused, "latency": {"p50_ms": 999.0}}}}  # fmt: skip


def test_the_serving_targets_are_dclr_over_the_peer():
    serve = {"servers": {"dclr": server(300.0, 12.0, 450.0, 0, 700.0),
                         "infinity": server(200.0, 24.0, 300.0, 0, 800.0)}}  # fmt: skip
    rows = cpu_targets.serving_rows(serve)
    assert [(m, v) for _, m, v in rows] == [
        ("1.50×", "met"), ("0.50×", "met"), ("1.50×, 0 refused or failed", "met"),
        ("700 MiB against 800 MiB", "met"),
    ]  # fmt: skip
    serve["servers"]["dclr"] = server(290.0, 19.0, 600.0, 3, 801.0)
    rows = cpu_targets.serving_rows(serve)
    assert [(m, v) for _, m, v in rows] == [
        ("1.45×", "missed"), ("0.79×", "missed"), ("2.00×, 3 refused or failed", "missed"),
        ("801 MiB against 800 MiB", "missed"),
    ]  # fmt: skip
    del serve["servers"]["infinity"]
    assert {v for _, _, v in cpu_targets.serving_rows(serve)} == {"—"}


def int8_result(rates: dict, sts: dict) -> dict:
    return {"sentences_per_s": rates, "sts": {k: {"STS12": 0.0, "avg": v} for k, v in sts.items()}}


def test_the_encode_targets_read_the_engine_the_kind_runs():
    rates = {
        "dclr_fp32_packed": 500.0,
        "dclr_int8_packed": 1000.0,
        "dclr_int8_dynamic_packed": 700.0,
        "st_fp32": 250.0,
        "st_openvino_int8": 800.0,
    }
    sts = {"dclr_fp32_packed": 78.87, "dclr_int8_packed": 78.90,
           "dclr_int8_dynamic_packed": 78.43, "st_openvino_int8": 78.80}  # fmt: skip
    rows = cpu_targets.encode_rows(int8_result(rates, sts), "static")
    assert [(m, v) for _, m, v in rows] == [
        ("1.25×, STS 78.900 against 78.800", "met"), ("2.00×", "met"), ("+0.03", "met"),
        ("2.00×", "met"),
    ]  # fmt: skip
    dynamic = cpu_targets.encode_rows(int8_result(rates, sts), "dynamic")
    assert "dclr_int8_dynamic_packed" in dynamic[0][0]
    assert [(m, v) for _, m, v in dynamic[:3]] == [
        ("0.88×, STS 78.430 against 78.800", "missed"), ("1.40×", "missed"), ("-0.44", "missed"),
    ]  # fmt: skip
    # faster than the peer but below its STS: missed; no peer measured: not judged
    below = cpu_targets.encode_rows(int8_result(rates, {**sts, "st_openvino_int8": 79.0}))
    assert below[0][2] == "missed"
    no_peer = {k: v for k, v in rates.items() if k != "st_openvino_int8"}
    assert cpu_targets.encode_rows(int8_result(no_peer, sts))[0][2] == "—"


def test_one_failed_good_request_misses_the_fault_target():
    faults = {"model": "m", "poison": {"every_good_request_200": True},
              "slow_headers": {"good_failed": 0, "every_good_request_200": True}}  # fmt: skip
    assert cpu_targets.fault_rows(faults)[0][1:] == ("0 failed", "met")
    faults["idle_sockets"] = {"good_failed": 1, "every_good_request_200": False}
    assert cpu_targets.fault_rows(faults)[0][1:] == (
        "1 failed; not all 200 in idle_sockets",
        "missed",
    )
    assert cpu_targets.fault_rows(None)[0][2] == "—"


def test_the_command_writes_the_table_of_a_recording(tmp_path, monkeypatch, capsys):
    from dclr.models import cpu_kind

    monkeypatch.setattr(cpu_targets, "RESULTS", tmp_path)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "Kind-X.json").write_text(
        json.dumps({"linear_kernel": "aten", "int8_engine": "dynamic"})
    )
    monkeypatch.setattr(cpu_kind, "POLICIES", policies)
    rates = {"dclr_fp32_packed": 500.0, "dclr_int8_dynamic_packed": 800.0}
    (tmp_path / "int8_encode@Kind-X-family1-model2.json").write_text(
        json.dumps(int8_result(rates, {}))
    )
    assert cpu_targets.main(["--name", "Kind-X-family1-model2"]) == 0
    text = (tmp_path / "cpu_targets@Kind-X-family1-model2.md").read_text()
    assert text == capsys.readouterr().out
    assert "| int8 ≥ 1.5× dclr fp32 | 1.60× | met |" in text  # the kind's dynamic engine
    assert "| fault table: 0 good requests failed | — (no serve_faults table) | — |" in text
