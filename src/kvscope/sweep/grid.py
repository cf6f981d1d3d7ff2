"""Sweep grids: axis names and values, parsed from ``NAME=VALUES`` or given as a mapping.

Values are a comma list (``8k,32k,128k``, ``auto,fp8_e4m3``) or an inclusive range
``START:STOP:STEP`` (``0.5:0.95:0.01``; stop included when it lies on the grid, each value rounded
to the inputs' decimals so ``0.5 + 3 x 0.01`` is ``0.53``). Token counts take vLLM's
human-readable suffixes (``vllm/utils/argparse_utils.py``): ``k``/``m`` are 10**3 / 10**6,
``K``/``M`` 2**10 / 2**20. ``none`` is the engine default, ``true``/``false`` booleans.
Axis names are the engine's flags in Python spelling; ``tp``/``pp``/``dp`` are the parallel sizes.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from ..errors import FlagError

MAX_POINTS = 1_000_000  # a grid larger than this is refused: the rows stay in memory (~150 MB at the cap)
ALIASES = {"tp": "tp_size", "pp": "pp_size", "dp": "dp_size"}
FRACTION_AXIS = {"sglang": "mem_fraction_static", "vllm": "gpu_memory_utilization"}
_SUFFIX = {"k": 10**3, "m": 10**6, "K": 2**10, "M": 2**20}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_TOKENS = re.compile(r"^\d+(\.\d+)?[kmKM]$")

Axes = tuple[tuple[str, tuple[Any, ...]], ...]


def axis_name(name: str) -> str:
    """``--mem-fraction-static`` / ``mem-fraction-static`` / ``tp`` -> the flag's Python name."""
    key = name.strip().lstrip("-").replace("-", "_")
    return ALIASES.get(key, key)


def parse_value(text: str) -> Any:
    """One grid value: int, float, ``32k`` token counts, ``none``, ``true``/``false``, else the text."""
    s = text.strip()
    low = s.lower()
    if low in ("none", "null", "default"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if _NUMBER.match(s):
        return int(s) if re.match(r"^[+-]?\d+$", s) else float(s)
    if _TOKENS.match(s):
        return int(float(s[:-1]) * _SUFFIX[s[-1]])
    return s


def _decimals(text: str) -> int:
    s = text.strip().lower()
    if "e" in s:
        return 12
    return len(s.split(".", 1)[1]) if "." in s else 0


def parse_range(name: str, text: str) -> tuple[Any, ...]:
    """``START:STOP:STEP`` (inclusive) -> the values."""
    parts = text.split(":")
    if len(parts) != 3:
        raise FlagError(f"range {text!r} is not START:STOP:STEP", field=name, fix="e.g. 0.5:0.95:0.01")
    start, stop, step = (parse_value(p) for p in parts)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (start, stop, step)):
        raise FlagError(f"range {text!r} needs numbers", field=name, fix="e.g. 0.5:0.95:0.01")
    if step <= 0 or stop < start:
        raise FlagError(f"range {text!r} needs STEP > 0 and STOP >= START", field=name, fix="e.g. 0.5:0.95:0.01")
    n = int((stop - start) / step + 1e-9) + 1
    if n > MAX_POINTS:
        raise FlagError(f"range {text!r} has {n} values (limit {MAX_POINTS})", field=name, fix="use a larger step")
    if all(isinstance(x, int) for x in (start, stop, step)):
        return tuple(range(start, stop + 1, step))
    digits = max(_decimals(p) for p in parts)
    return tuple(round(start + i * step, digits) for i in range(n))


def parse_axis(text: str) -> tuple[str, tuple[Any, ...]]:
    """``NAME=VALUES`` -> (flag name, values)."""
    if "=" not in text:
        raise FlagError(f"grid axis {text!r} is not NAME=VALUES", field="--grid",
                        fix="e.g. mem_fraction_static=0.5:0.95:0.01 or tp=1,2,4,8")
    raw, values = text.split("=", 1)
    name = axis_name(raw)
    if not name or not values.strip():
        raise FlagError(f"grid axis {text!r} is not NAME=VALUES", field="--grid", fix="e.g. tp=1,2,4,8")
    if ":" in values and "," not in values:
        return name, parse_range(name, values)
    return name, tuple(parse_value(v) for v in values.split(",") if v.strip())


def normalize(grid: Mapping[str, Any] | Iterable[str]) -> Axes:
    """A mapping (name -> values, a single value, or a ``VALUES`` string) or ``NAME=VALUES`` strings
    -> ((name, values), ...) in the given order; one name once; at most :data:`MAX_POINTS` points."""
    axes: list[tuple[str, tuple[Any, ...]]] = []
    if isinstance(grid, Mapping):
        for raw, values in grid.items():
            if isinstance(values, str):
                axes.append(parse_axis(f"{raw}={values}"))
            elif isinstance(values, (list, tuple, range)):
                axes.append((axis_name(raw), tuple(values)))
            else:
                axes.append((axis_name(raw), (values,)))
    else:
        axes = [parse_axis(t) for t in grid]
    seen: set[str] = set()
    total = 1
    for name, values in axes:
        if name in seen:
            raise FlagError(f"axis {name} given twice", field=name, fix="give each axis once")
        if not values:
            raise FlagError("an axis needs at least one value", field=name, fix="e.g. tp=1,2")
        seen.add(name)
        total *= len(values)
    if total > MAX_POINTS:
        raise FlagError(f"the grid has {total} points (limit {MAX_POINTS})", field="--grid",
                        fix="use fewer values or larger steps")
    return tuple(axes)


def split_fraction(axes: Axes, engine: str, flags: Mapping[str, Any]) -> tuple[str, tuple[Any, ...], Axes]:
    """(fraction flag, its values, the other axes): the fraction axis is evaluated in bulk; without
    one, the fixed flag's value (or the engine default, None) is the single value."""
    name = FRACTION_AXIS[engine]
    others = tuple(ax for ax in axes if ax[0] != name)
    values = next((v for n, v in axes if n == name), (flags.get(name),))
    return name, tuple(values), others


def point_flags(names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(names, values))
