"""Self-contained HTML reports (``--html FILE``) for plan, doctor, fit and sweep.

One file, no network: CSS and SVG inline, no script that runs, no external font, image or link
target. Every figure is taken from the same dict ``--json`` prints, and that dict is embedded as
``<script type="application/json" id="kvscope-data">`` so a reader (or a test) can diff the two.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any, Mapping, Sequence

from ..errors import KvscopeError
from ..hardware.gpus import get_gpu
from ..units import GiB
from .sections import PHASE_FAILED, failed_at_from_error
from .svg import curve_svg, sweep_svg, timeline_svg

__all__ = ["render_plan_html", "render_doctor_html", "doctor_sections", "render_fit_html", "render_sweep_html", "page", "CSS"]

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em auto;max-width:960px;color:#222;
line-height:1.4;padding:0 1em}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin-top:1.4em;border-bottom:1px solid #ddd}
code,pre,.cmd{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
.cmd{background:#f4f4f4;padding:.4em .6em;border-radius:4px;overflow-wrap:anywhere}
.meta{color:#555;font-size:.9em}
.banner{padding:.6em .9em;border-radius:5px;font-weight:600;margin:.8em 0}
.ok{background:#e3f4ea;border-left:6px solid #009E73}.fail{background:#fbe6dc;border-left:6px solid #D55E00}
.unknown{background:#eee;border-left:6px solid #999}
table{border-collapse:collapse;font-size:.9em;margin:.4em 0}td,th{border-bottom:1px solid #e5e5e5;padding:.2em .6em;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff1cc}tr.best td{background:#e3f4ea;font-weight:600}
.sev-error{color:#a00;font-weight:600}.sev-warning{color:#8a5a00;font-weight:600}.sev-info{color:#555}
.evidence{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.8em;color:#444;white-space:pre-wrap;margin:.2em 0 .6em 1em}
.est{color:#8a5a00;font-size:.85em}svg{max-width:100%;height:auto}
.bar{display:inline-block;height:.8em;background:#0072B2;vertical-align:middle}.bar.t{background:#009E73}
@media print{body{max-width:none}.banner{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


def _json_script(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=False).replace("</", "<\\/")
    return f'<script type="application/json" id="kvscope-data">{text}</script>'


def page(title: str, body: Sequence[str], data: Any, command: str, version: str, engine_line: str) -> str:
    """The document: header (command, kvscope version, engine and version), body, embedded JSON."""
    head = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{escape(title)}</title><style>{CSS}</style></head>')
    top = (f'<h1>{escape(title)}</h1><div class="cmd" id="command">{escape(command)}</div>'
           f'<p class="meta">kvscope <span id="kvscope-version">{escape(version)}</span> · '
           f'<span id="engine">{escape(engine_line)}</span></p>')
    return head + "<body>" + top + "".join(body) + _json_script(data) + "</body></html>\n"


def _engine_line(d: Mapping[str, Any], missing: str = "(version not printed)") -> str:
    name = {"sglang": "SGLang", "vllm": "vLLM"}.get(str(d.get("engine")), str(d.get("engine")))
    bits = [f"{name} {d.get('engine_version') or missing}"]
    if d.get("model"):
        bits.append(str(d["model"]))
    if d.get("gpu"):
        n = len(d.get("ranks") or ())
        gpu = _gpu_words(str(d["gpu"]))
        bits.append(f"{n}\u00d7 {gpu}" if n else gpu)
    return " · ".join(bits)


def _gpu_words(key: str) -> str:
    """``rtx-pro-6000`` -> ``NVIDIA RTX PRO 6000 Blackwell … (96 GiB)`` when the catalog knows it."""
    try:
        g = get_gpu(key)
    except KvscopeError:
        return key
    link = {"pcie": "PCIe", "nvlink": "NVLink", "nvlink-c2c": "NVLink-C2C", "infinity-fabric": "Infinity Fabric"}
    return f"{g.name} ({g.memory_mib / 1024:.0f} GiB, {link.get(g.interconnect.kind, g.interconnect.kind)})"


def _banner(d: Mapping[str, Any]) -> str:
    tokens = d.get("kv_cache_tokens")
    if d.get("starts") is True:
        per = f" \u2014 {tokens:,} KV tokens per rank" if isinstance(tokens, int) else ""
        return f'<div class="banner ok" id="verdict" data-starts="true">starts{per}</div>'
    if d.get("starts") is False:
        phase = _failing_phase(d)
        return (f'<div class="banner fail" id="verdict" data-starts="false">fails at {escape(phase)}: '
                f'{escape(str(d.get("error") or "the engine does not start"))}</div>')
    return '<div class="banner unknown" id="verdict">the log ends before the engine says whether it starts</div>'


def _failing_phase(d: Mapping[str, Any]) -> str:
    """The phase the start dies in, as the text verdict names it (``report/sections.py``)."""
    ranks = d.get("ranks") or ()
    phases = ranks[0].get("phases") or () if ranks else ()
    last = phases[-1] if phases else {}
    after = last.get("free_bytes_after") if isinstance(last, Mapping) else None
    if isinstance(after, int) and after < 0:
        return PHASE_FAILED.get(str(last.get("name")), str(last.get("name")))
    return failed_at_from_error(d.get("error"))


_KEY_FIGURES = (("kv_cache_tokens", "KV tokens (pool)", "tokens"), ("max_running_requests", "max running requests", ""),
                ("kv_cell_bytes", "KV bytes per token per rank", "B"), ("kv_cache_bytes", "KV pool per rank", "bytes"),
                ("weights_bytes", "weights per rank", "bytes"))


def _figures(d: Mapping[str, Any]) -> str:
    rows = []
    est = set(d.get("estimated") or ())
    for key, label, unit in _KEY_FIGURES:
        v = d.get(key)
        if v is None:
            shown = "\u2014"
        elif unit == "bytes":
            shown = f"{v / GiB:.2f} GiB ({v:,} B)"
        else:
            shown = f"{v:,}" + (f" {unit}" if unit else "")
        mark = ' <span class="est">estimated</span>' if key.replace("_bytes", "") in est else ""
        rows.append(f'<tr><td>{escape(label)}</td><td class="n" data-key="{key}" data-value="{escape(json.dumps(v))}">'
                    f'{shown}</td><td>{mark}</td></tr>')
    return '<table class="figures">' + "".join(rows) + "</table>"


def _fixes(d: Mapping[str, Any]) -> str:
    out = []
    if d.get("fix"):
        out.append("<h2>What to set</h2><ul>")
        out.extend(f'<li><code>{escape(str(f.get("flag")))} {escape(str(f.get("value")))}</code> \u2014 '
                   f'{escape(str(f.get("why", "")))}</li>' for f in d["fix"])
        out.append("</ul>")
    if d.get("warnings"):
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(str(w))}</li>" for w in d["warnings"]) + "</ul>")
    if d.get("estimated"):
        out.append(f'<p class="est">estimated (not measured): {escape(", ".join(map(str, d["estimated"])))}</p>')
    return "".join(out)


def _formula(d: Mapping[str, Any]) -> str:
    """The engine's sizing formula with its terms filled in (rank 0's decision record)."""
    ranks = d.get("ranks") or ()
    dec = ranks[0].get("decision", {}) if ranks else {}
    if d.get("engine") == "sglang" and isinstance(dec.get("rest_memory_gib"), (int, float)):
        pre, avail = dec.get("pre_model_load_gib"), dec.get("available_gpu_gib")
        f, mm = dec.get("mem_fraction_static"), dec.get("mm_reservation_gib") or 0.0
        src = "measured" if d.get("measured_inputs") else "estimated"
        text = (f"rest = {avail:.2f} ({src}) \u2212 {pre:.2f} ({src}) \u00d7 (1 \u2212 {f}) \u2212 {mm:.2f} "
                f"(reserve) = {dec['rest_memory_gib']:.2f} GiB")
        return f'<h2>The formula, filled in</h2><div class="cmd" id="formula">{escape(text)}</div>'
    if d.get("engine") == "vllm" and dec.get("formula"):
        terms = ", ".join(f"{k} = {dec[k] / GiB:.2f} GiB" for k in
                          ("requested_memory_bytes", "non_kv_cache_memory_bytes", "cudagraph_applied_bytes",
                           "available_kv_cache_bytes") if isinstance(dec.get(k), int))
        return (f'<h2>The formula, filled in</h2><div class="cmd" id="formula">{escape(str(dec["formula"]))}'
                f'<br>{escape(terms)}</div>')
    return ""


def render_plan_html(timeline: Mapping[str, Any], curve: Mapping[str, Any] | None, command: str,
                     version: str) -> str:
    """``kvscope plan --html``: banner, per-rank memory, the knob → tokens curve, formula, fixes."""
    body = [_banner(timeline), "<h2>Memory per rank</h2>", timeline_svg(timeline, "tl"), _figures(timeline)]
    if curve:
        body += [f"<h2>{escape(str(curve.get('knob')))} \u2192 KV tokens</h2>", curve_svg(curve, "cv")]
    body += [_formula(timeline), _fixes(timeline)]
    data = {"command": command, "kvscope_version": version, "timeline": dict(timeline), "curve": curve}
    return page("kvscope plan", body, data, command, version, _engine_line(timeline))


def _fmt(v: Any, what: str) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and ("bytes" in what or what.endswith("_before")
                                                          or what.endswith("_after")):
        return f"{v / GiB:.2f} GiB"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "\u2014" if v is None else escape(str(v))


def _comparison(rows: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2>Printed vs predicted, phase by phase</h2><table id="comparison"><tr><th>figure</th><th>rank</th>'
           '<th class="n">log printed</th><th class="n">plan predicts</th><th class="n">difference</th></tr>']
    for r in _fold_ranks(rows):
        what, delta = str(r.get("what")), r.get("delta")
        o, p = r.get("observed"), r.get("predicted")
        big = _beyond_rounding(what, delta)
        out.append(f'<tr class="{"diff" if big else ""}" data-what="{escape(what)}" data-delta="{escape(json.dumps(delta))}">'
                   f'<td>{escape(what)}{" <span class=est>est.</span>" if r.get("estimated") else ""}</td>'
                   f'<td>{escape(_ranks_text(r.get("ranks") or ()))}</td><td class="n">{_fmt(o, what)}</td>'
                   f'<td class="n">{_fmt(p, what)}</td><td class="n">{_fmt(delta, what)}</td></tr>')
    return "".join(out) + "</table>"


def _fold_ranks(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows that differ only by rank folded into one row with ``ranks`` (identical ranks folded)."""
    out: list[dict[str, Any]] = []
    index: dict[tuple, int] = {}
    for r in rows:
        key = (r.get("what"), r.get("observed"), r.get("predicted"), r.get("delta"), r.get("estimated"))
        rank = r.get("rank")
        if key in index and rank is not None:
            out[index[key]]["ranks"].append(rank)
            continue
        index[key] = len(out)
        out.append({**r, "ranks": [] if rank is None else [rank]})
    return out


