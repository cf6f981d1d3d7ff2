"""A sweep's result: one row per grid point, the figures ``kvscope plan`` gives at that point.

``verdict``: ``starts`` (the engine starts), ``fails`` (it raises: ``error`` is the engine's own
text, as in ``Timeline.error``) or ``invalid`` (kvscope refuses the input, as ``plan`` would:
``error`` is that one-line message). ``tokens`` is ``Timeline.kv_cache_tokens``;
``max_running_requests`` is ``Timeline.max_running_requests`` (SGLang: the running-request limit;
vLLM: ``max_num_seqs``); ``max_concurrency`` is vLLM's "Maximum concurrency for N tokens per
request" (``extra.max_concurrency``; None for SGLang).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import KvscopeError

COLUMNS = ("tokens", "max_running_requests", "max_concurrency", "verdict", "error")


class Outcome(NamedTuple):
    """What one point gives (the row without its flag values)."""

    tokens: int | None
    max_running_requests: int | None
    max_concurrency: float | None
    verdict: str  # starts | fails | invalid
    error: str | None


def starts(tokens: int, running: int | None, concurrency: float | None = None) -> Outcome:
    return Outcome(tokens, running, concurrency, "starts", None)


def fails(error: str, tokens: int = 0, running: int | None = None, concurrency: float | None = None) -> Outcome:
    return Outcome(tokens, running, concurrency, "fails", error)


def invalid(exc: KvscopeError) -> Outcome:
    return Outcome(None, None, None, "invalid", str(exc))


@dataclass(frozen=True)
class Sweep:
    """The grid (axis names and values, in order) and one row per point: the point's values, then
    :data:`COLUMNS`. Rows follow the grid order, the last axis varying fastest."""

    engine: str
    engine_version: str | None
    model: str
    gpu: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    rows: tuple[tuple[Any, ...], ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (*(n for n, _ in self.axes), *COLUMNS)

    def __len__(self) -> int:
        return len(self.rows)

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts keyed by :attr:`columns`."""
        cols = self.columns
        return [dict(zip(cols, r)) for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        """What ``kvscope sweep --format json`` prints: the grid and one object per point."""
        return {"engine": self.engine, "engine_version": self.engine_version, "model": self.model,
                "gpu": self.gpu, "axes": {n: list(v) for n, v in self.axes}, "columns": list(self.columns),
                "rows": self.records()}
