"""Rows of ``kvscope models``: each bundled model's facts, read from its own config (never guessed)."""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import KvscopeError
from . import CatalogEntry, catalog_entries, load_model_source


def attention_kind(spec: Any) -> str:
    """MHA / GQA / MQA / MLA (+DSA indexer), with the other layer kinds the model mixes in."""
    if spec.is_deepseek_v4:
        base = "CSA+HCA (DeepSeek-V4)"
    elif spec.is_mla:
        base = "MLA+DSA" if spec.has_dsa_indexer else "MLA"
    elif spec.num_key_value_heads == spec.num_attention_heads:
        base = "MHA"
    else:
        base = "MQA" if spec.num_key_value_heads == 1 else f"GQA-{spec.num_attention_heads // spec.num_key_value_heads}"
    kinds = set(spec.layer_types)
    extra = [name for k, name in (("sliding_attention", "SWA"), ("chunked_attention", "chunked"),
                               ("linear_attention", "linear"), ("mamba", "mamba")) if k in kinds]
    if spec.mamba is not None and not {"mamba", "linear"} & set(extra):
        extra.append("mamba")
    return "+".join([base] + extra)


def _params(spec: Any) -> int | None:
    from ..model.weights import weights_per_rank

    try:
        return sum(g.numel for g in weights_per_rank(spec).groups)
    except (KvscopeError, ArithmeticError, ValueError):
        return None


def _row(e: CatalogEntry) -> dict[str, Any]:
    from ..model.spec import ModelSpec

    row: dict[str, Any] = {"hf_id": e.hf_id, "kind": e.kind, "config": e.config, "source": e.source,
                           "family": None, "params": None, "quantization": None, "attention": None,
                           "total_size_bytes": e.meta.get("total_size_bytes"), "error": None}
    if e.meta.get("missing_fields"):
        row["error"] = f"missing {', '.join(e.meta['missing_fields'])}"
        return row
    if e.config == "none":
        row["error"] = "no bundled config (hub only)"
        return row
    try:
        src = load_model_source(e.hf_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)
    except KvscopeError as exc:
        row["error"] = str(exc).splitlines()[0][:120]
        return row
    row.update(family=spec.model_type if e.kind == "model" or e.kind == "extra" else f"{e.kind} draft",
               params=_params(spec), quantization=spec.quant.method if spec.quant.is_quantized else "none",
               attention=attention_kind(spec))
    return row


def _matches(row: dict[str, Any], words: list[str]) -> bool:
    hay = " ".join(str(row.get(k) or "") for k in ("hf_id", "family", "quantization", "attention", "kind")).lower()
    return all(w in hay for w in words)


def catalog_rows(query: str = "", include_unusable: bool = False) -> tuple[list[dict[str, Any]], int]:
    """(rows matching ``query``, number of bundled models with a usable config)."""
    entries = catalog_entries(with_config_only=not include_unusable)
    rows = [_row(e) for e in entries]
    usable = sum(1 for r in rows if r["error"] is None)
    if not include_unusable:
        rows = [r for r in rows if r["error"] is None]
    words = query.lower().split()
    return [r for r in rows if _matches(r, words)], usable
