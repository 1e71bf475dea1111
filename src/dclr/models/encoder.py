"""A sentence encoder: any Hugging Face encoder + a pooler (+ SimCSE's train-only MLP head).

`SentenceEncoder.build(name_or_path, pooler)` starts training from a backbone;
`SentenceEncoder.from_pretrained(path)` loads a dclr / sentence-transformers / plain HF folder
for inference. Weights load from safetensors only and remote code is never trusted.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from dclr.data.text import clip_all
from dclr.errors import ConfigError, InputError, NonFiniteVectors
from dclr.estimate import estimate, linear_weights, record, work_flops
from dclr.jsonfile import inside, read_json
from dclr.models.attention_mask import prepared_mask, use_prepared_mask
from dclr.models.packing import (
    ROW_TOKENS,
    pack,
    position_offset,
    segment_first,
    segment_mean,
    unpad,
)
from dclr.models.pooler_names import POOLERS, check_pooler
from dclr.models.pooling import MLPHead, needs_hidden_states, pool
from dclr.models.resolve import (
    check_hub_reachable,
    check_model_folder,
    load_backbone,
    resolve_model,
)
from dclr.models.token_ids import batch_features, batch_token_ids
from dclr.progress import announce, progress_bar

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DCLR_CONFIG = "dclr.json"
# Sentences of different lengths to check that packed and padded forwards agree.
PACKING_PROBE = [
    "a short one .",
    "x",
    "a somewhat longer probe sentence , with more tokens in it .",
]
PACKING_TOLERANCE = 1e-4  # float32 reassociation across layouts stays ~1e-6; a wrong layout is O(1)
# sentence-transformers pooling mode -> dclr pooler, for folders saved by other tools.
_ST_POOLING = {"mean": "mean", "cls": "cls_before_pooler"}


class SentenceEncoder(nn.Module):
    """Backbone + pooler. Input: tokenized batch; output: (batch, hidden) sentence vectors.

    With pooler `cls` and `mlp_head=True` (SimCSE's unsupervised recipe, `mlp_only_train`), the
    [CLS] vector passes through a dense + tanh head while training only; at inference and in every
    exported model the representation is the [CLS] vector itself (`cls_before_pooler`).
    With `eval_pooler` set, training mode pools with `pooler` and eval mode (evaluation, `encode`,
    the exported model) with `eval_pooler` (ConSERT: mean of the last layer in training, mean of
    the last two layers at evaluation).

    `precision` is "fp32" unless `dclr.models.precision.quantize_int8` quantised the backbone
    (then "int8", inference only: `train()` refuses it). `linear_kernel` is "aten" unless
    `dclr.models.onednn.use_onednn` moved the backbone's linear layers to oneDNN ("onednn",
    inference only too).
    """

    precision: str = "fp32"
    linear_kernel: str = "aten"
    # `tokenize` pads each batch's length up to a multiple of this (0: to the longest sentence);
    # training sets it from `model.length_bucket` so a compiled step sees few shapes.
    length_bucket: int = 0
    # the padded forward's mask prepared in 4-D (`dclr.models.attention_mask`): auto = in
    # training on a GPU; training sets it from `model.prepared_mask`
    prepared_mask: str = "auto"
    # what `encode` does by default (`normalize=None`): unit vectors when the model it was loaded
    # or built from ends its sentence-transformers pipeline in `Normalize` (all-MiniLM-L6-v2
    # does; `saved_normalize`), so dclr's vectors are `SentenceTransformer(folder)`'s; an export
    # keeps that module. Internal scoring passes `normalize` explicitly and is unaffected.
    normalizes: bool = False

    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        pooler: str = "cls_before_pooler",
        mlp_head: bool = False,
        max_length: int | None = None,
        packing: bool = False,
        eval_pooler: str | None = None,
    ) -> None:
        super().__init__()
        check_pooler(pooler)
        if mlp_head and pooler != "cls":
            raise ConfigError("the MLP head is SimCSE's [CLS] head: use it only with pooler 'cls'")
        if eval_pooler is not None:
            check_pooler(eval_pooler)
            if mlp_head:
                raise ConfigError("eval_pooler cannot be combined with the MLP head")
        self.eval_pooler = eval_pooler
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler = pooler
        self.mlp_head = MLPHead(backbone.config.hidden_size) if mlp_head else None
        self.max_length = max_length
        # The backbone's own pooler layer (BERT: dense+tanh) is used only by pooler 'cls' without
        # a head; otherwise it never receives a gradient, so freeze it: the optimizer skips it and
        # DDP does not wait for gradients that never come.
        backbone_pooler = getattr(backbone, "pooler", None)
        if isinstance(backbone_pooler, nn.Module) and (pooler != "cls" or mlp_head):
            backbone_pooler.requires_grad_(False)
        self.packing = False
        self.row_tokens = ROW_TOKENS  # tokens per packed row (see dclr.models.packing)
        if packing:
            self.enable_packing()

    def enable_packing(self) -> bool:
        """Use padding-free packed forwards if this backbone gives the same vectors both ways.

        Checked on a probe batch (max |delta| <= PACKING_TOLERANCE); returns whether it is on.
        Pooler 'cls' without the MLP head needs the backbone's per-row pooler and stays padded.
        """
        if "cls" in (self.pooler, self.eval_pooler) and self.mlp_head is None:
            return False
        was_training = self.training
        self.eval()
        with torch.inference_mode():
            features = {k: v.to(self.device) for k, v in self.tokenize(PACKING_PROBE).items()}
            padded = self._forward_padded(**features)
            try:
                packed = self._forward_packed(features["input_ids"], features["attention_mask"])
            except (ValueError, RuntimeError, TypeError):  # e.g. transformers 4.x refuses 4-D masks
                packed = None
        self.train(was_training)
        self.packing = packed is not None and bool(
            (padded - packed).abs().max() <= PACKING_TOLERANCE
        )
        if not self.packing:
            warnings.warn(
                "this backbone does not honour packed inputs; using padded batches", stacklevel=2
            )
        return self.packing

    def train(self, mode: bool = True) -> SentenceEncoder:
        if mode and self.precision != "fp32":
            raise ConfigError(
                f"this encoder is cast to {self.precision} for inference and cannot be "
                f"trained: train the fp32 model, then encode or serve it with --precision "
                f"{self.precision} (mixed-precision training: optimisation.precision)"
            )
        if mode and self.linear_kernel != "aten":
            raise ConfigError(
                f"this encoder runs its linear layers on {self.linear_kernel} for inference and "
                "cannot be trained: load it for training with SentenceEncoder.from_pretrained(model)"
            )
        return super().train(mode)

    @classmethod
    def build(
        cls,
        name_or_path: str,
        pooler: str = "cls",
        mlp_head: bool = True,
        max_length: int | None = None,
        eval_pooler: str | None = None,
        **config_overrides: object,
    ) -> SentenceEncoder:
        """A fresh training encoder from a backbone (local folder or hub id)."""
        check_pooler(pooler)
        backbone, tokenizer = load_backbone(str(name_or_path), **config_overrides)
        source = resolve_model(str(name_or_path))
        encoder = cls(
            backbone,
            tokenizer,
            pooler,
            mlp_head=mlp_head,
            max_length=max_length or folder_limit(source, tokenizer),
            eval_pooler=eval_pooler,
        )
        encoder.normalizes = saved_normalize(Path(source))
        return encoder

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        pooler: str | None = None,
        max_length: int | None = None,
        packing: bool = False,
    ) -> SentenceEncoder:
        """Load for inference; the pooler defaults to what the folder records (dclr or ST), the
        token limit to the folder's (`folder_limit`: all-MiniLM-L6-v2's 256, as
        `SentenceTransformer(path)` truncates).

        `packing=True` turns on padding-free forwards when the backbone passes the probe check.
        """
        path = resolve_model(str(path))
        check_model_folder(path)  # before reading the pooler, so a bad path says what is wrong
        check_hub_reachable(path)  # and a hub id that cannot be loaded, before asking for one
        if pooler is None:
            pooler = saved_pooler(Path(path))
        if pooler is None:
            raise ConfigError(
                f"{path} does not record a pooler; pass one of {', '.join(POOLERS)} (--pooler, "
                "pooler=)"
            )
        check_pooler(pooler)
        backbone, tokenizer = load_backbone(str(path))
        if pooler == "cls" and getattr(backbone, "pooler", None) is None:
            raise ConfigError(f"{path} has no pooler layer; use pooler 'cls_before_pooler'")
        limit = max_length or folder_limit(path, tokenizer)
        encoder = cls(backbone, tokenizer, pooler, max_length=limit).eval()
        encoder.normalizes = saved_normalize(Path(path))
        if packing:
            encoder.enable_packing()
        return encoder

    @property
    def inference_pooler(self) -> str:
        """The pooler an exported copy uses (the MLP head never leaves training)."""
        if self.mlp_head is not None:
            return "cls_before_pooler"
        return self.eval_pooler or self.pooler

    @property
    def active_pooler(self) -> str:
        """The pooler of the current mode: `pooler` in training, `eval_pooler` (if set) in eval."""
        if self.training or self.eval_pooler is None:
            return self.pooler
        return self.eval_pooler

    @property
    def hidden_size(self) -> int:
        return int(self.backbone.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def tokenize(
        self, sentences: Sequence[str], max_length: int | None = None
    ) -> dict[str, torch.Tensor]:
        """A padded batch: the tokenizer's call with padding, truncation at the limit and
        `length_bucket`, built from its backend (`dclr.models.token_ids.batch_features`)."""
        limit = max_length or self.max_length or model_limit(self.tokenizer)
        clipped = clip_all(list(sentences), limit)  # bounded work per text
        return batch_features(self.tokenizer, clipped, limit, self.length_bucket or None)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **inputs: torch.Tensor
    ) -> torch.Tensor:
        """(b, L) token ids and mask -> (b, d) sentence vectors (packed internally if enabled)."""
        token_types = inputs.get("token_type_ids")
        if (
            self.packing
            and set(inputs) <= {"token_type_ids"}
            and (token_types is None or not bool(token_types.any()))
        ):
            return self._forward_packed(input_ids, attention_mask)
        return self._forward_padded(input_ids, attention_mask, **inputs)

    def _forward_packed(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """Unpad a padded batch, then encode it packed (see `_forward_ids`)."""
        return self._forward_ids(unpad(input_ids, attention_mask))

    def _forward_ids(self, ids: list[list[int]]) -> torch.Tensor:
        """Pack several sentences' token ids per row, run the backbone once, pool per sentence."""
        return self._forward_ids_pooled(ids, (self.active_pooler,))[0]

    def _forward_ids_pooled(
        self, ids: list[list[int]], poolers: Sequence[str]
    ) -> list[torch.Tensor]:
        """`_forward_ids` for several poolers from one packed forward (one (n, d) per pooler)."""
        dtype = next(self.backbone.parameters()).dtype
        batch = pack(
            ids,
            pad_id=self.tokenizer.pad_token_id or 0,
            position_offset=position_offset(self.backbone),
            row_tokens=self.row_tokens,
            dtype=dtype,
        ).to(self.device)
        want_hidden = any(needs_hidden_states(p) for p in poolers)
        out = self.backbone(
            input_ids=batch.input_ids,
            position_ids=batch.position_ids,
            attention_mask=batch.attention_mask,
            token_type_ids=torch.zeros_like(batch.input_ids),
            output_hidden_states=want_hidden,
            return_dict=True,
        )
        return [self._pool_packed(p, out, batch.segment, batch.n) for p in poolers]

    def _pool_packed(self, pooler: str, out: object, segment: torch.Tensor, n: int) -> torch.Tensor:
        last = out.last_hidden_state  # type: ignore[attr-defined]
        own = pooler == self.pooler
        if (own and self.mlp_head is not None) or pooler == "cls_before_pooler":
            vectors = segment_first(last, segment, n)
            if own and self.mlp_head is not None and self.training:
                return self.mlp_head(vectors)
            return vectors
        if pooler == "mean":
            return segment_mean(last, segment, n)
        if pooler == "cls":
            raise ConfigError(
                "pooler 'cls' needs the backbone's per-row pooler: use padded batches"
            )
        hidden = out.hidden_states  # type: ignore[attr-defined]
        first = hidden[1] if pooler == "avg_first_last" else hidden[-2]
        return segment_mean((first + hidden[-1]) / 2.0, segment, n)

    def _forward_padded(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **inputs: torch.Tensor
    ) -> torch.Tensor:
        return self._forward_padded_pooled(
            (self.active_pooler,), input_ids, attention_mask, **inputs
        )[0]

    def _forward_padded_pooled(
        self,
        poolers: Sequence[str],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        **inputs: torch.Tensor,
    ) -> list[torch.Tensor]:
        """`_forward_padded` for several poolers from one forward (one (b, d) per pooler)."""
        want_hidden = any(needs_hidden_states(p) for p in poolers)
        mask = attention_mask  # (b, L); pooling reads this one
        if use_prepared_mask(self.prepared_mask, self.backbone, attention_mask, self.training):
            mask = prepared_mask(attention_mask)  # (b, 1, L, L): transformers reads nothing
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=mask,
            output_hidden_states=want_hidden,
            return_dict=True,
            **inputs,
        )
        vectors = []
        for pooler in poolers:
            if pooler == self.pooler and self.mlp_head is not None:  # SimCSE's head, training only
                first = out.last_hidden_state[:, 0]
                vectors.append(self.mlp_head(first) if self.training else first)
                continue
            vectors.append(
                pool(
                    pooler,
                    attention_mask,
                    out.last_hidden_state,
                    hidden_states=out.hidden_states if want_hidden else None,
                    pooler_output=getattr(out, "pooler_output", None),
                )
            )
        return vectors

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 128,
        max_length: int | None = None,
        normalize: bool | None = None,
        show_progress: bool = False,
        progress_label: str = "encode",
        by_length: bool = False,
    ) -> np.ndarray:
        """(n,) sentences -> (n, d) float32 vectors; batches grouped by token length. One string
        (not in a list) -> its (d,) vector, as sentence-transformers' `encode` gives it.

        Pools with the eval-mode pooler (`eval_pooler` if set); `normalize` None: unit vectors
        when the model's pipeline ends in `Normalize` (`normalizes`), as sentence-transformers
        gives them; `progress_label` names the progress bar (several encodes in one command stay
        apart); `by_length`: see `encode_poolers`."""
        if isinstance(sentences, str):
            return self.encode(
                [sentences],
                batch_size,
                max_length,
                normalize,
                show_progress,
                progress_label,
                by_length,
            )[0]
        pooler = self.eval_pooler or self.pooler
        vectors = self.encode_poolers(
            sentences,
            (pooler,),
            batch_size,
            max_length,
            self.normalizes if normalize is None else normalize,
            show_progress,
            progress_label,
            by_length,
        )
        return vectors[pooler]

    def token_ids(self, sentences: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Each sentence's token ids, truncated as `encode` truncates them (what
        `encode_ids_poolers` takes; a caller that encodes the same sentences again, such as the
        dev evaluation, tokenises them once)."""
        limit = max_length or self.max_length or model_limit(self.tokenizer)
        clipped = clip_all(list(sentences), limit)  # bounded work per text (dclr.data.text)
        return batch_token_ids(self.tokenizer, clipped, limit)

    @torch.inference_mode()
    def encode_poolers(
        self,
        sentences: Sequence[str],
        poolers: Sequence[str],
        batch_size: int = 128,
        max_length: int | None = None,
        normalize: bool = False,
        show_progress: bool = False,
        progress_label: str = "encode",
        by_length: bool = False,
    ) -> dict[str, np.ndarray]:
        """`encode` for several poolers at once: one forward per batch serves all of them.

        {pooler: (n, d)}; the encoder's own pooler gets exactly what `encode` returns (the same
        batches and operations), the others what an encoder with that pooler would return up to
        float rounding. Lets one pass over a corpus give, e.g., a mean-pooled cache and [CLS]
        vectors (`dclr.methods.dclr_start`).

        `by_length`: every forward has the same shape for a given token length: `batch_size`
        sentences of that one length (longest first, in order of appearance within a length; a
        short last batch is filled up with copies of its first sentence, whose outputs are
        dropped). No sentence shares a row with padding or a packed neighbour, and the matrix
        products always see the same shapes, so a vector's bits do not depend on which other
        sentences are encoded in the same call (the kernels pick their blocking by shape; with
        varying batch sizes a row can change in its last bit: checked by
        `tests/losses/test_planned_complementary.py`). That lets the complementary cache encode
        only the rows a run samples (`dclr.losses.complementary`).
        """
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        if isinstance(sentences, str):  # its characters would be encoded one by one
            raise InputError(
                "sentences is one string, not a list of them", fix=f"pass [{sentences[:40]!r}]"
            )
        distinct = list(dict.fromkeys(sentences))
        ids = self.token_ids(distinct, max_length)
        out = self.encode_ids_poolers(
            ids, poolers, batch_size, normalize, show_progress, progress_label, by_length
        )
        index = {s: i for i, s in enumerate(distinct)}
        take = [index[s] for s in sentences]
        return {p: vectors[take] for p, vectors in out.items()}

    @torch.inference_mode()
    def encode_ids_poolers(
        self,
        ids: Sequence[list[int]],
        poolers: Sequence[str],
        batch_size: int = 128,
        normalize: bool = False,
        show_progress: bool = False,
        progress_label: str = "encode",
        by_length: bool = False,
    ) -> dict[str, np.ndarray]:
        """`encode_poolers` from token ids (already truncated): {pooler: (n, d)}, row i = ids[i].

        The same batches and forwards as `encode_poolers` (longest first, slices of `batch_size`,
        packed when packing is on): the service hands it the ids it tokenised on arrival."""
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        poolers = tuple(dict.fromkeys(check_pooler(p) for p in poolers))
        was_training = self.training
        switched = any(m.training for m in self.modules())  # one walk, not two (~0.5 ms)
        if switched:
            self.eval()
        batches = length_batches(ids, batch_size, by_length)
        out = {p: np.empty((len(ids), self.hidden_size), dtype=np.float32) for p in poolers}
        pending = _Outputs(out, self.device)
        flops, tic = 0.0, time.perf_counter()
        if show_progress:  # long work: say how much, and how long it should take
            tokens = sum(len(x) for x in ids)
            flops = work_flops("encode", linear_weights(self), tokens)
            guess = estimate("encode", flops, self.device)
            announce(f"{progress_label}: {len(ids):,} sentences, {tokens:,} tokens"
                     + (f", {guess.text()}" if guess else ""))  # fmt: skip
        bar = progress_bar(total=len(ids), desc=progress_label, unit="sent", enabled=show_progress)
        for batch_rows in batches:
            rows = batch_rows[batch_rows >= 0]  # by_length: -1 marks a filler slot
            if len(rows) < len(batch_rows):  # filler: copies of the first row, outputs dropped
                batch_rows = np.where(batch_rows >= 0, batch_rows, rows[0])
            if len(batch_rows) == 1 and not by_length:  # one text: nothing to pad or pack
                one = torch.tensor([ids[batch_rows[0]]], device=self.device)  # (1, L)
                pooled = self._forward_padded_pooled(poolers, one, torch.ones_like(one))
            elif self.packing:  # straight from token ids: no pad-then-unpad round trip
                pooled = self._forward_ids_pooled([ids[i] for i in batch_rows], poolers)
            else:
                features = padded_batch([ids[i] for i in batch_rows], self.tokenizer, self.device)
                pooled = self._forward_padded_pooled(poolers, **features)
            for pooler, vectors in zip(poolers, pooled, strict=True):
                vectors = vectors.float()
                if normalize:
                    vectors = torch.nn.functional.normalize(vectors, dim=-1)
                pending.add(pooler, rows, vectors[: len(rows)])
            pending.flush_if_full()
            bar.update(len(rows))
        pending.flush()
        bar.close()
        if flops:
            record("encode", flops, time.perf_counter() - tic, self.device)
        if switched:
            self.train(was_training)
        for host in out.values():
            check_finite_rows(host, self.precision)
        return out


def check_finite_rows(vectors: np.ndarray, precision: str = "fp32") -> None:
    """NonFiniteVectors when a row of `vectors` (n, d) holds NaN or inf: a model whose weights
    diverged, or a half-precision overflow, is named, not passed on as numbers."""
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size == 0:
        return
    hint = (
        "fp16 overflowed: encode in bf16 or fp32"
        if precision == "fp16"
        else "the model's weights or inputs give NaN/inf (a training run that diverged?): "
        "use a checkpoint from before it"
    )
    raise NonFiniteVectors(
        f"the encoder returned non-finite vectors (NaN/inf) for {bad.size} of {len(vectors)} "
        f"texts (first: row {int(bad[0])}); {hint}"
    )


class _Outputs:
    """Batch outputs on their way to the host arrays `out`. On the CPU each is written at once;
    on a GPU they wait on the device and are read back `FLUSH_ROWS` rows at a time, so the host
    does not wait for the GPU after every batch (it prepares the next one meanwhile)."""

    FLUSH_ROWS = 65536  # rows held on the GPU between reads: 100 MB at 384 dims, fp32

    def __init__(self, out: dict[str, np.ndarray], device: torch.device) -> None:
        self.out = out
        self.wait = device.type == "cuda"
        self.held: list[tuple[str, np.ndarray, torch.Tensor]] = []
        self.rows = 0

    def add(self, pooler: str, rows: np.ndarray, vectors: torch.Tensor) -> None:
        if not self.wait:
            self.out[pooler][rows] = vectors.cpu().numpy()
            return
        # a copy of its own: `vectors` can be a view that keeps a batch's whole hidden states
        # alive, or the output of a CUDA graph (a compiled backbone) that its next replay
        # overwrites
        self.held.append((pooler, rows, vectors.clone()))
        self.rows += len(rows)

    def flush_if_full(self) -> None:
        if self.rows >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.held:
            return
        host = torch.cat([v for _, _, v in self.held]).cpu().numpy()  # one read
        start = 0
        for pooler, rows, _ in self.held:
            self.out[pooler][rows] = host[start : start + len(rows)]
            start += len(rows)
        self.held, self.rows = [], 0


def padded_batch(
    ids: Sequence[Sequence[int]], tokenizer: PreTrainedTokenizerBase, device: torch.device
) -> dict[str, torch.Tensor]:
    """Token-id lists -> {"input_ids", "attention_mask"} (b, L) int64 on `device`, padded on the
    tokenizer's side with its pad id: what `tokenizer.pad(..., return_tensors="pt")` gives, built
    with numpy (~5x faster, which counts when a GPU encodes a batch in a few ms). To a GPU it goes
    through pinned memory, asynchronously."""
    width = max(len(x) for x in ids)
    input_ids = np.full((len(ids), width), tokenizer.pad_token_id or 0, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    left = tokenizer.padding_side == "left"
    for row, tokens in enumerate(ids):
        span = slice(width - len(tokens), width) if left else slice(0, len(tokens))
        input_ids[row, span] = tokens
        mask[row, span] = 1
    features = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
    if device.type != "cuda":
        return {k: v.to(device) for k, v in features.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in features.items()}


def length_batches(
    ids: Sequence[Sequence[int]], batch_size: int, by_length: bool
) -> list[np.ndarray]:
    """Row indices of `ids` per batch, longest first: consecutive slices of `batch_size` of the
    stable order by decreasing length, or (`by_length`) exactly `batch_size` slots of one length
    each, -1 marking the filler slots of a length's last batch."""
    return batches_of_lengths(
        np.array([len(x) for x in ids], dtype=np.int64), batch_size, by_length
    )


