"""``kvscope probe`` as text: the attachment report (stderr) and the measured timeline."""

from __future__ import annotations

from ..probe.records import AttachmentReport
from ..timeline import Timeline
from ..units import fmt_gib


def render_attachment(report: AttachmentReport) -> str:
    """Which targets attached and fired in each probed process, and which were not found."""
    lines = [f"kvscope probe: {report.engine or 'no engine'} {report.engine_version or ''}".rstrip()]
    if not report.processes:
        lines.append("  no engine module was imported by any probed process (nothing attached)")
    for p in report.processes:
        fired = ", ".join(f"{k}×{v}" for k, v in sorted(p.fired.items())) or "none"
        who = p.label if not p.label.startswith("pid ") else "process"
        lines.append(f"  {who} (pid {p.pid}): attached {len(p.attached)}, fired: {fired}")
        for tid, why in sorted(p.missing.items()):
            lines.append(f"    MISSING {tid}: {why}")
        for e in p.agent_errors:
            lines.append(f"    agent error (engine unaffected): {e}")
    for tid, why in sorted(report.not_found.items()):
        lines.append(f"  NOT FOUND: target {tid}: {why} — renamed or moved in this version?")
    if report.never_fired:
        lines.append("  attached but never called: " + ", ".join(report.never_fired))
    return "\n".join(lines)


def render_timeline(tl: Timeline) -> str:
    """A measured timeline: tokens, error, each rank's phases and the formula's named figures."""
    lines = [f"{tl.engine} {tl.engine_version or ''} — measured by probe".replace("  ", " ")]
    if tl.kv_cache_tokens is not None:
        lines.append(f"  KV cache tokens: {tl.kv_cache_tokens}")
    if tl.error:
        lines.append(f"  error: {tl.error}")
    for r in tl.ranks:
        lines.append(f"  rank {r.rank} ({r.decision.get('rank_label', '')}):")
        for ph in r.phases:
            def g(b: int | None) -> str:
                return "?" if b is None else fmt_gib(b)
            used = "" if ph.used_bytes is None else f", used {fmt_gib(ph.used_bytes)}"
            lines.append(f"    {ph.name:<20} free {g(ph.free_bytes_before)} -> "
                         f"{g(ph.free_bytes_after)}{used}")
        keys = ("pre_model_load_memory_gib", "available_gpu_memory_gib", "mem_fraction_static",
                "slack_bytes", "available_bytes", "cell_size_bytes", "max_total_num_tokens",
                "max_running_requests", "init_free_bytes", "requested_memory_bytes",
                "non_kv_cache_memory_bytes", "available_kv_cache_memory_bytes",
                "num_gpu_blocks", "error")
        shown = [f"{k}={r.decision[k]}" for k in keys if r.decision.get(k) is not None]
        if shown:
            lines.append("    decision: " + ", ".join(shown))
    for w in tl.warnings:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)
