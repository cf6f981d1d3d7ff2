"""``kvscope plan``: parse the flags, call the library's ``plan()``, render (text or JSON)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..engines.sglang.args import SGLangArgs
from ..engines.sglang.release import LATEST
from ..hardware.gpus import gpu_names
from ..plan import SGLANG_MEASURED, plan
from ..report.sglang_text import render_sglang
from ..report.vllm_text import render_vllm
from ._argtypes import gib_list
from .vllm_flags import add_vllm_arguments, vllm_dests

_SGLANG_FLAGS = tuple(f.name for f in dataclasses.fields(SGLangArgs))


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
    m.add_argument("--pre-load-free-gib", type=gib_list, default=None,
                   help="free memory before weights (SGLang 'Load weight begin. avail mem=X GB')")
    m.add_argument("--post-load-free-gib", type=gib_list, default=None,
                   help="free memory after weights ('Load weight end. ... avail mem=Y GB')")
    add_vllm_arguments(p.add_argument_group("vLLM flags (with --engine vllm)"))
    p.set_defaults(func=run)


def flags_from_namespace(args: argparse.Namespace) -> dict:
    """The engine's flags (and measured inputs) as ``plan()`` keyword arguments."""
    if args.engine == "vllm":
        names = vllm_dests() + ("tp_size", "pp_size", "dp_size")
    else:
        names = _SGLANG_FLAGS + SGLANG_MEASURED + ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def run(args: argparse.Namespace) -> int:
    t = plan(args.model, args.gpu, engine=args.engine, engine_version=args.engine_version,
             gpu_memory_mib=args.gpu_memory_mib, **flags_from_namespace(args))
    if args.json:
        json.dump(t.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_vllm(t) if args.engine == "vllm" else render_sglang(t))
    return 0