def _ranks_text(ranks: Sequence[int]) -> str:
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}\u2013{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


def _beyond_rounding(what: str, delta: Any) -> bool:
    """A difference above the print rounding (0.005 GiB for memory figures, 0 for counts)."""
    if not isinstance(delta, (int, float)) or isinstance(delta, bool):
        return False
    if "bytes" in what or what.endswith(("_before", "_after")):
        return abs(delta) > 0.005 * GiB
    return delta != 0


def _checks(checks: Sequence[Mapping[str, Any]]) -> str:
    if not checks:
        return ""
    out = ['<h2>Recomputed from the log</h2><table id="checks"><tr><th>figure</th><th class="n">printed</th>'
           '<th class="n">recomputed</th><th>how</th></tr>']
    for c in checks:
        out.append(f'<tr class="{"" if c.get("agrees") else "diff"}" data-agrees="{str(bool(c.get("agrees"))).lower()}">'
                   f'<td>{escape(str(c.get("name")))}</td><td class="n">{escape(str(c.get("printed")))}</td>'
                   f'<td class="n">{escape(str(c.get("recomputed")))}</td><td>{escape(str(c.get("how")))}</td></tr>')
    return "".join(out) + "</table>"


def _findings(findings: Sequence[Mapping[str, Any]]) -> str:
    out = ['<h2>Findings</h2><ol id="findings">']
    for f in findings:
        sev = str(f.get("severity"))
        ev = "\n".join(str(e) for e in f.get("evidence") or ())
        out.append(f'<li data-code="{escape(str(f.get("code")))}"><span class="sev-{escape(sev)}">{escape(sev.upper())}'
                   f'</span> [{escape(str(f.get("code")))}] {escape(str(f.get("message")))}'
                   + (f'<div class="evidence">{escape(ev)}</div>' if ev else "")
                   + (f'<div>fix: {escape(str(f["fix"]))}</div>' if f.get("fix") else "") + "</li>")
    return "".join(out) + "</ol>" if findings else "<h2>Findings</h2><p>none</p>"


def render_doctor_html(report: Mapping[str, Any], command: str, version: str,
                       predicted: Mapping[str, Any] | None = None) -> str:
    """``kvscope doctor --html``: the log's per-rank memory (and the plan's, with ``--against``),
    printed vs predicted phase by phase with differences above print rounding highlighted, the
    recomputation checks and the findings with their evidence lines."""
    body = doctor_sections(report, predicted)
    data = {"command": command, "kvscope_version": version, "report": dict(report), "predicted": predicted}
    return page("kvscope doctor", body, data, command, version, _engine_line(report))


def doctor_sections(report: Mapping[str, Any], predicted: Mapping[str, Any] | None = None) -> list[str]:
    """The doctor report's sections (the HTML file's body, and the serve page's doctor panel)."""
    body = [_banner(report), "<h2>Memory per rank, as the log printed it</h2>", timeline_svg(report, "dtl"),
            _figures(report)]
    if predicted:
        body += ["<h2>Memory per rank, as plan predicts it</h2>", timeline_svg(predicted, "tp")]
    if report.get("comparison"):
        body.append(_comparison(report["comparison"]))
    body += [_checks(report.get("checks") or ()), _findings(report.get("findings") or ())]
    log = report.get("log") or {}
    if log:
        body.append(f'<p class="meta">read {log.get("lines", 0):,} lines; {log.get("recognised", 0):,} understood, '
                    f'{(report.get("unparsed") or {}).get("count", 0)} memory-looking lines not understood</p>')
    return body


def _throughput(o: Mapping[str, Any]) -> tuple[str, float] | None:
    """The option's predicted decode throughput, when fit provides one (``speed.decode_tokens_per_s``)."""
    speed = o.get("speed")
    if isinstance(speed, Mapping) and isinstance(speed.get("decode_tokens_per_s"), (int, float)):
        return "decode_tokens_per_s", float(speed["decode_tokens_per_s"])
    return None


def render_fit_html(res: Mapping[str, Any], command: str, version: str) -> str:
    """``kvscope fit --html``: the ranked options with KV tokens against the target and throughput."""
    opts = list(res.get("options") or ())
    target = res.get("target_tokens") or 0
    peak = max([o.get("kv_cache_tokens") or 0 for o in opts] + [target, 1])
    tps = [t for t in (_throughput(o) for o in opts) if t]
    tmax = max([v for _, v in tps] + [1.0])
    fits = bool(res.get("fits"))
    body = [f'<div class="banner {"ok" if fits else "fail"}" id="verdict" data-fits="{str(fits).lower()}">'
            f'{"fits" if fits else "nothing fits"}: {res.get("concurrency")} requests \u00d7 '
            f'{res.get("context_tokens"):,} tokens = {target:,} KV tokens on up to {res.get("gpus")}\u00d7 '
            f'{escape(str(res.get("gpu")))}</div>',
            '<h2>Options, best first</h2><table id="options"><tr><th>#</th><th>option</th><th class="n">GPUs</th>'
            '<th class="n">knob</th><th class="n">KV tokens</th><th>vs target</th><th class="n">decode throughput at the target</th></tr>']
    for i, o in enumerate(opts, 1):
        c = o.get("candidate") or {}
        tok = o.get("kv_cache_tokens") or 0
        tp = _throughput(o)
        ttft = (o.get("speed") or {}).get("ttft_s") if isinstance(o.get("speed"), Mapping) else None
        tcell = (f'{tp[1]:,.0f} tok/s <span class="bar t" style="width:{60 * tp[1] / tmax:.0f}px"></span>'
                 + (f' TTFT {ttft:.2f} s' if isinstance(ttft, (int, float)) else "") + ' <span class="est">est.</span>'
                 if tp else "\u2014")
        out = (f'<tr class="{"best" if i == 1 else ""}" data-rank="{i}" data-tokens="{tok}" '
               f'data-throughput="{tp[1] if tp else ""}"><td>{i}</td><td>{escape(str(c.get("label")))}</td>'
               f'<td class="n">{c.get("num_gpus")}</td><td class="n">{escape(str(o.get("knob")))} '
               f'{o.get("recommended", o.get("fraction"))}</td>'
               f'<td class="n">{tok:,}</td><td><span class="bar" style="width:{120 * tok / peak:.0f}px"></span> '
               f'{(tok / target if target else 0):.2f}\u00d7</td><td class="n">{tcell}</td></tr>')
        body.append(out)
    body.append("</table>")
    if opts:
        body.append(f'<h2>Launch the recommended option</h2><div class="cmd" id="launch">'
                    f'{escape(str(opts[0].get("command")))}</div>')
    if res.get("rejected"):
        body.append("<h2>Rejected layouts</h2><ul>" + "".join(
            f'<li>{escape(str((r.get("candidate") or {}).get("label")))}: {escape(str(r.get("reason")))}</li>'
            for r in res["rejected"]) + "</ul>")
    data = {"command": command, "kvscope_version": version, "fit": dict(res)}
    return page("kvscope fit", body, data, command, version, _engine_line(res))


def _cell(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else escape(str(v))


def render_sweep_html(result: Mapping[str, Any], command: str, version: str) -> str:
    """``kvscope sweep --html``: the sweep's rows as a table (whatever keys the sweep prints)."""
    rows = [r for r in (result.get("rows") or result.get("results") or ()) if isinstance(r, Mapping)]
    keys = list(result.get("columns") or dict.fromkeys(k for r in rows for k in r))
    n_ok = sum(1 for r in rows if r.get("verdict") == "starts")
    body = [f'<div class="banner {"ok" if n_ok == len(rows) else "fail" if not n_ok else "unknown"}" id="verdict">'
            f'{n_ok:,} of {len(rows):,} points start</div>', "<h2>KV tokens across the grid</h2>",
            sweep_svg(result), '<h2>Points</h2><table id="sweep"><tr>'
            + "".join(f"<th>{escape(str(k))}</th>" for k in keys) + "</tr>"]
    body += [f'<tr class="{"" if r.get("verdict") == "starts" else "diff"}">'
             + "".join(f"<td>{_cell(r.get(k))}</td>" for k in keys) + "</tr>" for r in rows]
    body.append("</table>")
    data = {"command": command, "kvscope_version": version, "sweep": dict(result)}
    return page("kvscope sweep", body, data, command, version, _engine_line(result, "(latest modelled)"))
