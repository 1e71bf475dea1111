"""benchmarks/int8_rounding_speed.py: every weight rounding is timed on every (shape, rows), its
ratio is to full range, and a table measured under an ISA limit says it is emulated."""

import sys

import pytest
from helpers import REPO_ROOT

from dclr.models import static_int8

pytestmark = pytest.mark.skipif(not static_int8.available(), reason="no oneDNN int8 linear")
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import int8_rounding_speed  # noqa: E402


def test_each_rounding_timed_on_each_shape_and_row_count():
    rows = int8_rounding_speed.measure({"tiny": (16, 8)}, rows=(1, 5), rounds=2, calls=1)
    assert [(r["shape"], r["rows"]) for r in rows] == [("tiny", 1), ("tiny", 5)]
    for r in rows:
        assert set(r["us"]) == set(r["vs_full"]) == set(static_int8.WEIGHT_MODES)
        assert all(t > 0 for t in r["us"].values())
        assert r["vs_full"]["full"] == 1.0
        ratio = r["us"]["int7"] / r["us"]["full"]  # of the rounded times: close, not equal
        assert r["vs_full"]["int7"] == pytest.approx(ratio, rel=0.05)


def test_the_table_names_the_kernel_and_an_emulation():
    report = {
        "cpu": "AMD EPYC", "hardware_key": "AuthenticAMD-AVX2", "cpu_model": "family 26 model 2",
        "torch": "2.13.0", "threads": 2, "rounds": 3, "pairs_saturate": True,
        "load_start": [1.0], "load_end": [1.0], "isa_limits": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
        "layers": [{"shape": "tiny", "rows": 1, "us": {"full": 2.0, "exact_pairs": 2.2, "int7": 1.8},
                    "vs_full": {"full": 1.0, "exact_pairs": 1.1, "int7": 0.9}}],
    }  # fmt: skip
    text = int8_rounding_speed.markdown(report)
    assert "int8 kernel saturating (no VNNI)" in text
    assert "| tiny | 1 | 2.0 | 2.2 | 1.8 | 1.1× | 0.9× |" in text
    assert "Emulated: kernels limited by ONEDNN_MAX_CPU_ISA=AVX2" in text
    plain = int8_rounding_speed.markdown({**report, "isa_limits": {}, "pairs_saturate": False})
    assert "Emulated" not in plain and "exact (VNNI)" in plain
