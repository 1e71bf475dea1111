"""The CPU kind this process runs on, and the inference policy measured for that kind.

`hardware_key()` names the kind: the CPU vendor and the kernel set torch dispatches to (e.g.
AuthenticAMD-AVX512, AuthenticAMD-AVX2). Float results and the fastest kernels differ between
kinds: the trajectory recordings are kept per key (scripts/check_trajectories.py), and so is the
choice of fp32 linear kernel.

`cpu_policy()` is the policy for this machine's kind: which fp32 linear kernel an inference
encoder runs on (oneDNN with packed weights, `dclr.models.onednn`, or PyTorch's BLAS, "aten"),
from how many tokens a pass is worth a second intra-op thread, and which int8 engine
`--precision int8` runs (static on oneDNN, or dynamic on fbgemm: their int8 kernels dispatch
separately, and on a CPU without VNNI oneDNN's may lose).
`python benchmarks/linear_kernels.py --data-dir ../shared/data --record` measures both kernels on
the machine it runs on (the MiniLM encoder: one text at 1 and 2 threads, a bulk pass, passes of
1-64 texts on 1 and 2 threads, a bulk pass at each int8 engine) and writes
`cpu_policies/<recording_name>.json` beside this module: `<hardware_key>.json` for the first
machine of a kind, `<hardware_key>-family<F>-model<M>.json` for another CPU model of that kind
(Zen 4 and Zen 5 are both AuthenticAMD-AVX512 and differ in speed). For a machine the package has
no recording of, `dclr cpu-policy --measure` runs the same measurements
(`dclr.models.cpu_measure`) on the user's machine and keeps the result in the user's cache
(`user_policy_path`), which comes before the package's recording of another model of the kind; a
kind with neither gets `DEFAULT`. `source` says which. The files are data (a kernel name, a token
count and the figures that chose them), read as JSON, never executed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from dclr.data.paths import user_cache_root
from dclr.errors import InputError

POLICIES = Path(__file__).with_name("cpu_policies")
KERNEL_NAMES = ("onednn", "aten")
INT8_ENGINES = ("static", "dynamic")


@dataclass(frozen=True)
class CpuPolicy:
    """linear_kernel: "onednn" or "aten"; one_thread_below_tokens: a pass of fewer tokens runs on
    one intra-op thread (`dclr.serving.encoding.pass_threads`); int8_engine: "static" or
    "dynamic", what `--precision int8` runs (`dclr.models.precision.quantize_int8`); source:
    where they come from."""

    linear_kernel: str
    source: str
    one_thread_below_tokens: int = 128
    int8_engine: str = "static"


# No measurement for this kind: oneDNN, which won at every size measured on AVX512 (see
# dclr.models.onednn), where the build has it; one thread below 128 tokens, measured in serving
# on the first AVX512 machine (sequential one-text requests: p50 16.1 ms on one thread, 20.2 ms
# on two; docs/performance.md).
DEFAULT = CpuPolicy("onednn", "default: no measurement recorded for this CPU kind")


def _first_cpu() -> dict[str, str]:
    """The fields of /proc/cpuinfo's first processor (empty where there is none)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            name, _, value = line.partition(":")
            fields[name.strip()] = value.strip()
    return fields


def hardware_key() -> str:
    """CPU vendor and the kernel set torch dispatches to (e.g. AuthenticAMD-AVX512)."""
    import torch

    vendor = _first_cpu().get("vendor_id") or platform.processor() or platform.machine()
    return f"{vendor}-{torch.backends.cpu.get_cpu_capability()}"


def cpu_model() -> str:
    """The CPU's family and model numbers (e.g. "family 26 model 2", AMD's Zen 5): machines of one
    hardware key can differ in speed; recordings name the one they were measured on."""
    fields = _first_cpu()
    return f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"


def model_tag() -> str:
    """cpu_model() as part of a file name (e.g. "family25-model17")."""
    return cpu_model().replace("family ", "family").replace(" model ", "-model")


def recording_name() -> str:
    """The name this machine's recordings go under (its kind's policy in cpu_policies/, its
    benchmark tables in benchmarks/results/): the hardware key for the first machine of a kind
    the package recorded, or of a kind it has none of; the key and the CPU model (e.g.
    AuthenticAMD-AVX512-family25-model17) for another model of a recorded kind, so that its tables
    stand beside the first machine's instead of over them."""
    key = hardware_key()
    recorded = recorded_model(policy_path(key))
    if recorded is None or recorded == cpu_model():
        return key
    return f"{key}-{model_tag()}"


