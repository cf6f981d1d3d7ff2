"""The plan text's layout, shared by both engines: the verdict first, then the same sections in the
same order (``SECTIONS``). Each engine's renderer fills the sections in its own vocabulary."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..timeline import Timeline

__all__ = ["SECTIONS", "verdict_lines", "assemble", "failed_at", "failed_at_from_error", "PHASE_FAILED"]

SECTIONS = ("setup", "memory per rank", "sizing decision", "capacity", "fixes and notes")

_UNDER_SIZED = ("--max-running-requests ", "--max-num-seqs ")


def failed_at_from_error(error: str | None) -> str:
    """The start-up phase an engine error belongs to, from its text."""
    e = (error or "").lower()
    if "graph" in e:
        return "CUDA graph capture"
    if "free memory on device" in e:
        return "start-up (free memory below the requested)"
    if "weight" in e and "load" in e and "kv cache" not in e:
        return "weight loading"
    return "KV sizing"


PHASE_FAILED = {"load_weights": "weight loading", "load_draft_weights": "draft weight loading",
                 "cuda_graph": "CUDA graph capture"}


def failed_at(t: Timeline) -> str:
    """The phase the start dies in: the last phase when it ends below zero free, else from the error text."""
    last = t.ranks[0].phases[-1] if t.ranks and t.ranks[0].phases else None
    if last is not None and last.free_bytes_after is not None and last.free_bytes_after < 0:
        return PHASE_FAILED.get(last.name, last.name)
    return failed_at_from_error(t.error)


def verdict_lines(t: Timeline, failed_at: str, tokens_label: str = "KV tokens per rank") -> list[str]:
    """``verdict: starts — N KV tokens …`` (and an under-sizing warning), or ``verdict: FAILS at …`` + the error."""
    if t.starts:
        short = [w for w in t.warnings if w.startswith(_UNDER_SIZED) and " exceeds " in w]
        tokens = f"{t.kv_cache_tokens:,}" if t.kv_cache_tokens is not None else "—"
        return [f"verdict: starts — {tokens} {tokens_label}" + ("; UNDER-SIZED: " + short[0] if short else "")]
    return [f"verdict: FAILS at {failed_at}", f"  {t.error}"]


def assemble(verdict: Sequence[str], sections: Mapping[str, Sequence[str]]) -> str:
    """The verdict, then each non-empty section under its name, in ``SECTIONS`` order."""
    lines = list(verdict)
    for name in SECTIONS:
        body = [x for x in sections.get(name, ())]
        while body and not body[-1].strip():
            body.pop()
        if body:
            lines += ["", f"{name}:", *body]
    return "\n".join(lines)
