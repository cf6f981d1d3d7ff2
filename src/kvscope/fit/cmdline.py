"""Command lines for an option: flag rendering, the knob's value text, the ``kvscope plan`` line."""

from __future__ import annotations

import math
import shlex
from typing import Any, Mapping

from ..units import GiB, gib_to_bytes
from .request import FitRequest


def _flag_value(v: Any) -> str:
    return shlex.quote(str(v))


def _render_flags(flags: Mapping[str, Any]) -> str:
    parts = []
    for k, v in flags.items():
        if v is True:
            parts.append(k)
        elif v is False or v is None:
            continue
        else:
            parts.append(f"{k} {_flag_value(v)}")
    return " ".join(parts)


def _fmt_fraction(x: float, step: float) -> float:
    """A grid value with the grid's decimals (0.93, not 0.9300000000000001); an off-grid fixed value as given."""
    digits = max(2, -int(math.floor(math.log10(step) + 1e-9)))
    y = round(x, digits)
    return y if abs(y - x) < 1e-9 else round(x, 6)


def _gib_arg(b: int) -> str:
    """Shortest GiB text that ``gib_to_bytes`` turns back into exactly ``b`` bytes."""
    for digits in range(1, 17):
        text = f"{b / GiB:.{digits}f}".rstrip("0").rstrip(".")
        if gib_to_bytes(float(text)) == b:
            return text
    return repr(b / GiB)


def _plan_cli(r: FitRequest, flags: Mapping[str, Any], engine: str) -> str:
    """The ``kvscope plan`` line for an option (its parser takes the engines' flag names)."""
    base = f"kvscope plan {shlex.quote(r.model_ref or r.spec.name)}"
    if r.gpu_ref or r.gpu_memory_mib is None:
        base += f" --gpu {shlex.quote(r.gpu_ref or r.gpu.key)}"
    if r.gpu_memory_mib is not None:
        base += f" --gpu-memory-mib {r.gpu_memory_mib}"
    if engine == "vllm":
        base += " --engine vllm"
    if r.version:
        base += f" --engine-version {shlex.quote(r.version)}"
    plan_flags: dict[str, Any] = {}
    for k, v in flags.items():
        if k == "--attn-dp-size":
            plan_flags["--dp"] = v
            plan_flags["--enable-dp-attention"] = True
        else:
            plan_flags[k] = v
    if r.measured is not None:
        for name, vals in (("--pre-load-free-gib", r.measured.pre_load_free_bytes),
                           ("--post-load-free-gib", r.measured.post_load_free_bytes)):
            if vals:
                plan_flags[name] = ",".join(_gib_arg(b) for b in vals)
    return f"{base} {_render_flags(plan_flags)}"
