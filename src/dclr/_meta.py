"""The package's version and the names of its public API (read by `dclr` and `dclr.api`)."""

__version__ = "0.1.0"

# The names `import dclr` exposes, loaded from `dclr.api` on first use.
API = (
    "Batch",
    "EncodedFile",
    "Method",
    "SentenceEncoder",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "audit_corpus",
    "available_methods",
    "build_corpus",
    "build_index",
    "build_retrieval",
    "check_data",
    "cpu_policy",
    "download_data",
    "encode",
    "encode_bulk",
    "encode_file",
    "evaluate",
    "evaluate_eis",
    "evaluate_retrieval",
    "evaluate_rte",
    "evaluate_sts",
    "get_method",
    "index_info",
    "load_config",
    "load_encoder",
    "open_index",
    "read_bulk",
    "register",
    "serve",
    "train",
)
