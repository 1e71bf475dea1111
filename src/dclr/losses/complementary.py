"""The complementary model of DCLR: a frozen encoder that scores in-batch negatives.

It is never a submodule of the trained encoder: it is frozen (`requires_grad_(False)`, `eval()`,
run under `no_grad`) and passed to the loss. Three ways to get its cosine similarities:

* `CachedComplementary` (default): its embeddings of the whole training corpus are computed once
  and stored as a memory-mapped fp16 `.npy` beside a JSON fingerprint of the corpus and model, so
  a DCLR step costs no extra forward pass. Under torchrun the ranks share that pass (each
  encodes every W-th of its batches; `encode_rows_across_ranks`) and rank 0 writes the file.
* `PlannedComplementary`: the same vectors for only the rows the run samples, encoded up front
  from the batch plan (`prefill`, called by the loop) or, for a row the plan did not name, when a
  step first needs it. Both caches encode with `by_length` batches (one token length per batch,
  see `SentenceEncoder.encode_poolers`), so a row's vector does not depend on which rows are
  encoded with it: the planned and whole-corpus caches hold the same bits and a run trains the
  same trajectory with either (`tests/losses/test_planned_complementary.py`). On a corpus much
  larger than the run's steps x batch (a user's own text) it encodes a fraction of it.
* `OnTheFlyComplementary`: encodes each batch (eval mode, no dropout).
* `TwoViewComplementary`: the released code's structure, two dropout views per step.
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from dclr import atomic
from dclr import distributed as dist
from dclr.data.corpus import TextFileCorpus
from dclr.errors import InputError
from dclr.jsonfile import read_json
from dclr.losses.simcse import cosine_matrix
from dclr.models.encoder import SentenceEncoder


class Complementary(Protocol):
    def similarities(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, n) cosine similarities among the global batch (corpus indices / their texts)."""
        ...

    def anchor_vectors(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, d) its vectors h_i^C of the global batch (what noise negatives are scored against)."""
        ...


def host_to(rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host rows on `device`; to a GPU through pinned memory, without waiting for its queue
    (a pageable copy would make the host wait for every kernel queued before it)."""
    if device.type != "cuda":
        return rows.to(device)
    return rows.pin_memory().to(device, non_blocking=True)


def freeze(encoder: SentenceEncoder) -> SentenceEncoder:
    encoder.requires_grad_(False)
    return encoder.eval()


def corpus_fingerprint(corpus: Sequence[str]) -> dict[str, object]:
    """What identifies a corpus: its file (path, size, content hash) or its sentences' hash."""
    digest = hashlib.sha256()
    if isinstance(corpus, TextFileCorpus):
        with corpus.path.open("rb") as fh:
            while block := fh.read(1 << 22):  # 4 MiB reads
                digest.update(block)
        return {
            "source": str(corpus.path.resolve()),
            "bytes": corpus.path.stat().st_size,
            "sha256": digest.hexdigest(),
            "sentences": len(corpus),
        }
    for s in corpus:
        digest.update(s.encode("utf-8") + b"\n")
    return {
        "source": getattr(corpus, "name", "list"),
        "sha256": digest.hexdigest(),
        "sentences": len(corpus),
    }


def default_cache_root() -> Path:
    from dclr.data.paths import default_cache_dir

    return default_cache_dir().parent / "complementary"


# Sentences per forward when the cache is built (the shared start pass uses the same batches):
# every forward holds exactly this many sentences of one token length (`by_length`), so a short
# last batch of a length is filled up; 64 keeps that filler small for a few thousand sampled rows
# (~30 lengths x 32 on average) and the matrix products large enough (64 x length tokens) to run
# near full speed.
CACHE_BATCH_SIZE = 64
# How the cache's batches are formed, recorded in its metadata: a cache built with other batches
# (before they held one token length each, or with another size: its bits differ by float
# rounding) is rebuilt, not mixed with rows encoded now.
CACHE_BATCHING = f"by_length/{CACHE_BATCH_SIZE}"


