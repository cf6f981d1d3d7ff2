"""argparse value parsers shared by the commands (``type=`` callables).

Each raises ``argparse.ArgumentTypeError``, so argparse prints ``argument --flag: <message>`` and
exits 2.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

MAX_GIB = float(1 << 20)  # 1 PiB: beyond any GPU (validate.MEASURED_GIB_RULE)
MAX_RANKS = 1 << 16


def positive_int(text: str) -> int:
    """``"32768"``, ``"32_768"`` or ``"32,768"`` -> 32768; 0 and negatives are refused."""
    try:
        n = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1 or n > 1 << 40:
        raise argparse.ArgumentTypeError(f"expected a positive integer up to 2^40, got {text!r}")
    return n


def int_list(flag: str, hi: int | None = None) -> Callable[[str], tuple[int, ...]]:
    """A parser for ``flag``'s comma-separated integers (``"1,8,64"`` -> ``(1, 8, 64)``), each at most
    ``hi`` when given."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            vals = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} wants comma-separated integers, got {text!r}") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"{flag} is empty")
        if len(vals) > 1024:
            raise argparse.ArgumentTypeError(f"{flag}: {len(vals)} values, at most 1024")
        if hi is not None and max(vals) > hi:
            raise argparse.ArgumentTypeError(f"{flag}: {max(vals)} is more than {hi}")
        return vals

    parse.__name__ = "int_list"
    return parse


def gib_list(text: str) -> list[float]:
    """GiB figures as a log prints them, one or one per rank: ``"94"``, ``"94,93.5"``, ``"94 93.5"``;
    each finite and > 0 (a free-memory figure of 0 or NaN is no measurement)."""
    try:
        vals = [float(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected GiB numbers like 94 or 94,93.5,..., got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one GiB number")
    if len(vals) > MAX_RANKS:
        raise argparse.ArgumentTypeError(f"{len(vals)} values: at most {MAX_RANKS} (one per rank)")
    bad = [v for v in vals if not (math.isfinite(v) and 0 < v <= MAX_GIB)]
    if bad:
        raise argparse.ArgumentTypeError(f"GiB values must be finite, > 0 and <= {MAX_GIB:.0f}, got {bad[0]:g}")
    return vals


def _gib(text: str, lo: float, lo_open: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GiB number like 21.7, got {text!r}") from None
    low_ok = v > lo if lo_open else v >= lo
    if not (math.isfinite(v) and low_ok and v <= MAX_GIB):
        rng = f"{'>' if lo_open else '>='} {lo:g}" if lo > -MAX_GIB else f">= {-MAX_GIB:g}"
        raise argparse.ArgumentTypeError(f"GiB value must be finite, {rng} and <= {MAX_GIB:.0f}, got {text!r}")
    return v


def gib(text: str) -> float:
    """One measured free-memory GiB figure (``"21.7"``): finite, > 0 and at most 1 PiB."""
    return _gib(text, 0.0, True)


def gib0(text: str) -> float:
    """A measured GiB amount that may be zero (``Estimated CUDA graph memory: 0.00 GiB``)."""
    return _gib(text, 0.0, False)


def signed_gib(text: str) -> float:
    """A measured GiB budget as printed, negative allowed (``Available KV cache memory: -2.1 GiB``)."""
    return _gib(text, -MAX_GIB, False)


def finite_float(text: str) -> float:
    """A float flag that must be a real number (``nan`` / ``inf`` refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def int_value(text: str) -> int:
    """An integer flag (``"8192"``, ``"8_192"``); its range is the engine's (validate.py tables)."""
    try:
        return int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def ranged(kind: str, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False
           ) -> Callable[[str], float]:
    """An argparse type for a number in a range (``kind`` "int" or "number"; NaN / inf refused),
    checked by the validation layer's rule (``validate.Rule``)."""
    from ..errors import FlagError
    from ..validate import Rule, check_value

    rule = Rule(kind, lo, hi, lo_open=lo_open)

    def parse(text: str) -> float:
        try:
            value: float = int(text.replace("_", "")) if kind == "int" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {rule.describe()}, got {text!r}") from None
        try:
            check_value("value", value, rule, FlagError)
        except FlagError:
            raise argparse.ArgumentTypeError(f"expected {rule.describe()}, got {text!r}") from None
        return value

    parse.__name__ = kind
    return parse
