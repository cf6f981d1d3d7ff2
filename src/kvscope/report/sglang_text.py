"""Text rendering of an SGLang plan Timeline. SGLang prints GiB values labelled "GB"."""

from __future__ import annotations

from ..timeline import Timeline
from ..units import GiB


def _gb(n: int | float | None) -> str:
    return "—" if n is None else f"{n / GiB:7.2f} GB"


def render_sglang(t: Timeline) -> str:
    x = t.extra
    lines = [
        f"kvscope plan · SGLang {t.engine_version} · {t.model} · {t.gpu} · tp={x.get('tp')} pp={x.get('pp')}"
        + (f" dp={x.get('dp')} (dp-attention)" if x.get("enable_dp_attention") else ""),
        "  (SGLang labels GiB as \"GB\"; 'est.' = estimated, not measured)",
        "",
    ]
    # ranks with identical phases are shown once
    groups: dict[tuple, list[int]] = {}
    for r in t.ranks:
        key = tuple((p.name, p.free_bytes_before, p.free_bytes_after) for p in r.phases)
        groups.setdefault(key, []).append(r.rank)
    for r in t.ranks:
        key = tuple((p.name, p.free_bytes_before, p.free_bytes_after) for p in r.phases)
        members = groups.get(key)
        if not members or members[0] != r.rank:
            continue
        label = f"rank {members[0]}" if len(members) == 1 else f"ranks {members[0]}-{members[-1]}"
        lines.append(f"{label}: phase               free before   free after       used  note")
        for p in r.phases:
            used = p.used_bytes
            lines.append(f"  {p.name:<22}{_gb(p.free_bytes_before)}  {_gb(p.free_bytes_after)}  {_gb(used)}"
                         f"{' est.' if p.estimated else '     '} {p.note}")
        lines.append("")
    d = t.ranks[0].decision if t.ranks else {}
    lines += [
        "sizing decision (MIN over ranks):",
        f"  pre_model_load_memory     {d.get('pre_model_load_gib', 0):10.2f} GB"
        + ("  (est.)" if "pre_model_load_memory" in t.estimated else ""),
        f"  available after weights   {d.get('available_gpu_gib', 0):10.2f} GB"
        + ("  (est.)" if "weights" in t.estimated else ""),
        f"  mem_fraction_static       {x.get('mem_fraction_static'):10.4f}    ({x.get('mem_fraction_static_source')}"
        + (f" {x.get('mem_fraction_static_flag'):.4g} x {x['aiter_fraction_factor']:g} for aiter)"
           if x.get('aiter_fraction_factor') else ")"),
        f"  attention backend         {x.get('attention_backend', '?'):>10}    ({x.get('attention_backend_source', '?')}: "
        f"{x.get('attention_backend_reason', '')})",
        f"  slack pre x (1 - mfs)     {d.get('slack_gib', 0):10.2f} GB",
    ]
    if d.get("mm_reservation_gib"):
        lines.append(f"  multimodal reservation    {d['mm_reservation_gib']:10.2f} GB")
    if d.get("mamba_state_gib"):
        lines.append(f"  mamba state pool          {d['mamba_state_gib']:10.2f} GB  (max_mamba_cache_size={d.get('max_mamba_cache_size')})")
    lines += [
        f"  rest_memory (KV budget)   {d.get('rest_memory_gib', 0):10.2f} GB",
        f"  cell size                 {t.kv_cell_bytes:>10,} B/token  [{d.get('cell_formula')}; {x.get('kv_cache_dtype')}]",
        f"  max_total_num_tokens      {t.kv_cache_tokens:>10,}    (page {x.get('page_size')})"
        + (f", swa tokens {x['swa_tokens']:,}" if x.get("swa_tokens") else ""),
        f"  max_running_requests      {t.max_running_requests if t.max_running_requests is not None else '—':>10}",
        f"  req_to_token pool         {_gb(x.get('req_to_token_bytes'))}",
        f"  KV cache allocated        {_gb(t.kv_cache_bytes)}",
        f"  each +0.01 of mfs buys    {x.get('tokens_per_0_01_mem_fraction'):>10,} tokens",
        "",
    ]
    if t.starts:
        lines.append(f"verdict: starts — {t.kv_cache_tokens:,} KV tokens per rank")
    else:
        lines.append("verdict: FAILS at KV sizing")
        lines.append(f"  {t.error}")
    if x.get("min_mem_fraction_static") is not None:
        lines.append(f"  minimum viable --mem-fraction-static: {x['min_mem_fraction_static']:.4f}"
                     f" (engine's own formula 1 - available/pre = {x.get('engine_min_mem_fraction_static'):.4f})")
    for f in t.fix:
        lines.append(f"fix: {f.flag} {f.value}   — {f.why}")
    for w in t.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)
