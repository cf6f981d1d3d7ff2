"""Text rendering of an SGLang plan Timeline. SGLang prints GiB values labelled "GB"."""

from __future__ import annotations

from ..timeline import Timeline
from ..units import GiB
from .sections import assemble, failed_at, verdict_lines


def _gb(n: int | float | None) -> str:
    return "—" if n is None else f"{n / GiB:7.2f} GB"


def render_sglang(t: Timeline) -> str:
    """The verdict first, then the sections of ``report/sections.py`` (the same names as vLLM's text)."""
    x = t.extra
    setup = [
        f"  kvscope plan · SGLang {t.engine_version} · {t.model} · {t.gpu} · tp={x.tp} pp={x.pp}"
        + (f" dp={x.dp} (dp-attention)" if x.enable_dp_attention else ""),
        "  (SGLang labels GiB as \"GB\"; 'est.' = estimated, not measured)",
    ]
    d = t.ranks[0].decision
    sizing = [
        "  (MIN over ranks)",
        f"  pre_model_load_memory     {d.pre_model_load_gib:10.2f} GB"
        + ("  (est.)" if "pre_model_load_memory" in t.estimated else ""),
        f"  available after weights   {d.available_gpu_gib:10.2f} GB"
        + ("  (est.)" if "weights" in t.estimated else ""),
        f"  mem_fraction_static       {x.mem_fraction_static:10.4f}    ({x.mem_fraction_static_source}"
        + (f" {x.mem_fraction_static_flag:.4g} x {x.aiter_fraction_factor:g} for aiter)"
           if x.aiter_fraction_factor else ")"),
        f"  attention backend         {x.attention_backend:>10}    ({x.attention_backend_source}: "
        f"{x.attention_backend_reason})",
        f"  slack pre x (1 - mfs)     {d.slack_gib:10.2f} GB",
    ]
    if d.mm_reservation_gib:
        sizing.append(f"  multimodal reservation    {d.mm_reservation_gib:10.2f} GB")
    if d.mamba_state_gib:
        sizing.append(f"  mamba state pool          {d.mamba_state_gib:10.2f} GB  (max_mamba_cache_size={d.max_mamba_cache_size})")
    sizing += [
        f"  rest_memory (KV budget)   {d.rest_memory_gib:10.2f} GB",
        f"  cell size                 {t.kv_cell_bytes:>10,} B/token  [{d.cell_formula}; {x.kv_cache_dtype}]",
    ]
    capacity = [
        f"  max_total_num_tokens      {t.kv_cache_tokens:>10,}    (page {x.page_size})"
        + (f", swa tokens {x.swa_tokens:,}" if x.swa_tokens else ""),
        f"  max_running_requests      {t.max_running_requests if t.max_running_requests is not None else '—':>10}",
        f"  req_to_token pool         {_gb(x.req_to_token_bytes)}",
        f"  KV cache allocated        {_gb(t.kv_cache_bytes)}",
        f"  each +0.01 of mfs buys    {x.tokens_per_0_01_mem_fraction:>10,} tokens",
    ]
    if x.min_mem_fraction_static is not None:
        capacity.append(f"  minimum viable --mem-fraction-static: {x.min_mem_fraction_static:.4f}"
                        f" (engine's own formula 1 - available/pre = {x.engine_min_mem_fraction_static:.4f})")
    notes = [f"  fix: {f.flag} {f.value}   — {f.why}" for f in t.fix] + [f"  note: {w}" for w in t.warnings]
    return assemble(verdict_lines(t, failed_at(t)), {"setup": setup, "memory per rank": _rank_lines(t),
                                                      "sizing decision": sizing, "capacity": capacity,
                                                      "fixes and notes": notes})


def _rank_lines(t: Timeline) -> list[str]:
    """Per-rank phase tables; ranks with identical phases are shown once."""
    lines: list[str] = []
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
    return lines
