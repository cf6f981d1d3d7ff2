"""``--png FILE``: the per-rank memory chart through matplotlib (the optional ``plots`` extra).

matplotlib is imported only here, only when a PNG is asked for; without it the command stops with
one line naming the extra. The segments are ``svg.timeline_segments`` (the same numbers as the SVG
and ``--json``); estimated segments are hatched.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import FlagError
from ..units import GiB
from .svg import PART_LABELS, rank_groups, timeline_segments

__all__ = ["timeline_png"]

_COLOURS = {"context": "#999999", "weights": "#0072B2", "draft": "#56B4E9", "profile": "#CC79A7", "kv": "#009E73",
            "pools": "#F0E442", "graphs": "#E69F00", "activation": "#D55E00", "free": "#FFFFFF", "unknown": "#E5E5E5",
            "gap": "#BBBBBB", "short": "#FF0000"}


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise FlagError("--png needs matplotlib, which is not installed", field="--png",
                        fix="pip install 'kvscope[plots]', or use --svg (no dependency)") from None
    return plt


def timeline_png(t: Mapping[str, Any], path: str) -> None:
    """Draw ``Timeline.to_dict()`` as horizontal stacked bars (identical ranks folded) into ``path``."""
    plt = _pyplot()
    groups = [(ranks, *timeline_segments(t, r)) for ranks, r in rank_groups(t)]
    groups = [g for g in groups if g[2]]
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * max(len(groups), 1)))
    seen: set[str] = set()
    for i, (ranks, top, segs) in enumerate(groups):
        left = 0.0
        for s in segs:
            w = s["bytes"] / GiB
            label = PART_LABELS.get(s["part"], s["part"]) if s["part"] not in seen else None
            seen.add(s["part"])
            if s["part"] == "short":  # below zero free: drawn over the overrun, past the bar's end
                ax.barh(i, -w, left=top / GiB, color="#FF0000", alpha=0.5, edgecolor="#333", label=label)
                continue
            ax.barh(i, w, left=left, color=_COLOURS.get(s["part"], "#ccc"), edgecolor="#333", linewidth=0.5,
                    hatch="//" if s["estimated"] else None, label=label)
            left += w
    ax.set_yticks(range(len(groups)))
    ax.set_yticklabels([f"rank {r[0]}" if len(r) == 1 else f"ranks {r[0]}-{r[-1]}" for r, *_ in groups])
    ax.invert_yaxis()
    ax.set_xlabel("GiB (hatched: estimated)")
    engine = {"sglang": "SGLang", "vllm": "vLLM"}.get(str(t.get("engine")), str(t.get("engine")))
    ax.set_title(f"{engine} {t.get('engine_version') or ''} · {t.get('model') or ''}: memory per rank")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=5, fontsize=8, frameon=False)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
