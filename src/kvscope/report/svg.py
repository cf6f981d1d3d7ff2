"""Charts as standard-library SVG, drawn from the ``--json`` dicts (nothing is recomputed here).

- ``timeline_svg(timeline)``: one stacked bar per group of identical ranks; segments in start-up
  order (CUDA context + communicators, weights, draft weights, profiling, KV cache, request pools,
  CUDA graphs, activation peak, free at the end). Estimated segments are hatched. A dashed line marks
  the engine's budget boundary (SGLang: pre-load free × (1 − fraction) must stay free; vLLM: total ×
  utilization), and a negative KV budget is a red overhang labelled with its GiB.
- ``curve_svg(curve)``: KV tokens against the memory knob, with the marked values, and a small
  panel of max running requests.

Every drawn figure carries its exact number as a ``data-*`` attribute (bytes, tokens), so a test
(or a reader) can check the picture against ``--json``. Colours: Okabe–Ito (colour-blind safe).
"""

from __future__ import annotations

import itertools
from html import escape
from typing import Any, Mapping, Sequence

from ..units import GiB as GIB

__all__ = ["timeline_svg", "curve_svg", "sweep_svg", "rank_groups", "timeline_segments", "PART_LABELS"]

# phase name -> (part key, label, colour)
_PARTS = (
    ("init", "context", "CUDA context + communicators", "#999999"),
    ("load_weights", "weights", "weights", "#0072B2"),
    ("load_draft_weights", "draft", "draft weights", "#56B4E9"),
    ("profile", "profile", "profiling (non-torch)", "#CC79A7"),
    ("kv_cache", "kv", "KV cache", "#009E73"),
    ("req_to_token_pool", "pools", "request pools", "#F0E442"),
    ("cuda_graph", "graphs", "CUDA graphs", "#E69F00"),
)
PART_LABELS = {key: label for _, key, label, _ in _PARTS}
PART_LABELS.update({"activation": "activation peak (reserve)", "free": "free at the end",
                    "unknown": "before the first printed figure", "gap": "used between printed steps",
                    "short": "short: below zero free"})
_COLOURS = {key: colour for _, key, _, colour in _PARTS}
_COLOURS.update({"activation": "#D55E00", "free": "#FFFFFF", "unknown": "#E5E5E5", "gap": "#BBBBBB",
                 "short": "#FF0000"})
_SHORT_OPACITY = ' fill-opacity="0.5"'
_PHASE_PART = {phase: key for phase, key, _, _ in _PARTS}
_W, _LABEL_W, _BAR_H, _GAP = 860, 120, 30, 22


def _gib(b: float) -> str:
    return f"{b / GIB:.2f}"


def _ranks_label(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}\u2013{ranks[-1]}"
    return "ranks " + ",".join(str(r) for r in ranks)


def rank_groups(t: Mapping[str, Any]) -> list[tuple[list[int], Mapping[str, Any]]]:
    """Identical ranks folded: [(rank numbers, the first rank's dict)], in rank order."""
    groups: list[tuple[list[int], Mapping[str, Any]]] = []
    seen: dict[str, int] = {}
    for r in t.get("ranks", ()):
        key = repr([(p["name"], p.get("free_bytes_before"), p.get("free_bytes_after")) for p in r.get("phases", ())])
        if key in seen:
            groups[seen[key]][0].append(r.get("rank", 0))
        else:
            seen[key] = len(groups)
            groups.append(([r.get("rank", 0)], r))
    return groups


def _total_bytes(t: Mapping[str, Any], phases: Sequence[Mapping[str, Any]]) -> int | None:
    first = phases[0].get("free_bytes_before") if phases else None
    if isinstance(first, int):
        return first
    req, util = t.get("requested_memory_bytes"), t.get("gpu_memory_utilization")
    if isinstance(req, int) and isinstance(util, (int, float)) and util > 0:
        return round(req / util)  # vLLM: requested = total × utilization
    return None


