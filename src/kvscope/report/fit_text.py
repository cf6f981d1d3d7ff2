"""Text rendering of a ``kvscope fit`` result: ranked options, launch commands, rejections, shortfall."""

from __future__ import annotations

from ..fit import FitResult

ENGINE_NAME = {"sglang": "SGLang", "vllm": "vLLM"}
MAX_ROWS = 12  # options shown in the table (all of them with --all)
MAX_COMMANDS = 2
_ORDER = {"throughput": "fastest decode at the target first",
          "latency": "shortest time to first token at the target context first",
          "gpus": "fewest GPUs first, then fastest decode"}


def _tput(sp) -> str:
    """Decode tok/s with perf's range (slow-fast) when it gives one."""
    if sp is None:
        return "n/a"
    r = sp.decode_tokens_per_s_range
    return f"{sp.decode_tokens_per_s:,.0f}" + (f" ({r[0]:,.0f}-{r[1]:,.0f})" if r else "")


def _k(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 and tokens >= 1024 else f"{tokens:,}"


def _estimated_note(names) -> str:
    names = [n for n in names if not n.startswith("runtime_headroom")]
    return f"est. ({', '.join(names)})" if names else "from measured inputs"


def _per(o) -> str:
    if o.candidate.dp == 1:
        return ""
    return (" per DP worker" if o.candidate.dp_attention else " per DP engine" if o.candidate.expert_parallel
            else " per replica")


def render_fit(res: FitResult, *, show_all: bool = False) -> str:
    eng = ENGINE_NAME.get(res.engine, res.engine)
    lines = [
        f"kvscope fit · {eng} {res.engine_version} · {res.model} · up to {res.gpus}× {res.gpu}",
        f"target: {res.concurrency} requests × {res.context_tokens:,} tokens = {res.target_tokens:,} KV tokens"
        + ("" if res.engine == "sglang" else " (vLLM: Maximum concurrency ≥ "
           f"{res.concurrency} at --max-model-len {res.context_tokens})"),
        "",
    ]
    if res.options:
        knob = res.options[0].knob
        lines.append(f"working configurations, {_ORDER[res.optimize]} ({knob} on a {res.step:g} grid; "
                     "speed estimated with kvscope perf's model):")
        head = ("  #", "option", "GPUs", f"decode tok/s @{res.concurrency}", f"TTFT @{_k(res.context_tokens)}",
                "KV tokens", "concurrency", "set", "floor", "max")
        rows = []
        shown = res.options if show_all else res.options[:MAX_ROWS]
        for i, o in enumerate(shown, 1):
            c = o.candidate
            per = "" if c.dp == 1 else "/worker" if c.dp_attention else "/engine" if c.expert_parallel else "/replica"
            sp = o.speed
            rows.append((f"  {i}", o.candidate.label, str(o.candidate.num_gpus),
                         _tput(sp), f"{sp.ttft_s:.2f} s" if sp else "n/a",
                         f"{o.kv_cache_tokens:,}{per}", f"{o.concurrency:.2f}", f"{o.recommended:g}",
                         f"{o.fraction:g}", f"{o.fraction_max:g}"))
        widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
        for r in [head, *rows]:
            lines.append("  ".join(c.ljust(widths[j]) if j < 2 else c.rjust(widths[j]) for j, c in enumerate(r)).rstrip())
        if len(res.options) > len(shown):
            lines.append(f"  … {len(res.options) - len(shown)} more (--all)")
        lines.append("  decode tok/s: kvscope perf's estimate at the target concurrency (range: its parameter "
                     "uncertainty); TTFT: one prompt of the target context on an idle engine")
        lines.append("  set: what the command sets — the engine's default for the layout, or more when the target "
                     "needs it; KV tokens and concurrency are at that value")
        lines.append("  floor: the least that starts and holds the target (less runtime slack than the engine's "
                     "default); max: " + ("largest with estimated runtime headroom ≥ 0 (graphs, activations)"
                                          if res.engine == "sglang"
                                          else "largest vLLM accepts (requested ≤ free memory at startup, est.)"))
        lines.append("")
        for i, o in enumerate(res.options[:MAX_COMMANDS], 1):
            sp = o.speed
            lines.append(f"{'best' if i == 1 else 'next'}: {o.candidate.label} on {o.candidate.num_gpus} GPU(s) — "
                         + (f"~{_tput(sp)} tok/s decode at {res.concurrency} requests, "
                            f"TTFT ~{sp.ttft_s:.2f} s (est.); " if sp else "")
                         + f"{o.kv_cache_tokens:,} KV tokens{_per(o)} at {o.knob} {o.recommended:g}"
                         + (f" (+{o.tokens_per_step:,} per +0.01)" if o.tokens_per_step else "")
                         + f"; inputs {_estimated_note(o.estimated)}")
            lines.append(f"  floor: {o.knob} {o.fraction:g} ({o.kv_cache_tokens_floor:,} KV tokens{_per(o)}) is the "
                         "least that starts and holds the target")
            if o.above_default:
                lines.append(f"  note: {o.knob} {o.recommended:g} is above the engine's default for this layout "
                             f"({o.engine_default:g})" + (": less runtime slack than SGLang reserves by default "
                                                         "(CUDA graphs, activations)" if res.engine == "sglang" else ""))
            lines.append(f"  {o.command}")
            lines.append(f"  check: {o.plan_command}")
        lines.append("")
    else:
        lines.append(f"nothing fits on {res.gpus}× {res.gpu}.")
        sf = res.shortfall
        if sf is not None and sf.closest is not None:
            lines.append(f"  closest: {sf.closest.line()}")
            if sf.needs_more_kv:
                lines.append(f"  needs {sf.needs_more_kv:.2f}× more KV")
        if sf is not None:
            for tip in sf.suggestions:
                lines.append(f"  → {tip}")
        lines.append("")
    if res.rejected:
        lines.append("rejected:")
        by_reason: dict[str, list[str]] = {}  # layouts refused for the same reason share one line
        for r in res.rejected:
            by_reason.setdefault(r.reason, []).append(r.candidate.label)
        for reason, labels in by_reason.items():
            lines.append(f"  {', '.join(labels)}: {reason}")
    if res.options and res.options[0].warnings:
        if res.rejected:
            lines.append("")
        for w in res.options[0].warnings:
            lines.append(f"note (best): {w}")
    return "\n".join(lines).rstrip()
