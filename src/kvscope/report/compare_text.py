"""Text rendering of ``kvscope compare``: one column per engine release, one row per term."""

from __future__ import annotations

from ..compare import Comparison

GiB = 2 ** 30


def _gib(b: int) -> str:
    return f"{b / GiB:.2f} GiB"


ROWS = (
    ("knob", lambda c: f"{c.knob} {c.fraction:g}"),
    ("fraction of", lambda c: c.fraction_of),
    ("  that memory", lambda c: _gib(c.fraction_base_bytes)),
    ("  x fraction (budget)", lambda c: _gib(c.budget_bytes)),
    ("weights per rank", lambda c: _gib(c.weights_bytes)),
    ("activation/graph reserve", lambda c: _gib(c.reserve_bytes)
     + (" (subtracted inside the budget)" if c.reserve_in_budget else " (outside the budget)")),
    ("KV budget", lambda c: _gib(c.kv_budget_bytes)),
    ("KV allocated", lambda c: _gib(c.kv_cache_bytes)),
    ("cell (B/token/rank)", lambda c: f"{c.cell_bytes:,}"),
    ("page / block", lambda c: f"{c.page_tokens} tokens, {c.block_bytes:,} B"),
    ("request pool", lambda c: c.request_pool),
    ("KV tokens per rank", lambda c: f"{c.kv_tokens:,}"),
    ("concurrency", lambda c: f"{c.concurrency:.2f} x {c.context_tokens:,} tokens"),
    ("starts", lambda c: "yes" if c.starts else "NO"),
)


def render_compare(cmp: Comparison) -> str:
    head = ["term"] + [c.label for c in cmp.columns]
    rows = [head] + [[name] + [f(c) for c in cmp.columns] for name, f in ROWS]
    widths = [max(len(r[j]) for r in rows) for j in range(len(head))]
    lines = [f"kvscope compare · {cmp.model} · {cmp.gpu} · TP{cmp.tp}" + (f" PP{cmp.pp}" if cmp.pp > 1 else "")
             + " · per rank (estimated where the plan estimates)", ""]
    for r in rows:
        lines.append("  ".join(x.ljust(widths[j]) for j, x in enumerate(r)).rstrip())
    lines += ["", f"largest difference: {cmp.largest}", cmp.explanation]
    return "\n".join(lines)


def _cell(key: str, v) -> str:
    if key.endswith("_bytes") and key not in ("cell_bytes", "block_bytes"):
        return _gib(v)
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def render_compare_html(d: dict, command: str, version: str) -> str:
    """``kvscope compare --html``: the same table and paragraph, from the dict ``--json`` prints."""
    from html import escape

    from .html import page
    cols = d.get("columns") or []
    names = {"sglang": "SGLang", "vllm": "vLLM"}
    head = "".join(f"<th>{escape(names.get(c['engine'], c['engine']))} {escape(str(c['engine_version']))}</th>"
                   for c in cols)
    rows = []
    for key, label in (("knob", "knob"), ("fraction", "fraction"), ("fraction_of", "fraction of"),
                       ("fraction_base_bytes", "that memory"), ("budget_bytes", "x fraction (budget)"),
                       ("weights_bytes", "weights per rank"), ("reserve_bytes", "activation/graph reserve"),
                       ("kv_budget_bytes", "KV budget"), ("kv_cache_bytes", "KV allocated"),
                       ("cell_bytes", "cell (B/token/rank)"), ("page_tokens", "page / block (tokens)"),
                       ("block_bytes", "page / block (bytes)"), ("request_pool", "request pool"),
                       ("kv_tokens", "KV tokens per rank"), ("concurrency", "concurrency at the context")):
        vals = [c.get(key) for c in cols]
        cells = "".join(f'<td class="n">{escape(_cell(key, v))}</td>' for v in vals)
        diff = ' class="diff"' if len(set(map(str, vals))) > 1 else ""
        rows.append(f"<tr{diff}><td>{escape(label)}</td>{cells}</tr>")
    body = [f'<h2>Term by term (per rank)</h2><table id="terms"><tr><th>term</th>{head}</tr>{"".join(rows)}</table>',
            f'<h2>Largest difference: {escape(str(d.get("largest_difference")))}</h2>'
            f'<p id="explanation">{escape(str(d.get("explanation")))}</p>']
    line = " vs ".join(f"{names.get(c['engine'], c['engine'])} {c['engine_version']}" for c in cols)
    return page("kvscope compare", body, {"command": command, "kvscope_version": version, "compare": d}, command,
                version, f"{line} · {d.get('model')} · {d.get('gpu')}")