def encode_rows(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    max_length: int,
    show_progress: bool,
    label: str,
    shared: bool = False,
) -> np.ndarray:
    """(n, d) fp16 unit vectors, as every complementary cache stores them (one length a batch).

    `shared` (under torchrun, every rank calling with the same `sentences`): the ranks split the
    work and every rank gets every vector (`encode_rows_across_ranks`)."""
    if shared and dist.world_size() > 1:
        return encode_rows_across_ranks(encoder, sentences, max_length, show_progress, label)
    vectors = encoder.encode(
        list(sentences),
        batch_size=CACHE_BATCH_SIZE,
        max_length=max_length,
        normalize=True,
        show_progress=show_progress,
        progress_label=label,
        by_length=True,
    )
    return vectors.astype(np.float16)


def encode_rows_across_ranks(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    max_length: int,
    show_progress: bool,
    label: str,
) -> np.ndarray:
    """`encode_rows` with the work split among the ranks: the batches of one process's pass
    (`length_batches`, one token length each, `CACHE_BATCH_SIZE` slots) are dealt out, rank r
    taking every W-th (longest first, so the shares cost about the same), and the vectors
    gathered to every rank (`dist.assemble_rows`). Each batch is the one a single process
    forwards, so every vector is the single process's bit for bit on the same kind of device.
    To deal the batches every rank needs every sentence's token count: each tokenises 1/W of
    the (distinct) sentences and the counts are gathered, then it tokenises its own batches'
    sentences: 2/W of the tokenising a rank, not all of it (measured ~25k sentences/s for
    MiniLM's tokenizer on 2 AVX512 EPYC cores: ~40 s for 1M). Every rank must call it with the
    same `sentences`."""
    from dclr.models.encoder import batches_of_lengths

    distinct = list(dict.fromkeys(sentences))
    rank, world = dist.rank(), dist.world_size()
    part = np.arange(rank * len(distinct) // world, (rank + 1) * len(distinct) // world)
    counted = encoder.token_ids([distinct[i] for i in part], max_length)
    counts = np.array([len(x) for x in counted], dtype=np.int64)
    lengths = dist.assemble_rows(part, counts, len(distinct))
    batches = batches_of_lengths(lengths, CACHE_BATCH_SIZE, by_length=True)
    mine = batches[rank::world]
    # in the order of the whole pass: `length_batches` over these rows deals exactly `mine`
    rows = np.concatenate([b[b >= 0] for b in mine]) if mine else np.zeros(0, dtype=np.int64)
    ids = encoder.token_ids([distinct[i] for i in rows], max_length)
    share = f"{label}: rank {rank}'s {len(mine):,} of {len(batches):,} batches"
    pooler = encoder.eval_pooler or encoder.pooler  # what `encode` pools with
    local = np.zeros((0, encoder.hidden_size), dtype=np.float16)
    if rows.size:  # more ranks than batches leaves some with none
        vectors = encoder.encode_ids_poolers(
            ids,
            (pooler,),
            batch_size=CACHE_BATCH_SIZE,
            normalize=True,
            show_progress=show_progress,
            progress_label=share,
            by_length=True,
        )
        local = vectors[pooler].astype(np.float16)
    everything = dist.assemble_rows(rows, local, len(distinct))
    index = {s: i for i, s in enumerate(distinct)}
    return everything[[index[s] for s in sentences]]


def _default_path(expected: dict[str, object]) -> Path:
    """The shared cache file of a metadata record (`~/.cache/dclr/complementary/<key>.npy`)."""
    key = hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()[:20]
    return default_cache_root() / f"{key}.npy"


def _legacy_of(found: dict[str, object], expected: dict[str, object]) -> bool:
    """`found` is `expected` as written before the record held the weights' digest: the same
    in every field but `model`, which is the bare spec the identity starts with."""
    model = str(expected["model"])
    if found.get("model") == model or " (weights sha256 " not in model:
        return False
    bare = model.split(" (weights sha256 ")[0]
    return found.get("model") == bare and {**found, "model": model} == expected


def model_identity(spec: str) -> str:
    """The complementary model as its cache records it: `spec`, and the digest of its
    .safetensors files (a folder, `python-package:NAME`, or a hub id's snapshot in the local
    Hugging Face cache), so a folder retrained in place, a package upgraded or a hub model
    updated is another model and never reuses the old vectors. A hub id not in the local cache
    is recorded as named."""
    digest = weights_digest(spec)
    return spec if digest is None else f"{spec} (weights sha256 {digest})"


def weights_digest(spec: str) -> str | None:
    """16 hex digits of sha256 over the .safetensors files of the model `spec` names when it is
    on disk (a folder, `python-package:NAME`, a hub id's snapshot in the local Hugging Face
    cache); None for a hub id not in the cache or a folder without them."""
    from dclr.models.resolve import local_folder

    folder = local_folder(spec)
    files = sorted(folder.rglob("*.safetensors")) if folder is not None else []
    if not files:
        return None
    stats = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _weights_digest(folder, stats)[:16]


@functools.lru_cache(maxsize=16)
def _weights_digest(folder: Path, stats: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 over the weight files' names and contents; `stats` (path, size, mtime) keys the
    memo, so a file rewritten in the same process is read again."""
    digest = hashlib.sha256()
    for name, _, _ in stats:
        digest.update(Path(name).relative_to(folder).as_posix().encode())
        digest.update(atomic.sha256_file(name).encode())
    return digest.hexdigest()


class CachedComplementary:
    """Cosines from precomputed, memory-mapped fp16 embeddings of the training corpus."""

    def __init__(self, vectors: np.ndarray, device: torch.device | str = "cpu") -> None:
        self.vectors = vectors  # (N, d) fp16, memory-mapped
        self.device = torch.device(device)

    @classmethod
    def build_or_load(
        cls,
        cache: Path | None,
        encoder: SentenceEncoder,
        corpus: Sequence[str],
        model_id: str,
        max_length: int,
        device: torch.device | str = "cpu",
        show_progress: bool = True,
    ) -> CachedComplementary:
        """Load `cache` if it matches (corpus, model, pooler, max_length), else build it.

        With `cache=None` the file is `~/.cache/dclr/complementary/<key>.npy`, keyed by a hash of
        that fingerprint, so runs on the same corpus and complementary model share it.

        Under torchrun every rank calls it: rank 0 says whether the cache is there, the ranks
        encode the corpus together (`encode_rows_across_ranks`), rank 0 writes the file and every
        rank loads it.
        """
        cache, expected = cls.locate(cache, encoder.pooler, corpus, model_id, max_length)
        if dist.rank0_value(lambda: cls.exists(cache)):
            return cls.load(cache, expected, device)
        freeze(encoder)
        label = "encode corpus (complementary model, once)"
        vectors = encode_rows(encoder, corpus, max_length, show_progress, label, shared=True)
        if dist.rank() == 0:
            cls.save(cache, vectors, expected)
        dist.barrier()
        return cls.load(cache, expected, device)

    @staticmethod
    def locate(
        cache: Path | None,
        pooler: str,
        corpus: Sequence[str],
        model_id: str,
        max_length: int,
    ) -> tuple[Path, dict[str, object]]:
        """(the cache file, the metadata it must hold) for this corpus and model (`model_id`
        with its weights' digest when on disk: `model_identity`)."""
        expected = {
            "corpus": corpus_fingerprint(corpus),
            "model": model_identity(model_id),
            "pooler": pooler,
            "max_length": max_length,
            "batching": CACHE_BATCHING,
        }
        if cache is None:
            cache = _default_path(expected)
            legacy = _default_path({**expected, "model": model_id})
            if not CachedComplementary.exists(cache) and CachedComplementary.exists(legacy):
                cache = legacy  # built before the key held the weights: `load` upgrades it
        return cache, expected

    @staticmethod
    def exists(cache: Path) -> bool:
        return cache.exists() and cache.with_suffix(".json").exists()

    @staticmethod
    def save(cache: Path, vectors: np.ndarray, expected: dict[str, object]) -> None:
        """Write the (N, d) unit vectors as fp16 (atomically), then the metadata."""
        cache.parent.mkdir(parents=True, exist_ok=True)
        # written under a temp name of this process (write_array): shards may build at once
        with atomic.storage_guard(cache, needed=vectors.size * 2):  # fp16
            atomic.write_array(cache, vectors.astype(np.float16, copy=False))
        atomic.write_text(cache.with_suffix(".json"), json.dumps(expected, indent=2) + "\n")

    @classmethod
    def load(
        cls, cache: Path, expected: dict[str, object], device: torch.device | str = "cpu"
    ) -> CachedComplementary:
        meta_path = cache.with_suffix(".json")
        found = read_json(meta_path, "delete the cache (and its .json) to rebuild it")
        if _legacy_of(found, expected):
            warnings.warn(
                f"{cache}: a complementary cache written before dclr recorded the model's "
                "weights; it is taken as this model's and its record upgraded (delete it to "
                "rebuild if the model folder was retrained, or the hub model updated, since)",
                UserWarning,
                stacklevel=2,
            )
            atomic.write_text(meta_path, json.dumps(expected, indent=2) + "\n")
            found = expected
        if found != expected:
            diff = [k for k in expected if found.get(k) != expected[k]]
            detail = "; ".join(
                f"{k}: cache has {found.get(k)!r}, run needs {expected[k]!r}" for k in diff
            )
            raise InputError(
                f"complementary cache does not match this run ({detail})",
                path=cache,
                fix="delete the cache (and its .json) to rebuild it, or point "
                "complementary_cache at the cache built for this corpus and model",
            )
        vectors = np.load(cache, mmap_mode="r")
        rows = int(found["corpus"]["sentences"])
        if vectors.shape[0] != rows:
            raise InputError(
                f"cache holds {vectors.shape[0]} rows for {rows} sentences",
                path=cache,
                fix="delete it to rebuild",
            )
        return cls(vectors, device)

    def anchor_vectors(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, d) the cached vectors of the batch sentences."""
        rows = torch.from_numpy(np.asarray(self.vectors[indices.cpu().numpy()], dtype=np.float32))
        return host_to(rows, self.device)  # (n, d), unit norm up to fp16 rounding

    def similarities(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        rows = self.anchor_vectors(indices, sentences)
        return cosine_matrix(rows, rows)


class PlannedComplementary:
    """The cache's vectors of only the rows a run samples (in memory; module docstring).

    `prefill(rows)` encodes the named rows up front (the loop passes every row of its batch plan);
    a row not filled yet is encoded when a step first asks for it. Either way each vector equals
    the whole-corpus cache's row bit for bit, so the trajectory does not depend on the route.

    Given `reload` (how to build the encoder again), `prefill` lets the encoder go once the
    plan's rows are in: its weights and buffers (~90 MB for MiniLM, ~440 MB for BERT-base) are
    not held through training for rows the plan already named; a row it missed reloads it.
    """

    def __init__(
        self,
        encoder: SentenceEncoder,
        corpus: Sequence[str],
        max_length: int,
        device: torch.device | str = "cpu",
        reload: Callable[[], SentenceEncoder] | None = None,
    ) -> None:
        self.encoder: SentenceEncoder | None = freeze(encoder)
        self._reload = reload
        self.corpus = corpus
        self.max_length = max_length
        self.device = torch.device(device)
        self._slot = np.full(len(corpus), -1, dtype=np.int64)  # row -> index in _vectors
        self._vectors = np.empty((0, encoder.hidden_size), dtype=np.float16)

    @property
    def filled(self) -> int:
        """Rows encoded so far."""
        return int(self._vectors.shape[0])

    def prefill(self, rows: Sequence[int] | np.ndarray, show_progress: bool = True) -> None:
        """Encode every row of `rows` not encoded yet (one pass, batches of one length), then let
        the encoder go if it can be reloaded. Under torchrun every rank calls it with the same
        `rows` (the run's plan), and the ranks share the pass (`encode_rows_across_ranks`)."""
        self._fill(np.asarray(rows, dtype=np.int64), show_progress, shared=True)
        if self._reload is not None:
            self.encoder = None

    def _fill(self, rows: np.ndarray, show_progress: bool, shared: bool = False) -> None:
        missing = np.unique(rows[self._slot[rows] < 0])
        if missing.size == 0:
            return
        if self.encoder is None:
            assert self._reload is not None  # only a reloadable encoder is let go
            self.encoder = freeze(self._reload().to(self.device))
        label = "encode the rows the run samples (complementary model)"
        texts = [self.corpus[int(i)] for i in missing]
        vectors = encode_rows(self.encoder, texts, self.max_length, show_progress, label, shared)
        self._slot[missing] = self._vectors.shape[0] + np.arange(missing.size)
        self._vectors = np.concatenate([self._vectors, vectors])

    def anchor_vectors(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, d) the batch rows' vectors (encoded now if the plan did not name them)."""
        rows = indices.cpu().numpy().astype(np.int64)
        self._fill(rows, show_progress=False)
        found = self._vectors[self._slot[rows]]
        return host_to(torch.from_numpy(np.asarray(found, dtype=np.float32)), self.device)

    def similarities(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        rows = self.anchor_vectors(indices, sentences)
        return cosine_matrix(rows, rows)


def local_rows(sentences: Sequence[str]) -> Sequence[str]:
    """This rank's rows of the global batch `sentences` (rank order, equal shares) when the
    ranks gather (`dist.gathers`); else `sentences` as they are."""
    if not dist.gathers():
        return sentences
    local = len(sentences) // dist.world_size()
    return list(sentences[dist.rank() * local : (dist.rank() + 1) * local])


class OnTheFlyComplementary:
    """Encode each batch with the frozen complementary model (eval mode: no dropout)."""

    def __init__(self, encoder: SentenceEncoder, max_length: int) -> None:
        self.encoder = freeze(encoder)
        self.max_length = max_length

    @torch.no_grad()
    def anchor_vectors(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, d) the batch sentences encoded (eval mode); under torchrun each rank encodes its
        own rows and they are gathered (`local_rows`), not the whole batch on every rank."""
        features = self.encoder.tokenize(local_rows(sentences), max_length=self.max_length)
        z = self.encoder(**{k: v.to(self.encoder.device) for k, v in features.items()})
        return dist.gather_with_grad(z)

    def similarities(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        z = self.anchor_vectors(indices, sentences)
        return cosine_matrix(z, z)


class TwoViewComplementary:
    """The released code's structure: two dropout views of the batch, cos(view1_i, view2_j)."""

    def __init__(self, encoder: SentenceEncoder, max_length: int) -> None:
        encoder.requires_grad_(False)
        self.encoder = encoder.train()  # dropout on, as in the released code; no gradients
        self.max_length = max_length
        self._last: tuple[list[str], torch.Tensor, torch.Tensor] | None = None

    @torch.no_grad()
    def _two_views(self, sentences: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The two views of the batch (a fresh dropout draw), kept for `anchor_vectors`.

        Under torchrun (`sentences` the global batch, in rank order) each rank encodes its own
        rows and the views are gathered, as the released code gathers its teacher's views
        (RUCAIBox/DCLR simcse/models.py l.617, l.662-672): every rank then scores with the same
        matrix. Each rank encoding the whole batch drew other dropout masks on each rank, so
        each computed another "global" loss."""
        mine = local_rows(sentences)
        features = self.encoder.tokenize(mine, max_length=self.max_length)
        features = {k: torch.cat([v, v]).to(self.encoder.device) for k, v in features.items()}
        z = self.encoder(**features)  # (2n_local, d)
        n = len(mine)
        first, second = dist.gather_with_grad(z[:n]), dist.gather_with_grad(z[n:])
        self._last = (list(sentences), first, second)
        return first, second

    def similarities(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        first, second = self._two_views(sentences)
        return cosine_matrix(first, second)

    def anchor_vectors(self, indices: torch.Tensor, sentences: Sequence[str]) -> torch.Tensor:
        """(n, d) the first view of the batch `similarities` last scored (the same dropout draw),
        as the released code's commented-out noise score `sim(z1_fix, z_negative)` would use."""
        if self._last is not None and self._last[0] == list(sentences):
            return self._last[1]
        return self._two_views(sentences)[0]
