"""``kvscope perf`` as text (``perf.report.PerfReport`` -> lines; every figure is an estimate)."""

from __future__ import annotations

from ..perf.report import PerfReport


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def render_perf(r: PerfReport) -> str:
    """The ``kvscope perf`` text: hardware, each decode batch, prefill, speculative decoding."""
    hw, f, s = r.hardware, r.fabric, r.settings
    lines = [f"kvscope perf  {r.model} on {r.options.tp} x {r.gpu.name}  (all figures are estimates)", ""]
    link = f"{f.kind} gen {f.generation}" + (f", {f.pcie_topology}" if f.pcie_topology else "")
    lines += [
        "Hardware (GPU catalog)",
        f"  memory bandwidth  {hw.mem_bandwidth_gbps:,.0f} GB/s   tensor {hw.tflops:,.1f} TFLOPS {hw.tflops_dtype}   "
        f"link {link}",
        f"  source            {hw.source}",
        f"  GPU family        {r.family} ({r.options.engine}); parameters in kvscope/perf/params.py",
        f"  bandwidth used    {s.bandwidth_efficiency:.0%} of peak",
        f"                    {s.bandwidth_efficiency_source}",
        f"  all-reduce        {r.communicator.used}" + (
            "" if r.communicator.used == r.communicator.requested or r.communicator.requested == "auto"
            else f" (requested {r.communicator.requested})"),
        "",
    ]
    for i, d in enumerate(r.decode):
        ar = d.allreduce
        rng = r.decode_range[i] if i < len(r.decode_range) else None
        lines += [
            f"Decode step  batch {d.batch}, context {d.context_tokens:,} tokens",
            f"  weights read / GPU   {_gb(d.weight_bytes_per_gpu_per_step)}  (attention {_gb(d.attn_weight_bytes)}, "
            f"dense MLP+shared {_gb(d.dense_weight_bytes)}, router/norm/lm_head {_gb(d.other_weight_bytes)}"
            + (f", experts {_gb(d.expert_weight_bytes)} for {d.experts_touched_per_layer:.1f} distinct "
               f"experts/layer" if r.weights.num_experts else "") + ")",
            f"  KV read / GPU        {_gb(d.kv_bytes_per_gpu_per_step)}",
            f"  memory time          {d.memory_time_s * 1e3:7.2f} ms" + (
                f"   (compute {d.compute_time_s * 1e3:.2f} ms: compute-bound)" if d.bound == "compute" else ""),
            f"  all-reduces          {d.allreduce_time_s * 1e3:7.2f} ms  = {d.allreduce_count} x {ar.latency_us:.1f} us "
            f"({ar.payload_bytes:,} B, {ar.communicator} {ar.algorithm})",
            f"  fixed overhead       {d.fixed_overhead_s * 1e3:7.2f} ms" + (
                f"   (kernel floor {d.floor_time_s * 1e3:.2f} ms{': binding' if d.bound == 'kernel floor' else ''})"
                if d.floor_time_s else ""),
            f"  step                 {d.step_time_s * 1e3:7.2f} ms  -> {d.per_stream_tokens_per_s:.1f} tok/s per stream, "
            f"{d.decode_tokens_per_s:,.1f} tok/s aggregate"
            + (f" (range {rng[0]:,.1f}-{rng[1]:,.1f})" if rng else ""),
            "",
        ]
    p = r.prefill
    lines += [
        f"Prefill  {p.prompt_tokens:,}-token prompt in {p.num_chunks} chunk(s) of {p.chunk_tokens:,}",
        f"  compute {p.compute_time_s * 1e3:.1f} ms, weights/KV {p.memory_time_s * 1e3:.1f} ms, all-reduce "
        f"{p.allreduce_time_s * 1e3:.1f} ms ({p.allreduce_bus_bytes_per_token / 1e6:.2f} MB bus traffic/token)",
        f"  -> {p.prefill_tokens_per_s:,.0f} tok/s ({p.bound}-bound); time to first token {r.ttft_s * 1e3:,.0f} ms "
        f"(range {r.ttft_range_s[0] * 1e3:,.0f}-{r.ttft_range_s[1] * 1e3:,.0f})",
        "",
    ]
    sp = r.speculative
    if sp:
        c = sp.config
        v = sp.verify
        lines += [
            f"Speculative decoding  {c.algorithm}: {c.num_steps} draft steps, topk {c.eagle_topk}, "
            f"{c.num_draft_tokens} draft tokens verified",
            f"  accepted tokens/step {sp.accepted_tokens_per_step:.2f}  ({sp.accepted_tokens_source})"
            + (f"\n  assumed range        {sp.accept_length_range[0]:.2f}-{sp.accept_length_range[1]:.2f} tokens/step "
               f"-> {sp.speedup_range[0]:.2f}x-{sp.speedup_range[1]:.2f}x" if sp.accept_length_assumed else ""),
            f"  break-even           {sp.break_even_accept_length:.2f} accepted tokens/step",
            f"  draft                {sp.draft_time_s * 1e3:7.2f} ms  ({sp.draft_forwards} forwards, all-reduce "
            f"{sp.draft_allreduce_time_s * 1e3:.2f} ms)",
            f"  verify weights+KV    {v.memory_time_s * 1e3:7.2f} ms  ({_gb(v.bytes_per_gpu_per_step)}"
            + (f", {v.experts_touched_per_layer:.1f} experts/layer" if r.weights.num_experts else "") + ")",
            f"  verify all-reduces   {v.allreduce_time_s * 1e3:7.2f} ms  = {v.allreduce_count} x "
            f"{v.allreduce.latency_us:.1f} us ({v.allreduce.payload_bytes:,} B, {v.allreduce.communicator})",
            f"  fixed + spec         {(v.fixed_overhead_s + sp.spec_overhead_s) * 1e3:7.2f} ms",
            f"  step                 {sp.step_time_s * 1e3:7.2f} ms  -> {sp.decode_tokens_per_s:,.1f} tok/s "
            f"({sp.speedup:.2f}x vs {sp.baseline_tokens_per_s:,.1f})",
            f"  verdict: {sp.verdict}",
            "",
        ]
    if r.implied_allreduce_latency_us is not None:
        lines += [f"Observed {r.options.observed_tokens_per_s} tok/s implies {r.implied_allreduce_latency_us:.1f} us "
                  f"per all-reduce (holding weights, KV and fixed overhead)", ""]
    if r.notes:
        lines += ["Notes"] + [f"  - {n}" for n in r.notes]
    return "\n".join(lines).rstrip()
