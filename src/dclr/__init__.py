"""dclr: train, evaluate and serve sentence encoders with debiased contrastive learning.

The public API (`dclr.api`), loaded on first use so `import dclr` stays cheap:
- encode: `load_encoder`, `encode`, `encode_file` (`dclr encode`; an `EncodedFile`),
  `SentenceEncoder`, `encode_bulk` / `read_bulk` (`dclr encode-bulk`);
- evaluate: `evaluate_sts`, `evaluate_retrieval`, `evaluate` (what `dclr eval` runs),
  `audit_corpus` (`dclr audit`), `evaluate_rte` / `evaluate_eis` (`dclr dualcse rte|eis`);
- train: `TrainConfig`, `load_config`, `train` (returns what results.json holds), `Trainer`,
  `TrainResult`;
- search and serve: `build_index`, `open_index`, `index_info` (`dclr index build`,
  `dclr search`, `dclr index info`), `serve`;
- data: `download_data`, `check_data` (`dclr data download`, `dclr data check`);
- this CPU: `cpu_policy` (`dclr cpu-policy [--measure]`);
- new methods: `Method`, `Batch`, `register`, `get_method`, `available_methods`.
Errors: `DclrError` and its kinds `InputError` (a file, its line, the fix), `ConfigError` (an
option that cannot work), `TrainingDiverged`, `NonFiniteVectors`.
"""

from typing import Any

from dclr._meta import API, __version__
from dclr.errors import ConfigError, DclrError, InputError, NonFiniteVectors, TrainingDiverged
from dclr.models.onednn_env import bound_onednn_caches

bound_onednn_caches()  # before anything imports torch: libtorch reads them when it loads

__all__ = [
    "ConfigError",
    "DclrError",
    "InputError",
    "NonFiniteVectors",
    "TrainingDiverged",
    "__version__",
    *API,
]


def __getattr__(name: str) -> Any:
    if name in API:
        import importlib

        return getattr(importlib.import_module("dclr.api"), name)
    raise AttributeError(f"module 'dclr' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the lazily loaded API, so `dir(dclr)` and `help(dclr)` list
    `encode`, `evaluate`, `train`, ... (listing them imports nothing)."""
    return sorted({*globals(), *API})
