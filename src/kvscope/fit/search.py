"""Monotone search on an integer grid: the smallest / largest grid point where a predicate holds."""

from __future__ import annotations

from typing import Callable


def _first_true(lo: int, hi: int, pred: Callable[[int], bool], guess: int | None = None) -> int | None:
    """Smallest k in [lo, hi] with ``pred(k)`` for a predicate False…False True…True; None if none.
    A guess is checked first (and its neighbour), then the bracket grows by doubling, then bisection."""
    if lo > hi:
        return None
    if guess is not None:
        g = min(max(guess, lo), hi)
        if pred(g):
            hi_t, d = g, 1  # hi_t: known True
            while True:
                k = max(lo, hi_t - d)
                if k == hi_t:
                    return hi_t
                if not pred(k):
                    lo = k + 1
                    hi = hi_t
                    break
                hi_t = k
                if k == lo:
                    return lo
                d *= 2
        else:
            lo_f, d = g, 1  # lo_f: known False
            while True:
                k = min(hi, lo_f + d)
                if k == lo_f:
                    return None
                if pred(k):
                    lo, hi = lo_f + 1, k
                    break
                lo_f = k
                if k == hi:
                    return None
                d *= 2
    elif not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_true(lo: int, hi: int, pred: Callable[[int], bool], guess: int | None = None) -> int | None:
    """Largest k in [lo, hi] with ``pred(k)`` for a predicate True…True False…False; None if none."""
    k = _first_true(-hi, -lo, lambda j: pred(-j), None if guess is None else -guess)
    return None if k is None else -k