def table_name() -> str:
    """The name this machine's benchmark tables go under: `recording_name()`; under
    instruction-set limits (`isa_limits`) the kind emulated, "-emulated-on-" and the host's CPU
    model (e.g. AuthenticAMD-AVX2-emulated-on-family25-model17). Such a table is evidence about the
    kind it emulates, never that kind's own, and its speeds are the host's cores under that kind's
    kernels: two hosts emulating one kind differ (Zen 5's AVX2 arithmetic is wider than Zen 4's),
    so each host's table stands beside the other's."""
    if isa_limits():
        return f"{hardware_key()}-emulated-on-{model_tag()}"
    return recording_name()


def recorded_model(path: Path) -> str | None:
    """The CPU model a packaged recording names (None: no file, or one that names none)."""
    with contextlib.suppress(OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return json.loads(path.read_text(encoding="utf-8")).get("cpu_model")
    return None


def cpu_name() -> str:
    """The CPU's model name (e.g. "AMD EPYC"), or the platform's word for it."""
    return _first_cpu().get("model name") or platform.processor() or platform.machine()


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, to two decimals: what every CPU benchmark records
    at its start and end (a timing is read beside the machine's load)."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_description() -> str:
    """The CPU's model name, its core count and the kernel set torch dispatches to."""
    import torch

    return f"{cpu_name()}, {os.cpu_count()} cores, {torch.backends.cpu.get_cpu_capability()}"


# Variables that limit torch's, oneDNN's and MKL's kernels to a smaller instruction set than the
# CPU has (benchmarks/README.md, "Kernels limited to AVX2"): hardware_key() then names the limit,
# not the machine.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_limits() -> dict[str, str]:
    """The instruction-set limits set in this process's environment (empty on a plain run)."""
    return {name: os.environ[name] for name in ISA_LIMITS if os.environ.get(name)}


def machine_fields() -> dict:
    """What a CPU benchmark's report names its machine by: {"cpu": cpu_description(),
    "hardware_key", "cpu_model", "isa_limits"} (the load averages are the caller's, read at its
    start and end)."""
    return {"cpu": cpu_description(), "hardware_key": hardware_key(), "cpu_model": cpu_model(),
            "isa_limits": isa_limits()}  # fmt: skip


def policy_path(key: str) -> Path:
    return POLICIES / f"{key}.json"


def user_policy_path(key: str) -> Path:
    """Where `dclr cpu-policy --measure` keeps this user's measurement of a CPU kind:
    $XDG_CACHE_HOME/dclr/cpu_policies/<key>.json (~/.cache when unset)."""
    return user_cache_root() / "cpu_policies" / f"{key}.json"


PACKAGED_FIX = "record it again with benchmarks/linear_kernels.py --record"
USER_FIX = "measure it again with `dclr cpu-policy --measure`, or delete the file"


def read_policy(
    path: Path, fix: str = PACKAGED_FIX, origin: str = "measured", shown: str | None = None
) -> CpuPolicy:
    """A recorded policy; a malformed file is an error naming it and `fix`. Its `source` is
    `origin`, then `shown` (the file's name when None) and the date it was measured."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a readable policy ({err})", path=path, fix=fix) from err
    kernel = record.get("linear_kernel") if isinstance(record, dict) else None
    if kernel not in KERNEL_NAMES:
        raise InputError(
            f"linear_kernel must be one of {', '.join(KERNEL_NAMES)}, got {kernel!r}",
            path=path,
            fix=fix,
        )
    below = record.get("one_thread_below_tokens", DEFAULT.one_thread_below_tokens)
    if not isinstance(below, int) or isinstance(below, bool) or below < 0:
        raise InputError(
            f"one_thread_below_tokens must be a whole number >= 0, got {below!r}",
            path=path,
            fix=fix,
        )
    engine = record.get("int8_engine", DEFAULT.int8_engine)
    if engine not in INT8_ENGINES:
        raise InputError(
            f"int8_engine must be one of {', '.join(INT8_ENGINES)}, got {engine!r}",
            path=path,
            fix=fix,
        )
    source = f"{origin}: {shown or path.name} ({record.get('measured', 'no date')})"
    return CpuPolicy(kernel, source, below, engine)


@functools.cache
def cpu_policy() -> CpuPolicy:
    """The policy for this machine's CPU kind: the package's recording of this CPU model, else
    this user's measurement (`dclr cpu-policy --measure`), else the package's recording of the
    kind made on another model, else DEFAULT."""
    key = hardware_key()
    own = policy_path(recording_name())
    if own.is_file():
        return read_policy(own)
    user = user_policy_path(key)
    if user.is_file():
        return read_policy(user, USER_FIX, "measured on this machine", str(user))
    if policy_path(key).is_file():
        return read_policy(
            policy_path(key), origin=f"measured on {recorded_model(policy_path(key))}"
        )
    return DEFAULT
