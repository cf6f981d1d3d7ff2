"""argparse value parsers shared by the commands (``type=`` callables).

Each raises ``argparse.ArgumentTypeError``, so argparse prints ``argument --flag: <message>`` and
exits 2.
"""

from __future__ import annotations

import argparse
from typing import Callable


def positive_int(text: str) -> int:
    """``"32768"``, ``"32_768"`` or ``"32,768"`` -> 32768; 0 and negatives are refused."""
    try:
        n = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def int_list(flag: str) -> Callable[[str], tuple[int, ...]]:
    """A parser for ``flag``'s comma-separated integers (``"1,8,64"`` -> ``(1, 8, 64)``)."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            vals = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} wants comma-separated integers, got {text!r}") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"{flag} is empty")
        return vals

    parse.__name__ = "int_list"
    return parse


def gib_list(text: str) -> list[float]:
    """GiB figures as a log prints them, one or one per rank: ``"94"``, ``"94,93.5"``, ``"94 93.5"``."""
    try:
        vals = [float(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected GiB numbers like 94 or 94,93.5,..., got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one GiB number")
    return vals
