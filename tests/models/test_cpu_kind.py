"""The linear kernel chosen per CPU kind (issue 46 item 1): `auto` follows the recording for this
machine's hardware key, a kind without one gets the default, and a bad recording is named."""

from __future__ import annotations

import json

import pytest

from dclr.errors import InputError
from dclr.models import cpu_kind, onednn, static_int8


@pytest.fixture
def policies(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_kind, "POLICIES", tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no measurement of this user's
    monkeypatch.setattr(cpu_kind, "hardware_key", lambda: "TestVendor-AVX2")
    monkeypatch.delenv(onednn.KERNEL_ENV, raising=False)
    cpu_kind.cpu_policy.cache_clear()
    yield tmp_path
    cpu_kind.cpu_policy.cache_clear()


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN linear")
def test_auto_follows_this_kinds_recording(policies):
    assert cpu_kind.cpu_policy() == cpu_kind.DEFAULT
    assert onednn.choose_kernel() == "onednn"  # no recording: the default
    (policies / "TestVendor-AVX2.json").write_text(json.dumps({"linear_kernel": "aten"}))
    cpu_kind.cpu_policy.cache_clear()
    policy = cpu_kind.cpu_policy()
    assert policy.linear_kernel == "aten" and policy.source.startswith("measured: ")
    assert "TestVendor-AVX2.json" in policy.source
    assert onednn.choose_kernel() == "aten"
    assert onednn.choose_kernel("onednn") == "onednn"  # asked for by name: still honoured


def test_this_users_measurement_serves_a_kind_the_package_has_not_recorded(policies):
    user = cpu_kind.user_policy_path("TestVendor-AVX2")
    assert user == policies / "cache" / "dclr" / "cpu_policies" / "TestVendor-AVX2.json"
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"linear_kernel": "aten", "one_thread_below_tokens": 30}))
    policy = cpu_kind.cpu_policy()
    assert (policy.linear_kernel, policy.one_thread_below_tokens) == ("aten", 30)
    assert policy.source.startswith("measured on this machine: ") and str(user) in policy.source
    # the package's recording of the kind comes first
    (policies / "TestVendor-AVX2.json").write_text(json.dumps({"linear_kernel": "onednn"}))
    cpu_kind.cpu_policy.cache_clear()
    assert cpu_kind.cpu_policy().linear_kernel == "onednn"


def test_a_broken_user_measurement_is_named_with_its_fix(policies):
    user = cpu_kind.user_policy_path("TestVendor-AVX2")
    user.parent.mkdir(parents=True)
    user.write_text('{"linear_kernel": "onednn", ')  # cut off
    with pytest.raises(  # an InputError: `dclr encode` names it, no traceback
        InputError, match=r"(?s)TestVendor-AVX2\.json: not a readable policy.*--measure"
    ):
        cpu_kind.cpu_policy()
    user.write_text(json.dumps({"linear_kernel": "fast"}))
    cpu_kind.cpu_policy.cache_clear()
    with pytest.raises(InputError, match=r"(?s)'fast'.*dclr cpu-policy --measure.*delete the file"):
        cpu_kind.cpu_policy()


def test_a_malformed_recording_is_named(policies):
    bad = policies / "TestVendor-AVX2.json"
    bad.write_text(json.dumps({"linear_kernel": "fastest"}))
    with pytest.raises(InputError, match=r"(?s)TestVendor-AVX2\.json.*'fastest'.*--record"):
        cpu_kind.cpu_policy()


def test_the_serving_thread_threshold_follows_this_kinds_recording(policies):
    from dclr.serving.encoding import pass_threads

    assert cpu_kind.cpu_policy().one_thread_below_tokens == 128  # no recording: the default
    assert (pass_threads(100, 2), pass_threads(128, 2)) == (1, 2)
    recording = {"linear_kernel": "onednn", "one_thread_below_tokens": 40}
    (policies / "TestVendor-AVX2.json").write_text(json.dumps(recording))
    cpu_kind.cpu_policy.cache_clear()
    assert (pass_threads(39, 2), pass_threads(40, 2), pass_threads(100, 2)) == (1, 2, 2)
    (policies / "TestVendor-AVX2.json").write_text(
        json.dumps({**recording, "one_thread_below_tokens": "many"})
    )
    cpu_kind.cpu_policy.cache_clear()
    with pytest.raises(ValueError, match=r"TestVendor-AVX2\.json.*one_thread_below_tokens.*'many'"):
        cpu_kind.cpu_policy()


@pytest.mark.skipif(not static_int8.available(), reason="no oneDNN int8 linear")
def test_int8_follows_this_kinds_recorded_engine(policies, tiny_model_dir):
    from dclr.models.precision import load_inference_encoder
    from dclr.models.static_int8 import StaticQLinear

    def static(encoder) -> bool:
        return any(isinstance(m, StaticQLinear) for m in encoder.backbone.modules())

    assert cpu_kind.cpu_policy().int8_engine == "static"  # no recording: the default
    assert static(load_inference_encoder(tiny_model_dir, "mean", "int8"))
    recording = {"linear_kernel": "onednn", "int8_engine": "dynamic"}
    (policies / "TestVendor-AVX2.json").write_text(json.dumps(recording))
    cpu_kind.cpu_policy.cache_clear()
    assert not static(load_inference_encoder(tiny_model_dir, "mean", "int8"))
    (policies / "TestVendor-AVX2.json").write_text(json.dumps({**recording, "int8_engine": "x"}))
    cpu_kind.cpu_policy.cache_clear()
    with pytest.raises(ValueError, match=r"TestVendor-AVX2\.json.*int8_engine.*'x'"):
        cpu_kind.cpu_policy()


