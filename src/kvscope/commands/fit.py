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
from ..progress import progress
from ..report.fit_text import render_fit
from ..validate import check_flags
from ._argtypes import gib_list, positive_int
from ._engine_flags import add_version_override, check_free_memory, check_version, engine_version
from ._outputs import add_output_options, write_reports


def register(sub) -> None:
    p = sub.add_parser(
        "fit", help="the inverse of plan: which flags (and how many GPUs) serve a context x concurrency target",
        description="Search TP x PP (and DP-attention for MLA models on SGLang) x KV dtype, and the memory knob "
                    "(--mem-fraction-static / --gpu-memory-utilization), with the engine simulation of `kvscope "
                    "plan`. Prints the working configurations ranked by estimated decode throughput at the target "
                    "(--optimize), the launch command at the engine's default memory setting or more (the floor "
                    "shown apart), and why every other layout was rejected. Exit 0: fits; 1: nothing fits; 2: bad input.",
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
    p.add_argument("--optimize", choices=("throughput", "latency", "gpus"), default="throughput",
                   help="ranking: decode throughput at the target concurrency (default), time to first token "
                        "at the target context, or fewest GPUs (all estimated with kvscope perf's model)")
    p.add_argument("--all", action="store_true", help="list every working configuration")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_version_override(p)
    add_output_options(p, charts=False)
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
    """The request, with every input checked before the search (whose per-layout errors are reasons a
    layout is rejected, not input errors)."""
    args.engine_version = engine_version(args.engine, args.engine_version,
                                         getattr(args, "allow_unmodelled_version", False))
    check_version(args.engine, args.engine_version)
    r = fit_request(
        _model_ref(args), args.gpu, context=args.context, concurrency=args.concurrency, gpus=args.gpus,
        engine=args.engine, engine_version=args.engine_version, gpu_memory_mib=args.gpu_memory_mib,
        kv_cache_dtype=args.kv_cache_dtype, tp=args.tp, pp=args.pp, dp=args.dp,
        pre_load_free_gib=args.pre_load_free_gib, post_load_free_gib=args.post_load_free_gib, step=args.step,
        allow_dp_attention=not args.no_dp_attention, optimize=args.optimize)
    fixed = parse_set(args.set)  # after the model and GPU: their errors come first
    check_flags(args.engine, fixed, names=lambda k: f"--set {k}")  # validate.*_FLAG_RULES
    if r.measured is not None:
        check_free_memory(r.measured.pre_load_free_bytes, r.measured.post_load_free_bytes, r.gpu.memory_bytes,
                          r.gpu.key)
    return replace(r, fixed=fixed)


def run(args: argparse.Namespace) -> int:
    req = request_from_args(args)
    with progress("kvscope fit: planning each layout"):
        res = fit(req)
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_fit(res, show_all=args.all))
    write_reports(args, lambda command, version: _html(res, command, version))
    return 0 if res.fits else 1


def _html(res, command: str, version: str) -> str:
    from ..report.html import render_fit_html
    return render_fit_html(res.to_dict(), command, version)
