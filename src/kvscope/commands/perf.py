"""``kvscope perf MODEL --gpu G --tp N``: decode/prefill/speculative throughput estimate."""

from __future__ import annotations

import argparse
import json

from ..catalog import load_model_source
from ..errors import FlagError
from ..hardware.gpus import get_gpu
from ..model.spec import ModelSpec
from ..perf.allreduce import PCIE_TOPOLOGIES
from ..perf.report import PerfOptions, build_perf
from ..report.perf_text import render_perf
from ._argtypes import int_list, ranged

_MS = ranged("number", 0, 1e6)  # a duration in ms / us: finite, >= 0
_TOKENS = ranged("int", 1, 1 << 24)  # beyond any model's context (the largest is 10M tokens)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "perf", help="estimate decode/prefill tok/s, all-reduce cost and speculative decoding (estimates)",
        description="Per decode step: weight and KV bytes read per GPU, all-reduce count x latency, fixed "
                    "overhead; tok/s per stream and aggregate; prefill tok/s; speculative decoding speedup. "
                    "Every figure is an estimate; measured numbers can replace the model.")
    p.add_argument("model", help="HF id of a bundled model, a config.json, or a checkpoint directory")
    p.add_argument("--gpu", help="GPU key from the catalog (e.g. h100-sxm, rtx-pro-6000)")
    p.add_argument("--gpu-memory-mib", type=ranged("int"), help="GPU memory in MiB (overrides the catalog figure)")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang",
                   help="serving engine: its per-step cost (default sglang)")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel ranks within the TP group (default 1)")
    p.add_argument("--disable-cuda-graph", action="store_true",
                   help="model eager launches (SGLang --disable-cuda-graph, vLLM --enforce-eager)")
    p.add_argument("--tp", type=ranged("int", None, 1 << 16), default=1, help="tensor parallel size (default 1)")
    p.add_argument("--batch", type=int_list("--batch", hi=1 << 20), default=(1,), help="concurrent sequences, e.g. 1,8,64 (default 1)")
    p.add_argument("--context", type=ranged("int", 0, 1 << 24), default=2048, help="context tokens per sequence (default 2048)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto | bf16 | fp8_e4m3 | fp8_e5m2 (default auto)")
    p.add_argument("--allreduce", choices=("auto", "nccl", "custom"), default="auto",
                   help="auto = what SGLang/vLLM choose; custom forces the custom all-reduce kernel")
    p.add_argument("--pcie-topology", choices=PCIE_TOPOLOGIES,
                   help="PCIe boxes: GPUs behind switches or split across CPU sockets (default: assumed)")
    p.add_argument("--bandwidth-efficiency", type=ranged("number"), help="measured fraction of peak memory bandwidth")
    p.add_argument("--flops-efficiency", type=ranged("number"), help="fraction of dense peak TFLOPS (default 0.5)")
    p.add_argument("--fixed-overhead-ms", type=_MS, help="fixed per-step overhead in ms (default 1.0)")
    p.add_argument("--allreduce-latency-us", type=_MS, help="measured latency of one decode all-reduce (us)")
    p.add_argument("--verify-allreduce-latency-us", type=_MS,
                   help="measured latency of one all-reduce in the speculative verify pass (us)")
    p.add_argument("--chunked-prefill-size", type=_TOKENS, default=8192, help="prefill chunk in tokens (default 8192)")
    p.add_argument("--observed-tokens-per-s", type=ranged("number", 0, 1e9, lo_open=True),
                   help="measured decode tok/s: back-solve the per-all-reduce latency it implies")
    g = p.add_argument_group("speculative decoding (SGLang flag names)")
    g.add_argument("--speculative-algorithm", help="EAGLE | EAGLE3 | NEXTN (MTP) | NGRAM")
    g.add_argument("--speculative-num-steps", type=ranged("int", None, 4096))
    g.add_argument("--speculative-eagle-topk", type=ranged("int", None, 4096))
    g.add_argument("--speculative-num-draft-tokens", type=ranged("int", None, 4096))
    g.add_argument("--speculative-draft-model-path", help="draft config (bundled id, config.json or dir)")
    g.add_argument("--accept-length", type=ranged("number"), help="measured mean accepted tokens per step (bonus included); "
                   "default: the typical published value for the draft kind, marked assumed")
    g.add_argument("--accept-rate", type=ranged("number"), help="per-token acceptance probability (chain formula)")
    g.add_argument("--spec-overhead-ms", type=_MS, default=0.0, help="extra per-step spec bookkeeping (ms)")
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
        draft_name=draft_name, observed_tokens_per_s=args.observed_tokens_per_s, engine=args.engine, ep=args.ep,
        cuda_graph=not args.disable_cuda_graph)
    report = build_perf(spec, gpu, opts)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=False))
    else:
        print(render_perf(report))
    return 0

