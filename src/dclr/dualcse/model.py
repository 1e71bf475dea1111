"""The DualCSE model: two embeddings per sentence, r (explicit semantics) and u (implicit semantics).

Encoder kinds (`kind`):

- `cross`: one encoder. A sentence s is encoded as the pair (s, "explicit") for r and (s, "implicit")
  for u, with the tokenizer's own pair encoding (BERT: `[CLS] s [SEP] explicit [SEP]`, segment ids
  0 then 1; RoBERTa: `<s> s </s></s> explicit </s>`), pooled with the encoder's pooler over every
  token. Truncation only ever shortens s, never the prompt word. A single sentence gets its two
  embeddings this way whatever its role (premise or hypothesis).
- `bi`: two encoders with the same architecture and starting weights, one per semantics; each
  encodes s on its own.

Saved layout (`DualEncoder.save`): `dualcse.json` (format, kind, prompts) plus one folder per
encoder, each written by `dclr.models.export.save_encoder`, so each loads with
`SentenceTransformer(folder)`: `bi` -> `explicit/`, `implicit/`; `cross` -> `encoder/`, whose r and
u are `SentenceTransformer(folder).encode([(s, "explicit")])` / `[(s, "implicit")]` (a pair input).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast, get_args

import numpy as np
import torch
from torch import nn

from dclr.atomic import staged_folder
from dclr.data.text import clip_all
from dclr.errors import ConfigError, InputError
from dclr.models.encoder import SentenceEncoder, model_limit
from dclr.models.export import save_encoder
from dclr.models.resolve import resolve_model
from dclr.options.dualcse import EncoderKind
from dclr.progress import progress_bar

ENCODER_KINDS: tuple[str, ...] = get_args(EncoderKind)
Semantics = Literal["explicit", "implicit"]
SEMANTICS: tuple[str, ...] = get_args(Semantics)
DUALCSE_CONFIG = "dualcse.json"
FORMAT = "dualcse-1"
CROSS_FOLDER = "encoder"
# The cross encoder's second segment for each semantics: the word itself, as in the paper.
DEFAULT_PROMPTS = {"explicit": "explicit", "implicit": "implicit"}


def check_semantics(semantics: str) -> str:
    if semantics not in SEMANTICS:
        raise InputError(
            f"unknown semantics {semantics!r}",
            fix=f"use one of {', '.join(SEMANTICS)} (r: explicit meaning, u: implicit meaning)",
        )
    return semantics


def check_kind(kind: str) -> str:
    if kind not in ENCODER_KINDS:
        raise ConfigError(f"unknown encoder kind {kind!r}; choose from {', '.join(ENCODER_KINDS)}")
    return kind


class DualEncoder(nn.Module):
    """Sentences -> r (explicit) and u (implicit) vectors in one space.

    Args:
        kind: "cross" (one encoder, prompt word as second segment) or "bi" (one encoder per
            semantics); see the module docstring.
        encoders: cross: {"cross": encoder}; bi: {"explicit": encoder, "implicit": encoder}.
        prompts: the cross encoder's second segment per semantics (default: the words themselves).

    `model(semantics, **features)` maps a tokenized batch (from `tokenize(sentences, semantics)`)
    to (b, d) vectors; `encode` and `implicitness` are the inference API. With a bi encoder whose
    two encoders are identical, r = u and every implicitness is 0.
    """

    def __init__(
        self,
        kind: str,
        encoders: dict[str, SentenceEncoder],
        prompts: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.kind = check_kind(kind)
        expected = ["cross"] if kind == "cross" else list(SEMANTICS)
        if sorted(encoders) != sorted(expected):
            raise ConfigError(
                f"a {kind} DualEncoder needs encoders {expected}, got {list(encoders)}"
            )
        self.encoders = nn.ModuleDict(encoders)
        self.prompts = dict(prompts or DEFAULT_PROMPTS)
        if sorted(self.prompts) != sorted(SEMANTICS) or not all(self.prompts.values()):
            raise ConfigError(f"prompts must give a non-empty text for each of {SEMANTICS}")

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        name_or_path: str,
        kind: str = "cross",
        pooler: str = "mean",
        max_length: int | None = None,
        **config_overrides: Any,
    ) -> DualEncoder:
        """A fresh training model from a backbone; a bi model loads it twice (same start)."""
        check_kind(kind)
        names = ["cross"] if kind == "cross" else list(SEMANTICS)
        encoders = {
            name: SentenceEncoder.build(
                name_or_path,
                pooler=pooler,
                mlp_head=False,
                max_length=max_length,
                **config_overrides,
            )
            for name in names
        }
        return cls(kind, encoders)

    @classmethod
    def from_pretrained(cls, path: str | Path, max_length: int | None = None) -> DualEncoder:
        """Load a folder written by `save` (or `dclr dualcse train`) for inference."""
        path = Path(resolve_model(str(path)))
        info = read_dualcse_config(path)
        names = ["cross"] if info["kind"] == "cross" else list(SEMANTICS)
        encoders = {
            name: SentenceEncoder.from_pretrained(path / _folder(name), max_length=max_length)
            for name in names
        }
        return cls(info["kind"], encoders, prompts=info.get("prompts")).eval()

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write the model to `path` (replacing it atomically) and return the path."""
        path = Path(path)
        with staged_folder(path) as tmp:
            for name, encoder in self.encoders.items():
                save_encoder(cast(SentenceEncoder, encoder), tmp / _folder(name))
            info = {"format": FORMAT, "kind": self.kind, "prompts": self.prompts, **(extra or {})}
            (tmp / DUALCSE_CONFIG).write_text(json.dumps(info, indent=2) + "\n")
        return path

    # ---- training interface -----------------------------------------------------------------
    def encoder_for(self, semantics: str) -> SentenceEncoder:
        check_semantics(semantics)
        return self.encoders["cross" if self.kind == "cross" else semantics]  # type: ignore[return-value]

    @property
    def hidden_size(self) -> int:
        return self.encoder_for("explicit").hidden_size

    @property
    def device(self) -> torch.device:
        return self.encoder_for("explicit").device

    def tokenize(
        self, sentences: Sequence[str], semantics: str, max_length: int | None = None
    ) -> dict[str, torch.Tensor]:
        """A padded batch of `sentences` as encoded for `semantics` (pairs for a cross encoder),
        its length a multiple of the encoder's `length_bucket` (training's `model.length_bucket`)."""
        encoder = self.encoder_for(semantics)
        limit = max_length or encoder.max_length or model_limit(encoder.tokenizer)
        batch = encoder.tokenizer(
            **self._texts(clip_all(list(sentences), limit), semantics),  # bounded work per text
            padding=True,
            truncation=self._truncation(),
            max_length=limit,
            pad_to_multiple_of=encoder.length_bucket or None,
            return_tensors="pt",
        )
        return dict(batch)

    def forward(self, semantics: str, **features: torch.Tensor) -> torch.Tensor:
        """(b, L) tokenized batch for `semantics` -> (b, d) vectors."""
        return self.encoder_for(semantics)(**features)

    def _texts(self, sentences: Sequence[str], semantics: str) -> dict[str, list[str]]:
        texts = {"text": list(sentences)}
        if self.kind == "cross":
            texts["text_pair"] = [self.prompts[semantics]] * len(texts["text"])
        return texts

    def _truncation(self) -> str | bool:
        return "only_first" if self.kind == "cross" else True

    # ---- inference --------------------------------------------------------------------------
    @torch.inference_mode()
    def encode(
        self,
        sentences: Sequence[str],
        semantics: str = "explicit",
        batch_size: int = 128,
        max_length: int | None = None,
        normalize: bool | None = None,
        show_progress: bool = False,
    ) -> np.ndarray:
        """(n,) sentences -> (n, d) float32 vectors for `semantics`; batches grouped by length.
        `normalize` None: unit vectors when the encoder's pipeline ends in `Normalize`
        (`SentenceEncoder.normalizes`), so they are `SentenceTransformer(folder)`'s."""
        check_semantics(semantics)
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        encoder = self.encoder_for(semantics)
        if normalize is None:
            normalize = encoder.normalizes
        if not sentences:  # (0, d), as SentenceEncoder.encode gives
            return np.empty((0, encoder.hidden_size), dtype=np.float32)
        was_training = self.training
        self.eval()
        limit = max_length or encoder.max_length or model_limit(encoder.tokenizer)
        distinct = list(dict.fromkeys(sentences))
        tokens = encoder.tokenizer(
            **self._texts(clip_all(distinct, limit), semantics),
            truncation=self._truncation(),
            max_length=limit,
        )
        keys = [k for k in ("input_ids", "token_type_ids", "attention_mask") if k in tokens]
        order = np.argsort([len(x) for x in tokens["input_ids"]], kind="stable")[::-1]
        out = np.empty((len(distinct), self.hidden_size), dtype=np.float32)
        bar = progress_bar(
            total=len(distinct), desc=f"encode {semantics}", unit="sent", enabled=show_progress
        )
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = encoder.tokenizer.pad(
                {k: [tokens[k][i] for i in rows] for k in keys}, return_tensors="pt"
            )
            vectors = self(semantics, **{k: v.to(self.device) for k, v in batch.items()}).float()
            if normalize:
                vectors = torch.nn.functional.normalize(vectors, dim=-1)
            out[rows] = vectors.cpu().numpy()
            bar.update(len(rows))
        bar.close()
        self.train(was_training)
        index = {s: i for i, s in enumerate(distinct)}
        return out[[index[s] for s in sentences]]

    def implicitness(self, sentences: Sequence[str], **encode_options: object) -> np.ndarray:
        """(n,) cosine distance 1 - cos(r, u) of each sentence's two embeddings, in [0, 2].

        Higher = more implicit: training pulls a hypothesis's r and u together and pushes a
        premise's r (towards its explicit entailment) away from its u (towards its implication).
        """
        return implicitness_of(self, sentences, **encode_options)