def timeline_segments(t: Mapping[str, Any], rank: Mapping[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """(bar top in bytes, segments): each {part, label, bytes, estimated, note}; they sum to the top."""
    phases = [p for p in rank.get("phases", ()) if isinstance(p, Mapping)]
    est_names = set(t.get("estimated", ()))
    known = [p for p in phases if isinstance(p.get("free_bytes_after"), int)]
    if not known:
        return 0, []
    top = _total_bytes(t, phases) or max(
        (p.get("free_bytes_before") or p["free_bytes_after"]) for p in known)
    segs: list[dict[str, Any]] = []
    level = top
    for p in known:
        after = p["free_bytes_after"]
        part = _PHASE_PART.get(p["name"], "unknown")
        before = p.get("free_bytes_before")
        before = level if before is None else before
        if before < level:  # memory went between two printed steps
            segs.append({"part": "gap", "label": PART_LABELS["gap"], "bytes": level - before, "estimated": False,
                         "note": "free memory fell between two printed figures"})
        used = before - after
        if used:
            segs.append({"part": part, "label": PART_LABELS.get(part, p["name"]), "bytes": used,
                         "estimated": bool(p.get("estimated")) or p.get("free_bytes_before") is None,
                         "note": p.get("note", "")})
        level = after
    act = rank.get("decision", {}).get("activation_peak_bytes") if isinstance(rank.get("decision"), Mapping) else None
    if isinstance(act, int) and 0 < act <= level:
        segs.append({"part": "activation", "label": PART_LABELS["activation"], "bytes": act,
                     "estimated": "activation_peak" in est_names, "note": "transient, freed after profiling"})
        level -= act
    if level < 0:  # the figures go below zero free: what is missing, drawn past the bar's end
        segs.append({"part": "short", "label": PART_LABELS["short"], "bytes": level, "estimated": False,
                     "note": "more than the GPU had free"})
    else:
        segs.append({"part": "free", "label": PART_LABELS["free"], "bytes": level, "estimated": False, "note": ""})
    return top, segs


def _boundary(t: Mapping[str, Any], rank: Mapping[str, Any], top: int) -> tuple[int, str] | None:
    """The engine's budget boundary as bytes used from the bar's start, with its label."""
    d = rank.get("decision", {}) if isinstance(rank.get("decision"), Mapping) else {}
    if t.get("engine") == "vllm":
        req = d.get("requested_memory_bytes", t.get("requested_memory_bytes"))
        if isinstance(req, int):
            return req, f"requested = total \u00d7 {t.get('gpu_memory_utilization')}"
        return None
    pre = d.get("pre_model_load_bytes", t.get("pre_model_load_bytes", t.get("pre_model_load_memory_bytes")))
    f = d.get("mem_fraction_static", t.get("mem_fraction_static"))
    if isinstance(pre, int) and isinstance(f, (int, float)):
        mm = d.get("mm_reservation_gib") or 0.0
        keep = pre * (1 - f) + mm * GIB
        return round(top - keep), f"budget: pre-load free \u00d7 {f} (keeps {_gib(keep)} GiB free)"
    return None


def _defs(uid: str) -> str:
    return (f'<defs><pattern id="{uid}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="none"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-opacity="0.35" stroke-width="2"/>'
            f'</pattern></defs>')


def timeline_svg(t: Mapping[str, Any], uid: str = "tl") -> str:
    """The per-rank stacked memory bar chart of a ``Timeline.to_dict()`` (plan, doctor or probe)."""
    groups = rank_groups(t)
    bars = [(ranks, r, *timeline_segments(t, r)) for ranks, r in groups]
    bars = [b for b in bars if b[3]]
    scale_top = max((b[2] - sum(s["bytes"] for s in b[3] if s["part"] == "short") for b in bars), default=0)
    if not bars or scale_top <= 0:
        return '<svg xmlns="http://www.w3.org/2000/svg" class="kv-timeline" width="400" height="30">' \
               '<text x="4" y="20">no memory figures to draw</text></svg>'
    px = (_W - _LABEL_W - 20) / scale_top
    rows_h = len(bars) * (_BAR_H + _GAP)
    legend = _legend(bars, rows_h + 50, uid)
    h = rows_h + 50 + 18 * sum(1 for x in legend if x.startswith("<!--row-->")) + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="kv-timeline" viewBox="0 0 {_W} {h}" width="{_W}" '
           f'height="{h}" font-family="sans-serif" font-size="11" role="img" '
           f'aria-label="memory per rank">', _defs(uid)]
    for i, (ranks, r, top, segs) in enumerate(bars):
        y = 10 + i * (_BAR_H + _GAP)
        out.append(f'<g class="kv-rank" data-ranks="{",".join(map(str, ranks))}" data-top-bytes="{top}">')
        out.append(f'<text x="4" y="{y + _BAR_H / 2 + 4}">{escape(_ranks_label(ranks))}</text>')
        x = float(_LABEL_W)
        for s in segs:
            w = abs(s["bytes"]) * px
            if s["part"] == "short":
                x = _LABEL_W + top * px
            src = "estimated" if s["estimated"] else "printed/measured"
            title = f'{s["label"]}: {_gib(s["bytes"])} GiB ({s["bytes"]:,} B), {src}' + (
                f' \u2014 {s["note"]}' if s["note"] else "")
            out.append(f'<rect class="seg" data-part="{s["part"]}" data-bytes="{s["bytes"]}" '
                       f'data-estimated="{str(s["estimated"]).lower()}" x="{x:.2f}" y="{y}" width="{max(w, 0):.2f}" '
                       f'height="{_BAR_H}" fill="{_COLOURS.get(s["part"], "#ccc")}" stroke="#333" stroke-width="0.5"'
                       f'{_SHORT_OPACITY if s["part"] == "short" else ""}>'
                       f'<title>{escape(title)}</title></rect>')
            if s["estimated"] and w > 0:
                out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{_BAR_H}" '
                           f'fill="url(#{uid}-hatch)" pointer-events="none"/>')
            if w > 46:
                out.append(f'<text x="{x + 3:.2f}" y="{y + _BAR_H / 2 + 4}" pointer-events="none">'
                           f'{_gib(s["bytes"])}</text>')
            x += w
        out.extend(_boundary_marks(t, r, top, y, px))
        out.append("</g>")
    out.extend(_axis(scale_top, px, rows_h + 10))
    out.extend(x for x in legend if not x.startswith("<!--row-->"))
    out.append("</svg>")
    return "".join(out)