def batches_of_lengths(lengths: np.ndarray, batch_size: int, by_length: bool) -> list[np.ndarray]:
    """`length_batches` from the rows' token counts alone."""
    if not by_length:
        order = np.argsort(lengths, kind="stable")[::-1]
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    # order by (length descending, position ascending): a stable sort of -length
    order = np.argsort(-lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1  # where the length changes
    batches = []
    for group in np.split(order, cuts):
        for start in range(0, len(group), batch_size):
            rows = group[start : start + batch_size]
            batches.append(np.pad(rows, (0, batch_size - len(rows)), constant_values=-1))
    return batches


def model_limit(tokenizer: object) -> int:
    """The tokenizer's length limit, capped at 512 (BERT's position table; some report 1e30)."""
    return int(min(getattr(tokenizer, "model_max_length", 512) or 512, 512))


# Where a model folder records the longest input it was trained for, first match wins.
FOLDER_LIMITS = (("sentence_bert_config.json", "max_seq_length"), (DCLR_CONFIG, "max_length"))


def folder_limit(source: str | Path, tokenizer: object) -> int:
    """The longest input the model at `source` (a folder or a hub id already in the local
    cache) was trained for: its sentence-transformers config's `max_seq_length` (or dclr.json's
    `max_length`), capped by `model_limit`; else `model_limit` alone. all-MiniLM-L6-v2 says 256:
    `SentenceTransformer(folder)` truncates there, and so does every dclr encoder loaded from it
    (encode, eval, serve, index; training tokenises at its recipe's `model.max_length`)."""
    cap = model_limit(tokenizer)
    for name, key in FOLDER_LIMITS:
        file = _folder_file(str(source), name)
        if file is not None:
            value = read_json(file, MODEL_FILE_FIX).get(key)
            if value:
                return min(int(value), cap)
    return cap


def _folder_file(source: str, name: str) -> Path | None:
    """`source`'s file `name`: from the folder, or from the Hugging Face cache (never the
    network) for a hub id; None when there is none."""
    folder = Path(source)
    if folder.is_dir():
        return folder / name if (folder / name).is_file() else None
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(source, name)
    except ValueError:  # not a valid repo id (a missing folder, a python-package: spec)
        return None
    return Path(cached) if isinstance(cached, str) else None


def saved_normalize(path: Path) -> bool:
    """Whether a folder's vectors are unit length as sentence-transformers gives them: dclr.json's
    `normalize`, else a `Normalize` module in modules.json (all-MiniLM-L6-v2 has one)."""
    if (path / DCLR_CONFIG).is_file():
        return bool(read_json(path / DCLR_CONFIG, MODEL_FILE_FIX).get("normalize", False))
    modules = path / "modules.json"
    if modules.is_file():
        return any(_module_type(m).endswith("Normalize") for m in _modules(modules))
    return False


MODEL_FILE_FIX = (
    "restore the file from the model's source, or export the model again (`dclr export`, or "
    "SentenceTransformer.save)"
)


def _modules(path: Path) -> list[Any]:
    """sentence-transformers' modules.json: a list of module records."""
    return cast(list[Any], read_json(path, MODEL_FILE_FIX, list))


def _module_type(module: Any) -> str:
    return str(module.get("type", "")) if isinstance(module, dict) else ""


def saved_pooler(path: Path) -> str | None:
    """The pooler a folder records: dclr.json, else sentence-transformers' 1_Pooling config."""
    if (path / DCLR_CONFIG).is_file():
        pooler = read_json(path / DCLR_CONFIG, MODEL_FILE_FIX).get("pooler")
        if not isinstance(pooler, str):
            raise InputError("has no pooler name", path=path / DCLR_CONFIG, fix=MODEL_FILE_FIX)
        return pooler
    modules = path / "modules.json"
    if modules.is_file():
        for module in _modules(modules):
            if _module_type(module).endswith("Pooling"):
                folder = inside(path, str(module.get("path", "")), modules)
                cfg = read_json(folder / "config.json", MODEL_FILE_FIX)
                mode = cfg.get("pooling_mode")
                if mode is None:  # older sentence-transformers: one boolean flag per mode
                    mode = next(
                        (
                            m
                            for m in _ST_POOLING
                            if cfg.get(f"pooling_mode_{m}_tokens")
                            or cfg.get(f"pooling_mode_{m}_token")
                        ),
                        None,
                    )
                if isinstance(mode, list | tuple):
                    mode = mode[0] if len(mode) == 1 else None
                return _ST_POOLING.get(mode) if mode else None
    return None
