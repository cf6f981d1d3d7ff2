"""``kvscope plan``: simulate an engine's startup per GPU rank (SGLang by default, or vLLM)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from ..engines.sglang.args import LATEST, SGLangArgs
from ..engines.sglang.plan import Measured, plan_sglang
from ..errors import FlagError
from ..hardware.gpus import get_gpu, gpu_names
from ..model.load import load_spec
from ..model.safetensors import checkpoint_tensors, exact_weights_per_rank
from ..report.sglang_text import render_sglang
from ..units import gib_to_bytes


def _vllm():
    try:
        return importlib.import_module("kvscope.engines.vllm.plan")
    except ModuleNotFoundError:
        return None


def _gib_list(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GiB numbers like 94 or 94,93.5,..., got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one GiB number")
    return vals


def register(sub) -> None:
    p = sub.add_parser("plan", help="simulate an engine's startup memory sizing, per GPU rank",
                       description="Simulate SGLang's (default) or vLLM's startup: free memory per phase, weights, "
                                   "the KV sizing formula, tokens, request limits, the verdict and the fix.",
                       allow_abbrev=False)
    p.add_argument("model", help="HF id of a bundled model, a config.json path, or a checkpoint directory")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--engine-version", default=None, help=f"engine version (default: latest known; SGLang {LATEST})")
    p.add_argument("--gpu", default=None, help=f"one of: {', '.join(gpu_names())}")
    p.add_argument("--gpu-memory-mib", type=int, default=None, help="GPU capacity (nvidia-smi memory.total) for any other GPU")
    p.add_argument("--json", action="store_true", help="print the Timeline as JSON")
    g = p.add_argument_group("SGLang flags (same names as sglang.launch_server)")
    g.add_argument("--tp", "--tp-size", dest="tp_size", type=int, default=1)
    g.add_argument("--pp", "--pp-size", dest="pp_size", type=int, default=1)
    g.add_argument("--dp", "--dp-size", dest="dp_size", type=int, default=1)
    g.add_argument("--ep", "--ep-size", dest="ep_size", type=int, default=1)
    g.add_argument("--enable-dp-attention", action="store_true")
    g.add_argument("--mem-fraction-static", type=float, default=None)
    g.add_argument("--context-length", type=int, default=None)
    g.add_argument("--kv-cache-dtype", default="auto")
    g.add_argument("--page-size", type=int, default=None)
    g.add_argument("--attention-backend", default=None,
                   help="as passed to the engine (default: what SGLang / vLLM picks for the GPU and model)")
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--max-total-tokens", type=int, default=None)
    g.add_argument("--chunked-prefill-size", type=int, default=None)
    g.add_argument("--cuda-graph-max-bs", type=int, default=None)
    g.add_argument("--disable-cuda-graph", action="store_true")
    g.add_argument("--disable-radix-cache", action="store_true")
    g.add_argument("--speculative-algorithm", default=None)
    g.add_argument("--speculative-draft-model-path", default=None)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--moe-a2a-backend", default="none")
    m = p.add_argument_group("measured inputs (replace predicted phases; GiB as the log prints, per-rank lists allowed)")
    m.add_argument("--pre-load-free-gib", type=_gib_list, default=None,
                   help="free memory before weights (SGLang 'Load weight begin. avail mem=X GB')")
    m.add_argument("--post-load-free-gib", type=_gib_list, default=None,
                   help="free memory after weights ('Load weight end. ... avail mem=Y GB')")
    vl = _vllm()
    if vl is not None and hasattr(vl, "add_vllm_arguments"):
        vl.add_vllm_arguments(p.add_argument_group("vLLM flags (with --engine vllm)"))
    p.set_defaults(func=run)


# SGLang and vLLM spell the parallel sizes differently; both engines accept the long vLLM names and
# kvscope accepts either spelling for either engine (--tp 4 == --tensor-parallel-size 4).
_PARALLEL_ALIASES = (("tp_size", "tensor_parallel_size", "--tp"), ("pp_size", "pipeline_parallel_size", "--pp"),
                     ("dp_size", "data_parallel_size", "--dp"))


def _reconcile_parallel_flags(args: argparse.Namespace) -> None:
    for short, long, flag in _PARALLEL_ALIASES:
        a, b = getattr(args, short, 1) or 1, getattr(args, long, 1) or 1
        if a != 1 and b != 1 and a != b:
            raise FlagError(f"{flag} {a} and --{long.replace('_', '-')} {b} disagree", field=flag,
                            fix="give the size once")
        size = a if a != 1 else b
        setattr(args, short, size)
        if hasattr(args, long):
            setattr(args, long, size)


def run(args: argparse.Namespace) -> int:
    _reconcile_parallel_flags(args)
    spec, _src = load_spec(args.model)
    gpu = get_gpu(args.gpu, args.gpu_memory_mib)
    if args.engine == "vllm":
        vl = _vllm()
        if vl is None:
            raise FlagError("the vLLM simulation is not available in this build", field="--engine", fix="use --engine sglang")
        t = vl.plan_vllm_from_args(args, spec, gpu)
        text = vl.render_vllm(t) if not args.json else None
    else:
        a = SGLangArgs(
            tp_size=args.tp_size, pp_size=args.pp_size, dp_size=args.dp_size, ep_size=args.ep_size,
            enable_dp_attention=args.enable_dp_attention, mem_fraction_static=args.mem_fraction_static,
            context_length=args.context_length, kv_cache_dtype=args.kv_cache_dtype, page_size=args.page_size,
            attention_backend=args.attention_backend,
            max_running_requests=args.max_running_requests, max_total_tokens=args.max_total_tokens,
            chunked_prefill_size=args.chunked_prefill_size, cuda_graph_max_bs=args.cuda_graph_max_bs,
            disable_cuda_graph=args.disable_cuda_graph, disable_radix_cache=args.disable_radix_cache,
            speculative_algorithm=args.speculative_algorithm,
            speculative_draft_model_path=args.speculative_draft_model_path,
            speculative_num_draft_tokens=args.speculative_num_draft_tokens, moe_a2a_backend=args.moe_a2a_backend,
        )
        measured = Measured(
            pre_load_free_bytes=tuple(gib_to_bytes(x) for x in args.pre_load_free_gib) if args.pre_load_free_gib else None,
            post_load_free_bytes=tuple(gib_to_bytes(x) for x in args.post_load_free_gib) if args.post_load_free_gib else None,
        )
        draft = load_spec(args.speculative_draft_model_path)[0] if args.speculative_draft_model_path else None
        exact = None
        if _src.checkpoint_dir is not None:
            tensors = checkpoint_tensors(_src.checkpoint_dir)
            if tensors:
                exact = exact_weights_per_rank(tensors, a.tp_size, spec.num_key_value_heads)[1]
        t = plan_sglang(spec, gpu, a, args.engine_version, measured, draft, exact)
        text = render_sglang(t) if not args.json else None
    if args.json:
        json.dump(t.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(text)
    return 0