def _boundary_marks(t: Mapping[str, Any], r: Mapping[str, Any], top: int, y: int, px: float) -> list[str]:
    b = _boundary(t, r, top)
    if b is None:
        return []
    used, label = b
    x = _LABEL_W + used * px
    out = [f'<line class="budget" data-bytes="{used}" x1="{x:.2f}" y1="{y - 4}" x2="{x:.2f}" y2="{y + _BAR_H + 4}" '
           f'stroke="#000" stroke-width="2" stroke-dasharray="4 2"><title>{escape(label)}</title></line>']
    d = r.get("decision", {}) if isinstance(r.get("decision"), Mapping) else {}
    rest = d.get("rest_memory_gib")
    if t.get("engine") == "sglang" and isinstance(rest, (int, float)) and rest < 0:
        w = -rest * GIB * px
        out.append(f'<rect class="overhang" data-gib="{rest:.2f}" x="{x:.2f}" y="{y + 4}" width="{w:.2f}" '
                   f'height="{_BAR_H - 8}" fill="#D55E00" fill-opacity="0.75" stroke="#a00">'
                   f'<title>KV budget {rest:.2f} GiB: the weights run past the budget boundary</title></rect>')
        out.append(f'<text x="{x + 2:.2f}" y="{y + _BAR_H + 14}" fill="#a00" font-weight="bold">'
                   f'KV budget {rest:.2f} GiB</text>')
    return out


def _axis(top: int, px: float, y: int) -> list[str]:
    gib = top / GIB
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if gib / s <= 10)
    out = [f'<line x1="{_LABEL_W}" y1="{y}" x2="{_LABEL_W + top * px:.2f}" y2="{y}" stroke="#333"/>']
    for k in itertools.count():
        v = k * step
        if v > gib + 1e-9:
            break
        x = _LABEL_W + v * GIB * px
        out.append(f'<line x1="{x:.2f}" y1="{y}" x2="{x:.2f}" y2="{y + 4}" stroke="#333"/>'
                   f'<text x="{x:.2f}" y="{y + 16}" text-anchor="middle">{v:g}</text>')
    out.append(f'<text x="{_LABEL_W}" y="{y + 30}">GiB used from the start of the bar (full width: the GPU\'s '
               f'memory, or the first printed free figure)</text>')
    return out


