"""Seeded generators of engine inputs (deterministic: the same seed gives the same cases).

Numbers are drawn from real hardware and model values plus the edges of every branch in the
engines' code (bucket boundaries ±1 MiB, tiny and huge budgets, TP above the KV-head count ...).
"""
from __future__ import annotations

import random
from typing import Iterator, List, Optional

# nvidia-smi memory.total (MiB) of common GPUs, plus None (unknown GPU).
GPU_MEM_MIB = [15360, 16384, 23028, 24564, 32607, 40960, 46068, 49140, 81559, 81920, 97887, 143771,
               144384, 183359, 196608, 292864]
# The ladder's edges: < 20, 25_000 (v0.4.6), < 35, < 60, <= 80, < 90, > 96, < 160 GiB.
GPU_EDGES = [e + d for e in (20 * 1024, 25000, 35 * 1024, 60 * 1024, 81920, 90 * 1024, 96 * 1024, 160 * 1024)
             for d in (-1, 0, 1)]


def gpu_mem(rng: random.Random) -> Optional[int]:
    r = rng.random()
    if r < 0.05:
        return None
    if r < 0.45:
        return rng.choice(GPU_MEM_MIB)
    if r < 0.65:
        return rng.choice(GPU_EDGES)
    return rng.randint(8 * 1024, 300 * 1024)


def maybe(rng: random.Random, p: float, value):
    return value if rng.random() < p else None


def pow2(rng: random.Random, lo: int, hi: int) -> int:
    return 1 << rng.randint(lo, hi)


def rngs(seed: int, n: int) -> Iterator[random.Random]:
    for i in range(n):
        yield random.Random(seed * 1_000_003 + i)


def sample(rng: random.Random, values: List):
    return rng.choice(values)