def test_the_recordings_in_the_package_are_valid():
    files = sorted(cpu_kind.POLICIES.glob("*.json"))
    assert files, "at least the kind this project was measured on is recorded"
    for path in files:
        assert cpu_kind.read_policy(path).linear_kernel in cpu_kind.KERNEL_NAMES


def test_each_packaged_recordings_choices_follow_from_its_own_figures():
    """A recording edited by hand, or made under an older rule, would steer every machine of its
    kind with choices its own figures do not support: each choice is the rule applied to them."""
    from dclr.models import cpu_measure

    for path in sorted(cpu_kind.POLICIES.glob("*.json")):
        record = json.loads(path.read_text())
        chosen = (record["linear_kernel"], record["one_thread_below_tokens"],
                  record["int8_engine"])  # fmt: skip
        assert chosen == (
            cpu_measure.kernel_choice(record["speedups"]),
            cpu_measure.one_thread_below(record["thread_scaling"]),
            cpu_measure.int8_engine(record["int8_bulk_texts_per_s"],
                                    record.get("int8_mean_cosine_to_fp32")),
        ), path.name  # fmt: skip


def test_the_hardware_key_names_vendor_and_kernel_set():
    vendor, _, capability = cpu_kind.hardware_key().rpartition("-")
    assert vendor and capability in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "NO AVX", "VSX"}


def test_another_model_of_a_recorded_kind_records_beside_it(policies, monkeypatch):
    """Zen 4 and Zen 5 are one hardware key: the second model's recording and tables get their
    own name instead of overwriting the first's, and its own recording is what it follows."""
    monkeypatch.setattr(cpu_kind, "cpu_model", lambda: "family 25 model 17")
    assert cpu_kind.recording_name() == "TestVendor-AVX2"  # nothing recorded: the kind's name
    first = {
        "linear_kernel": "onednn",
        "one_thread_below_tokens": 56,
        "cpu_model": "family 25 model 17",
    }
    (policies / "TestVendor-AVX2.json").write_text(json.dumps(first))
    assert cpu_kind.recording_name() == "TestVendor-AVX2"  # recorded on this very model
    (policies / "TestVendor-AVX2.json").write_text(
        json.dumps({**first, "cpu_model": "family 26 model 2"})
    )
    assert cpu_kind.recording_name() == "TestVendor-AVX2-family25-model17"
    policy = cpu_kind.cpu_policy()  # no recording of this model: the other model's
    assert policy.one_thread_below_tokens == 56
    assert policy.source.startswith("measured on family 26 model 2: TestVendor-AVX2.json")
    own = {**first, "one_thread_below_tokens": 25}
    (policies / "TestVendor-AVX2-family25-model17.json").write_text(json.dumps(own))
    cpu_kind.cpu_policy.cache_clear()
    assert cpu_kind.cpu_policy().one_thread_below_tokens == 25
    assert "TestVendor-AVX2-family25-model17.json" in cpu_kind.cpu_policy().source


def test_this_users_measurement_comes_before_another_models_recording(policies, monkeypatch):
    monkeypatch.setattr(cpu_kind, "cpu_model", lambda: "family 25 model 17")
    other = {
        "linear_kernel": "onednn",
        "one_thread_below_tokens": 56,
        "cpu_model": "family 26 model 2",
    }
    (policies / "TestVendor-AVX2.json").write_text(json.dumps(other))
    user = cpu_kind.user_policy_path("TestVendor-AVX2")
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"linear_kernel": "aten", "one_thread_below_tokens": 30}))
    policy = cpu_kind.cpu_policy()
    assert (policy.linear_kernel, policy.one_thread_below_tokens) == ("aten", 30)
    assert policy.source.startswith("measured on this machine: ")


def test_a_recording_that_names_no_model_is_the_kinds(policies, monkeypatch):
    monkeypatch.setattr(cpu_kind, "cpu_model", lambda: "family 25 model 17")
    (policies / "TestVendor-AVX2.json").write_text(json.dumps({"linear_kernel": "aten"}))
    assert cpu_kind.recording_name() == "TestVendor-AVX2"
    (policies / "TestVendor-AVX2.json").write_text("[1, 2]")  # not an object: no model named
    assert cpu_kind.recording_name() == "TestVendor-AVX2"


def test_the_model_tag_is_a_file_name(monkeypatch):
    monkeypatch.setattr(cpu_kind, "cpu_model", lambda: "family 26 model 2")
    assert cpu_kind.model_tag() == "family26-model2"


def test_an_emulated_table_is_named_so_whatever_the_benchmark(policies, monkeypatch):
    """Under instruction-set limits every benchmark's default table name says "-emulated", so an
    emulated run never writes where the real machine of that kind's table belongs."""
    for name in cpu_kind.ISA_LIMITS:
        monkeypatch.delenv(name, raising=False)
    assert cpu_kind.table_name() == cpu_kind.recording_name() == "TestVendor-AVX2"
    monkeypatch.setattr(cpu_kind, "cpu_model", lambda: "family 25 model 17")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert cpu_kind.table_name() == "TestVendor-AVX2-emulated-on-family25-model17"
    assert cpu_kind.recording_name() == "TestVendor-AVX2"  # the policy lookup is not renamed


def test_two_hosts_emulating_one_kind_write_two_tables(policies, monkeypatch):
    """The emulated kind's speeds are the host's cores under its kernels: a Zen 5 host's AVX2 table
    and a Zen 4 host's are two measurements, and neither overwrites the other."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    names = set()
    for model in ("family 26 model 2", "family 25 model 17"):
        monkeypatch.setattr(cpu_kind, "cpu_model", lambda model=model: model)
        names.add(cpu_kind.table_name())
    assert names == {"TestVendor-AVX2-emulated-on-family26-model2",
                     "TestVendor-AVX2-emulated-on-family25-model17"}  # fmt: skip