def _legend(bars: list, y: int, uid: str) -> list[str]:
    parts = list(dict.fromkeys(s["part"] for b in bars for s in b[3]))
    out, x = [], 4.0
    for p in parts:
        label = PART_LABELS.get(p, p)
        out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="{_COLOURS.get(p, "#ccc")}" '
                   f'stroke="#333" stroke-width="0.5"/><text x="{x + 16:.1f}" y="{y + 10}">{escape(label)}</text>')
        x += 26 + 6.2 * len(label)
        if x > _W - 150:
            x, y = 4.0, y + 18
            out.append("<!--row-->")
    out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="url(#{uid}-hatch)" stroke="#333" '
               f'stroke-width="0.5"/><text x="{x + 16:.1f}" y="{y + 10}">hatched: estimated</text>')
    return out


_CW, _CH, _CL, _CT = 860, 300, 80, 20  # curve chart width, plot height, left margin, top margin


def curve_svg(c: Mapping[str, Any], uid: str = "cv") -> str:
    """KV tokens (and max running requests) against the memory knob of a ``Curve.to_dict()``."""
    pts = [p for p in c.get("points", ()) if isinstance(p.get("value"), (int, float))]
    if not pts:
        return '<svg xmlns="http://www.w3.org/2000/svg" class="kv-curve" width="400" height="30"></svg>'
    ymax = max([p.get("kv_cache_tokens") or 0 for p in pts] + [c.get("context_tokens") or 0, 1])
    pw = _CW - _CL - 30
    X = lambda v: _CL + v * pw  # noqa: E731 -- x axis spans 0..1
    Y = lambda n: _CT + _CH - (n / ymax) * _CH  # noqa: E731
    h = _CT + _CH + 50 + 130
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="kv-curve" viewBox="0 0 {_CW} {h}" width="{_CW}" '
           f'height="{h}" font-family="sans-serif" font-size="11" role="img" aria-label="KV tokens against '
           f'{escape(c.get("knob") or "")}">']
    mv, neg = c.get("min_viable"), c.get("headroom_negative_from")
    left = mv if isinstance(mv, (int, float)) else (1.0 if not any(p["starts"] for p in pts) else None)
    if left:
        err = (c.get("error_below") or "the engine does not start")
        short = err[:70] + ("\u2026" if len(err) > 70 else "")
        out.append(f'<rect class="fails-region" x="{X(0):.2f}" y="{_CT}" width="{X(left) - X(0):.2f}" height="{_CH}" '
                   f'fill="#D55E00" fill-opacity="0.12"><title>{escape(err)}</title></rect>'
                   f'<text x="{X(0) + 4:.2f}" y="{_CT + 14}" fill="#a00">start-up error below '
                   f'{left:g}: {escape(short)}</text>')
    above = c.get("fails_above")
    if isinstance(above, (int, float)):
        err = c.get("error_above") or "the engine does not start"
        short = err[:60] + ("\u2026" if len(err) > 60 else "")
        out.append(f'<rect class="fails-above-region" x="{X(above):.2f}" y="{_CT}" width="{X(1) - X(above):.2f}" '
                   f'height="{_CH}" fill="#D55E00" fill-opacity="0.12"><title>{escape(err)}</title></rect>'
                   f'<text x="{X(1) - 4:.2f}" y="{_CT + _CH - 30}" fill="#a00" text-anchor="end">fails above '
                   f'{above:g}: {escape(short)}</text>')
    elif isinstance(neg, (int, float)):
        out.append(f'<rect class="headroom-region" x="{X(neg):.2f}" y="{_CT}" width="{X(1) - X(neg):.2f}" '
                   f'height="{_CH}" fill="#E69F00" fill-opacity="0.18"><title>estimated runtime headroom &lt; 0 from '
                   f'{neg:g}: CUDA graphs / activations may run out of memory (torch.OutOfMemoryError at capture or '
                   f'first request)</title></rect>')
    out.extend(_curve_axes(ymax, X, Y))
    line = " ".join(f"{X(p['value']):.2f},{Y(p.get('kv_cache_tokens') or 0):.2f}" for p in pts)
    out.append(f'<polyline points="{line}" fill="none" stroke="#0072B2" stroke-width="2"/>')
    for p in pts:
        tok = p.get("kv_cache_tokens") or 0
        out.append(f'<circle class="pt" data-value="{p["value"]}" data-tokens="{p.get("kv_cache_tokens")}" '
                   f'data-max-running="{p.get("max_running_requests")}" data-starts="{str(p["starts"]).lower()}" '
                   f'cx="{X(p["value"]):.2f}" cy="{Y(tok):.2f}" r="2" fill="#0072B2"><title>{c.get("knob")} '
                   f'{p["value"]:g}: {tok:,} KV tokens{"" if p["starts"] else " (does not start)"}</title></circle>')
    out.extend(_curve_marks(c, pts, X, Y))
    out.extend(_requests_panel(pts, X, _CT + _CH + 50))
    out.append("</svg>")
    return "".join(out)


