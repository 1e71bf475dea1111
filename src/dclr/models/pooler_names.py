"""The poolers' names and their check, torch-free (the config and `dclr train --help` import
them; the poolers themselves are `dclr.models.pooling`)."""

from __future__ import annotations

from typing import Literal, get_args

PoolerName = Literal["cls", "cls_before_pooler", "mean", "avg_first_last", "avg_top2"]
POOLERS: tuple[str, ...] = get_args(PoolerName)


def check_pooler(pooler: str, option: str = "pooler") -> str:
    """`pooler` if it is one of POOLERS, else a ConfigError with the closest name."""
    if pooler not in POOLERS:
        import difflib

        from dclr.errors import ConfigError

        close = difflib.get_close_matches(pooler, POOLERS, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown {option} {pooler!r}{hint}; choose from {', '.join(POOLERS)}")
    return pooler