def implicitness_of(
    model: object, sentences: Sequence[str], **encode_options: object
) -> np.ndarray:
    """1 - cos(r, u) for any object with `encode(sentences, semantics, normalize=...)`."""
    r = model.encode(sentences, "explicit", normalize=True, **encode_options)  # type: ignore[attr-defined]
    u = model.encode(sentences, "implicit", normalize=True, **encode_options)  # type: ignore[attr-defined]
    return (1.0 - (r * u).sum(axis=1)).astype(np.float32)


def _folder(name: str) -> str:
    return CROSS_FOLDER if name == "cross" else name


def is_dualcse_folder(path: str | Path) -> bool:
    return (Path(path) / DUALCSE_CONFIG).is_file()


def read_dualcse_config(path: Path) -> dict:
    """The validated `dualcse.json` of a saved model folder."""
    if not path.is_dir():
        raise InputError(
            "model folder does not exist",
            path=path,
            fix="pass a folder written by `dclr dualcse train` / DualEncoder.save",
        )
    config_path = path / DUALCSE_CONFIG
    if not config_path.is_file():
        raise InputError(
            f"not a DualCSE model folder (no {DUALCSE_CONFIG})",
            path=path,
            fix="pass a folder written by `dclr dualcse train` / DualEncoder.save; a one-embedding "
            "model (dclr, sentence-transformers) works in `dclr dualcse rte` as a baseline",
        )
    try:
        info = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"invalid JSON: {err}", path=config_path, line=err.lineno) from None
    if info.get("format") != FORMAT or info.get("kind") not in ENCODER_KINDS:
        raise InputError(
            f"unsupported DualCSE model (format {info.get('format')!r}, kind {info.get('kind')!r})",
            path=config_path,
            fix=f"expected format {FORMAT!r} and kind one of {', '.join(ENCODER_KINDS)}",
        )
    return info