def _curve_axes(ymax: int, X, Y) -> list[str]:
    out = [f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(1)}" y2="{Y(0)}" stroke="#333"/>'
           f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(0)}" y2="{Y(ymax)}" stroke="#333"/>']
    for i in range(11):
        v = i / 10
        out.append(f'<line x1="{X(v):.2f}" y1="{Y(0)}" x2="{X(v):.2f}" y2="{Y(0) + 4}" stroke="#333"/>'
                   f'<text x="{X(v):.2f}" y="{Y(0) + 16}" text-anchor="middle">{v:.1f}</text>')
    for i in range(5):
        n = ymax * i / 4
        out.append(f'<text x="{X(0) - 4:.2f}" y="{Y(n) + 4:.2f}" text-anchor="end">{int(n):,}</text>'
                   f'<line x1="{X(0)}" y1="{Y(n):.2f}" x2="{X(1)}" y2="{Y(n):.2f}" stroke="#ddd"/>')
    return out


_MARKS = (("min_viable", "min viable", "#D55E00"), ("engine_default", "engine default", "#555"),
          ("user_value", "your value", "#000"), ("full_context_value", "one full-context request fits", "#009E73"),
          ("concurrency_value", "requested concurrency fits", "#56B4E9"))


def _curve_marks(c: Mapping[str, Any], pts, X, Y) -> list[str]:
    out = []
    by_value = {p["value"]: p for p in pts}
    for i, (key, label, colour) in enumerate(_MARKS):
        v = c.get(key)
        if not isinstance(v, (int, float)):
            continue
        p = by_value.get(v)
        tok = p.get("kv_cache_tokens") if p else None
        text = f"{label} {v:g}" + (f" \u2192 {tok:,} tokens" if isinstance(tok, int) and tok else "")
        ly = _CT + 30 + 14 * i
        out.append(f'<g class="mark" data-mark="{key}" data-value="{v}" data-tokens="{tok}">'
                   f'<line x1="{X(v):.2f}" y1="{_CT}" x2="{X(v):.2f}" y2="{Y(0)}" stroke="{colour}" '
                   f'stroke-width="1.5" stroke-dasharray="5 3"/>'
                   f'<text x="{X(v) + (-4 if v > 0.6 else 4):.2f}" y="{ly}" fill="{colour}" '
                   f'text-anchor="{"end" if v > 0.6 else "start"}">{escape(text)}</text></g>')
    slope = c.get("tokens_per_0_01")
    if isinstance(slope, int):
        out.append(f'<text class="slope" x="{X(1) - 4:.2f}" y="{Y(0) - 8}" text-anchor="end">each +0.01 of '
                   f'{escape(c.get("knob") or "")} buys {slope:,} tokens</text>')
    out.append(f'<text x="{X(0.5):.2f}" y="{Y(0) + 32}" text-anchor="middle">{escape(c.get("knob") or "")}</text>'
               f'<text x="12" y="{_CT + _CH / 2}" transform="rotate(-90 12 {_CT + _CH / 2})" '
               f'text-anchor="middle">KV tokens</text>')
    return out


def _requests_panel(pts, X, top: int) -> list[str]:
    vals = [p.get("max_running_requests") or 0 for p in pts]
    ymax = max(vals + [1])
    ph = 90
    Y = lambda n: top + ph - n / ymax * ph  # noqa: E731
    line = " ".join(f"{X(p['value']):.2f},{Y(v):.2f}" for p, v in zip(pts, vals))
    return [f'<g class="requests-panel"><text x="{X(0)}" y="{top - 6}">max running requests (peak {ymax:,})</text>'
            f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(1)}" y2="{Y(0)}" stroke="#333"/>'
            f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(0)}" y2="{Y(ymax)}" stroke="#333"/>'
            f'<text x="{X(0) - 4}" y="{Y(ymax) + 4}" text-anchor="end">{ymax:,}</text>'
            f'<polyline points="{line}" fill="none" stroke="#CC79A7" stroke-width="2"/></g>']


