"""Units. Integer bytes inside; GiB/MiB only at the edges.

SGLang prints GiB (bytes / 2**30) labelled "GB"; vLLM V1 prints "GiB".
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def gib_to_bytes(gib: float) -> int:
    """A GiB figure (as printed by an engine) to integer bytes, rounding to the nearest byte."""
    return int(round(gib * GiB))


def bytes_to_gib(n: int | float) -> float:
    return n / GiB


def fmt_gib(n: int | float, label: str = "GiB", digits: int = 2) -> str:
    """Format bytes as GiB with the engine's label (SGLang: "GB", vLLM: "GiB")."""
    return f"{n / GiB:.{digits}f} {label}"
