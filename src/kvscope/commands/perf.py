"""``kvscope perf MODEL --gpu G --tp N``: decode/prefill/speculative throughput estimate."""

from __future__ import annotations

import argparse
import json

from ..catalog import load_model_source
from ..errors import FlagError
from ..hardware.gpus import get_gpu
from ..model.spec import ModelSpec
from ..perf.allreduce import PCIE_TOPOLOGIES
from ..perf.report import PerfOptions, PerfReport, build_perf


def _batches(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch wants comma-separated integers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("--batch is empty")
    return vals


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "perf", help="estimate decode/prefill tok/s, all-reduce cost and speculative decoding (estimates)",
        description="Per decode step: weight and KV bytes read per GPU, all-reduce count x latency, fixed "
                    "overhead; tok/s per stream and aggregate; prefill tok/s; speculative decoding speedup. "
                    "Every figure is an estimate; measured numbers can replace the model.")
    p.add_argument("model", help="HF id of a bundled model, a config.json, or a checkpoint directory")
    p.add_argument("--gpu", help="GPU key from the catalog (e.g. h100-sxm, rtx-pro-6000)")
    p.add_argument("--gpu-memory-mib", type=int, help="GPU memory in MiB (overrides the catalog figure)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--batch", type=_batches, default=(1,), help="concurrent sequences, e.g. 1,8,64 (default 1)")
    p.add_argument("--context", type=int, default=2048, help="context tokens per sequence (default 2048)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto | bf16 | fp8_e4m3 | fp8_e5m2 (default auto)")
    p.add_argument("--allreduce", choices=("auto", "nccl", "custom"), default="auto",
                   help="auto = what SGLang/vLLM choose; custom forces the custom all-reduce kernel")
    p.add_argument("--pcie-topology", choices=PCIE_TOPOLOGIES,
                   help="PCIe boxes: GPUs behind switches or split across CPU sockets (default: assumed)")
    p.add_argument("--bandwidth-efficiency", type=float, help="measured fraction of peak memory bandwidth")
    p.add_argument("--flops-efficiency", type=float, help="fraction of dense peak TFLOPS (default 0.5)")
    p.add_argument("--fixed-overhead-ms", type=float, help="fixed per-step overhead in ms (default 1.0)")
    p.add_argument("--allreduce-latency-us", type=float, help="measured latency of one decode all-reduce (us)")
    p.add_argument("--verify-allreduce-latency-us", type=float,
                   help="measured latency of one all-reduce in the speculative verify pass (us)")
    p.add_argument("--chunked-prefill-size", type=int, default=8192, help="prefill chunk in tokens (default 8192)")
    p.add_argument("--observed-tokens-per-s", type=float,
                   help="measured decode tok/s: back-solve the per-all-reduce latency it implies")
    g = p.add_argument_group("speculative decoding (SGLang flag names)")
    g.add_argument("--speculative-algorithm", help="EAGLE | EAGLE3 | NEXTN")
    g.add_argument("--speculative-num-steps", type=int)
    g.add_argument("--speculative-eagle-topk", type=int)
    g.add_argument("--speculative-num-draft-tokens", type=int)
    g.add_argument("--speculative-draft-model-path", help="draft config (bundled id, config.json or dir)")
    g.add_argument("--accept-length", type=float, help="measured mean accepted tokens per step (bonus included)")
    g.add_argument("--accept-rate", type=float, help="per-token acceptance probability (chain formula)")
    g.add_argument("--spec-overhead-ms", type=float, default=0.0, help="extra per-step spec bookkeeping (ms)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    src = load_model_source(args.model)
    spec = ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)
    gpu = get_gpu(args.gpu, args.gpu_memory_mib)
    draft_cfg = draft_name = None
    if args.speculative_draft_model_path:
        d = load_model_source(args.speculative_draft_model_path)
        draft_cfg, draft_name = d.config, d.name
    if (args.accept_length is not None or args.accept_rate is not None) and not args.speculative_algorithm:
        raise FlagError("--accept-length/--accept-rate need --speculative-algorithm", field="--speculative-algorithm",
                        fix="e.g. --speculative-algorithm EAGLE3")
    opts = PerfOptions(
        tp=args.tp, batches=args.batch, context_tokens=args.context, kv_cache_dtype=args.kv_cache_dtype,
        allreduce=args.allreduce, pcie_topology=args.pcie_topology, bandwidth_efficiency=args.bandwidth_efficiency,
        flops_efficiency=args.flops_efficiency, fixed_overhead_ms=args.fixed_overhead_ms,
        allreduce_latency_us=args.allreduce_latency_us, verify_allreduce_latency_us=args.verify_allreduce_latency_us,
        chunked_prefill_size=args.chunked_prefill_size, speculative_algorithm=args.speculative_algorithm,
        speculative_num_steps=args.speculative_num_steps, speculative_eagle_topk=args.speculative_eagle_topk,
        speculative_num_draft_tokens=args.speculative_num_draft_tokens, accept_length=args.accept_length,
        accept_rate=args.accept_rate, spec_overhead_ms=args.spec_overhead_ms, draft_config=draft_cfg,
        draft_name=draft_name, observed_tokens_per_s=args.observed_tokens_per_s)
    report = build_perf(spec, gpu, opts)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=False))
    else:
        print(render_text(report))
    return 0


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def render_text(r: PerfReport) -> str:
    hw, f, s = r.hardware, r.fabric, r.settings
    lines = [f"kvscope perf  {r.model} on {r.options.tp} x {r.gpu.name}  (all figures are estimates)", ""]
    link = f"{f.kind} gen {f.generation}" + (f", {f.pcie_topology}" if f.pcie_topology else "")
    lines += [
        "Hardware (GPU catalog)",
        f"  memory bandwidth  {hw.mem_bandwidth_gbps:,.0f} GB/s   tensor {hw.tflops:,.1f} TFLOPS {hw.tflops_dtype}   "
        f"link {link}",
        f"  source            {hw.source}",
        f"  bandwidth used    {s.bandwidth_efficiency:.0%} of peak",
        f"                    {s.bandwidth_efficiency_source}",
        f"  all-reduce        {r.communicator.used}" + (
            "" if r.communicator.used == r.communicator.requested or r.communicator.requested == "auto"
            else f" (requested {r.communicator.requested})"),
        "",
    ]
    for d in r.decode:
        ar = d.allreduce
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
            f"  fixed overhead       {d.fixed_overhead_s * 1e3:7.2f} ms",
            f"  step                 {d.step_time_s * 1e3:7.2f} ms  -> {d.per_stream_tokens_per_s:.1f} tok/s per stream, "
            f"{d.decode_tokens_per_s:,.1f} tok/s aggregate",
            "",
        ]
    p = r.prefill
    lines += [
        f"Prefill  {p.prompt_tokens:,}-token prompt in {p.num_chunks} chunk(s) of {p.chunk_tokens:,}",
        f"  compute {p.compute_time_s * 1e3:.1f} ms, weights/KV {p.memory_time_s * 1e3:.1f} ms, all-reduce "
        f"{p.allreduce_time_s * 1e3:.1f} ms ({p.allreduce_bus_bytes_per_token / 1e6:.2f} MB bus traffic/token)",
        f"  -> {p.prefill_tokens_per_s:,.0f} tok/s ({p.bound}-bound)",
        "",
    ]
    sp = r.speculative
    if sp:
        c = sp.config
        v = sp.verify
        lines += [
            f"Speculative decoding  {c.algorithm}: {c.num_steps} draft steps, topk {c.eagle_topk}, "
            f"{c.num_draft_tokens} draft tokens verified",
            f"  accepted tokens/step {sp.accepted_tokens_per_step:.2f}  ({sp.accepted_tokens_source})",
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
