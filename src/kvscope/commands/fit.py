"""``kvscope fit``: the inverse of plan — which flags (and how many GPUs) serve a context × concurrency target.

Exit codes: 0 something fits (best first), 1 nothing fits (closest option and what is missing),
2 bad input (one line, via cli.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from ..errors import FlagError
from ..fit import FitRequest, fit, fit_request, parse_set
from ..hardware.gpus import gpu_names
from ..report.fit_text import render_fit
from ._argtypes import gib_list, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "fit", help="the inverse of plan: which flags (and how many GPUs) serve a context x concurrency target",
        description="Search TP x PP (and DP-attention for MLA models on SGLang) x KV dtype, and the memory knob "
                    "(--mem-fraction-static / --gpu-memory-utilization), with the engine simulation of `kvscope "
                    "plan`. Prints the working configurations (fewest GPUs first), the launch command, and why "
                    "every other layout was rejected. Exit 0: fits; 1: nothing fits; 2: bad input.",
        allow_abbrev=False)
    p.add_argument("model_pos", nargs="?", metavar="MODEL", default=None,
                   help="HF id of a bundled model, a config.json path, or a checkpoint directory")
    p.add_argument("--model", dest="model_opt", default=None, help="same as MODEL")
    p.add_argument("--gpu", default=None, help=f"one of: {', '.join(gpu_names())}")
    p.add_argument("--gpu-memory-mib", type=int, default=None, help="GPU capacity (nvidia-smi memory.total)")
    p.add_argument("--gpus", type=positive_int, default=8, help="GPUs available (the most a layout may use; default 8)")
    p.add_argument("--context", type=positive_int, required=True, help="tokens per request (prompt + output)")
    p.add_argument("--concurrency", type=positive_int, required=True, help="simultaneous requests at that context")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--engine-version", "--version", dest="engine_version", default=None,
                   help="engine version (default: latest known)")
    p.add_argument("--kv-cache-dtype", default=None, help="fix the KV dtype (default: try auto and fp8)")
    p.add_argument("--tp", type=positive_int, default=None, help="fix tensor parallelism (default: search)")
    p.add_argument("--pp", type=positive_int, default=None, help="fix pipeline parallelism (default: search)")
    p.add_argument("--dp", type=positive_int, default=None,
                   help="fix data-parallel replicas (default: search; --dp 1 for none)")
    p.add_argument("--no-dp-attention", action="store_true", help="do not try SGLang DP-attention (MLA models)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", default=None,
                   help="hold an engine setting fixed, e.g. --set page_size=64, --set mem_fraction_static=0.85, "
                        "--set block_size=32 (repeatable)")
    p.add_argument("--step", type=float, default=0.01, help="grid of the memory knob (default 0.01)")
    p.add_argument("--pre-load-free-gib", type=gib_list, default=None,
                   help="SGLang, with --tp/--pp: measured free memory before weights (log 'Load weight begin')")
    p.add_argument("--post-load-free-gib", type=gib_list, default=None,
                   help="SGLang, with --tp/--pp: measured free memory after weights (log 'Load weight end')")
    p.add_argument("--all", action="store_true", help="list every working configuration")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _model_ref(args: argparse.Namespace) -> str:
    a, b = args.model_pos, args.model_opt
    if a and b and a != b:
        raise FlagError(f"two models given ({a!r} and {b!r})", field="--model", fix="give the model once")
    ref = a or b
    if not ref:
        raise FlagError("no model given", field="--model", fix="e.g. kvscope fit meta-llama/Llama-3.1-8B-Instruct --gpu h100 ...")
    return ref


def request_from_args(args: argparse.Namespace) -> FitRequest:
    r = fit_request(
        _model_ref(args), args.gpu, context=args.context, concurrency=args.concurrency, gpus=args.gpus,
        engine=args.engine, engine_version=args.engine_version, gpu_memory_mib=args.gpu_memory_mib,
        kv_cache_dtype=args.kv_cache_dtype, tp=args.tp, pp=args.pp, dp=args.dp,
        pre_load_free_gib=args.pre_load_free_gib, post_load_free_gib=args.post_load_free_gib, step=args.step,
        allow_dp_attention=not args.no_dp_attention)
    return replace(r, fixed=parse_set(args.set))  # after the model and GPU: their errors come first


def run(args: argparse.Namespace) -> int:
    res = fit(request_from_args(args))
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_fit(res, show_all=args.all))
    return 0 if res.fits else 1
