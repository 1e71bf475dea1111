"""Every table issue 46 asks of a CPU kind, in one command, on the machine it runs on.

For a kind the package has not recorded (an AVX2-only machine, say), this runs, one at a time
under the heavy-job lock (timings are never taken beside another heavy job):
  1. benchmarks/linear_kernels.py --record   the kind's kernel, thread and int8 choices;
  2. benchmarks/serve_vs_peer.py             dclr serve against infinity-emb (its own venv);
  3. benchmarks/int8_encode.py               int8 against the OpenVINO and ONNX peers (the
                                             OpenVINO venv, dclr from src/);
  4. benchmarks/int8_rounding_speed.py       whether the int8 kernel's time depends on the
                                             weights' rounding (seconds);
  5. benchmarks/serve_faults.py --quick      the fault table: 0 good requests may fail;
  6. benchmarks/cpu_targets.py               issue 46's targets judged from those tables
                                             (cpu_targets@<name>.md; measures nothing);
with the load average before and after each. Results land under benchmarks/results/ named by
`recording_name()` (the hardware key; with the CPU model appended on another model of a kind the
package has recorded, e.g. AuthenticAMD-AVX512-family25-model17, so that the first machine's
tables stay), the recording under src/dclr/models/cpu_policies/: commit both. The peers'
venvs are built by scripts/peer_venvs.sh (`--setup-peers` runs it first; versions pinned to
those of the committed tables); a missing one skips its step and says so.

    python scripts/cpu_kind_check.py --data-dir ../shared/data --setup-peers [--dry-run]

It takes the lock for each step itself: do not run it under `flock` (it would wait on itself).

Refused on kernels limited to a smaller instruction set (an emulated kind is not a recording).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = "/tmp/dclr-heavy.lock"
SETUP = ROOT / "scripts" / "peer_venvs.sh"  # the peers' venvs, pinned (--setup-peers)
INT8_VARIANTS = (
    "dclr_fp32_packed,dclr_int8_packed,dclr_int8_dynamic_packed,dclr_int8_full_packed,"
    "dclr_int8_exact_pairs_packed,dclr_int8_int7_packed,st_fp32,st_openvino_int8,ort_int8"
)


def steps(args: argparse.Namespace) -> list[tuple[str, list[str], dict[str, str], str | None]]:
    """(name, command, extra environment, why it is skipped or None), in order."""
    data = str(args.data_dir)
    py = sys.executable
    infinity = Path(args.infinity).expanduser()
    openvino = Path(args.openvino_python).expanduser()
    return [
        ("kernels", [py, "benchmarks/linear_kernels.py", "--data-dir", data, "--record"], {},
         None),
        ("serving against infinity-emb",
         [py, "benchmarks/serve_vs_peer.py", "--data-dir", data, "--infinity", str(infinity),
          "--rounds", "2"], {},
         None if infinity.is_file() else f"no {infinity} (benchmarks/README.md builds it)"),
        ("int8 against OpenVINO and ONNX",
         [str(openvino), "benchmarks/int8_encode.py", "--data-dir", data, "--repeats", "3",
          "--calibration-n", "300", "--sts", "test", "--variants", INT8_VARIANTS],
         {"PYTHONPATH": str(ROOT / "src")},
         None if openvino.is_file() else f"no {openvino} (benchmarks/README.md builds it)"),
        ("int8 time by weight rounding", [py, "benchmarks/int8_rounding_speed.py"], {}, None),
        ("fault table", [py, "benchmarks/serve_faults.py", "--quick", "--out",
                         f"benchmarks/results/serve_faults@{args.name}.json"], {}, None),
        ("issue 46's targets", [py, "benchmarks/cpu_targets.py", "--name", args.name], {}, None),
    ]  # fmt: skip


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--infinity", default="~/venvs/infinity/bin/infinity_emb")
    parser.add_argument("--openvino-python", default="~/venvs/openvino/bin/python")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--setup-peers", action="store_true",
                        help="first build the peers' venvs where missing (scripts/peer_venvs.sh, "
                             "into ~/venvs: the defaults of --infinity and --openvino-python)")  # fmt: skip
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from dclr.models.cpu_kind import cpu_model, hardware_key, isa_limits, recording_name

    limits = isa_limits()
    if limits:
        parser.error(
            f"kernels limited by {', '.join(limits)}: this would record an emulated kind; "
            "run it on a real machine of the kind, with the variables unset"
        )
    args.name = recording_name()
    print(f"CPU kind {hardware_key()} ({cpu_model()}), recorded as {args.name}, load average "
          f"{load()}", flush=True)  # fmt: skip
    if args.setup_peers:
        print(f"== peers' venvs: bash {SETUP}", flush=True)
        if not args.dry_run and subprocess.call(["bash", str(SETUP)], cwd=ROOT):
            print("failed: the peers' venvs (see above); nothing was measured", flush=True)
            return 1
    failed = []
    for name, command, env, skipped in steps(args):
        line = " ".join(f"{k}={v}" for k, v in env.items()) + " " * bool(env)
        line += shlex.join(command)
        if skipped:
            print(f"skipped: {name}: {skipped}", flush=True)
            continue
        print(f"== {name}: flock {LOCK} {line}", flush=True)
        if args.dry_run:
            continue
        start, before = time.time(), load()
        status = subprocess.call(["flock", LOCK, *command], cwd=ROOT, env={**os.environ, **env})
        print(f"== {name}: exit {status}, {time.time() - start:.0f} s, load average {before} "
              f"-> {load()}", flush=True)  # fmt: skip
        if status:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
