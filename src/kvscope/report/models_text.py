"""Text table of ``kvscope models``: one bundled model per line."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

COLUMNS = (("id", "hf_id"), ("family", "family"), ("params", "params"), ("quant", "quantization"),
           ("attention", "attention"), ("config", "config"))


def _params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e12:.2f}T" if n >= 1e12 else f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _cell(row: Mapping[str, Any], key: str) -> str:
    if key == "params":
        return _params(row.get("params"))
    v = row.get(key)
    return "-" if v in (None, "") else str(v)


def render_models(rows: Sequence[Mapping[str, Any]], total: int) -> str:
    table = [[h for h, _ in COLUMNS]] + [[_cell(r, k) for _, k in COLUMNS] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.append(f"{len(rows)} of {total} bundled models (params: from the config, estimated; "
                 "config: full = verbatim copy, partial = trimmed copy; sources in docs/catalog-sources.md)")
    return "\n".join(lines)