_SERIES = ("#0072B2", "#009E73", "#D55E00", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")


def sweep_svg(result: Mapping[str, Any], uid: str = "sw") -> str:
    """KV tokens against a sweep's first numeric axis, one line per combination of the other axes
    (up to 8). Points that do not start are hollow red. Empty when the first axis is not numeric."""
    axes = list((result.get("axes") or {}).items())
    rows = [r for r in result.get("rows") or () if isinstance(r, Mapping)]
    if not axes or not rows:
        return ""
    xname = axes[0][0]
    xs = [r.get(xname) for r in rows]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs):
        return ""
    others = [n for n, _ in axes[1:]]
    series: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        series.setdefault(tuple(r.get(n) for n in others), []).append(r)
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1
    ymax = max([r.get("tokens") or 0 for r in rows] + [1])
    pw = _CW - _CL - 30
    X = lambda v: _CL + (v - lo) / span * pw  # noqa: E731
    Y = lambda n: _CT + _CH - (n / ymax) * _CH  # noqa: E731
    h = _CT + _CH + 50 + 18 * min(len(series), 8)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="kv-sweep" viewBox="0 0 {_CW} {h}" width="{_CW}" '
           f'height="{h}" font-family="sans-serif" font-size="11" role="img" aria-label="sweep">',
           f'<line x1="{_CL}" y1="{Y(0)}" x2="{X(hi):.2f}" y2="{Y(0)}" stroke="#333"/>',
           f'<line x1="{_CL}" y1="{Y(0)}" x2="{_CL}" y2="{Y(ymax)}" stroke="#333"/>',
           f'<text x="{_CL + pw / 2:.2f}" y="{Y(0) + 32}" text-anchor="middle">{escape(xname)}</text>']
    for v in sorted(set(xs))[:: max(1, len(set(xs)) // 10)]:
        out.append(f'<text x="{X(v):.2f}" y="{Y(0) + 16}" text-anchor="middle">{v:g}</text>')
    for i in range(5):
        n = ymax * i / 4
        out.append(f'<text x="{_CL - 4}" y="{Y(n) + 4:.2f}" text-anchor="end">{int(n):,}</text>'
                   f'<line x1="{_CL}" y1="{Y(n):.2f}" x2="{X(hi):.2f}" y2="{Y(n):.2f}" stroke="#ddd"/>')
    for k, (key, pts) in enumerate(list(series.items())[:8]):
        colour = _SERIES[k]
        label = ", ".join(f"{n}={v}" for n, v in zip(others, key)) or "tokens"
        line = " ".join(f"{X(r[xname]):.2f},{Y(r.get('tokens') or 0):.2f}" for r in pts)
        out.append(f'<g class="series" data-series="{escape(label)}"><polyline points="{line}" fill="none" '
                   f'stroke="{colour}" stroke-width="1.5"/>')
        for r in pts:
            ok = r.get("verdict") == "starts"
            out.append(f'<circle class="pt" data-x="{r[xname]}" data-tokens="{r.get("tokens")}" '
                       f'data-verdict="{escape(str(r.get("verdict")))}" cx="{X(r[xname]):.2f}" '
                       f'cy="{Y(r.get("tokens") or 0):.2f}" r="2.5" fill="{colour if ok else "none"}" '
                       f'stroke="{colour if ok else "#D55E00"}"><title>{escape(label)} {escape(xname)}='
                       f'{r[xname]}: {r.get("tokens") or 0:,} tokens, {escape(str(r.get("verdict")))}</title></circle>')
        ly = _CT + _CH + 44 + 18 * k
        out.append(f'<rect x="{_CL}" y="{ly}" width="12" height="3" fill="{colour}"/>'
                   f'<text x="{_CL + 18}" y="{ly + 5}">{escape(label)}</text></g>')
    out.append("</svg>")
    return "".join(out)
