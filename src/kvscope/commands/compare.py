"""``kvscope compare``: one model, GPUs and layout through SGLang and vLLM (or several releases), term by term.

Exit codes: 0 every column starts, 1 a column is predicted to fail (shown, with its error), 2 bad input
(one line, via cli.py).
"""

from __future__ import annotations

import argparse
import json
import sys


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="the same model, GPUs and layout through SGLang and vLLM (or several releases), term by term",
        description="Plan one model on SGLang and vLLM (or on several releases of one engine: --engine sglang "
                    "--engine-version 0.5.9,0.5.23) with the same GPUs and TP/PP, and show each term of the KV "
                    "sizing side by side, with the largest difference and its cause in each engine's code.",
        allow_abbrev=False)
    p.add_argument("model", help="HF id of a bundled model, a config.json path, or a checkpoint directory")
    p.add_argument("--gpu", default=None, help="GPU name (as kvscope plan)")
    p.add_argument("--gpu-memory-mib", type=int, default=None, help="GPU capacity for any other GPU")
    p.add_argument("--engine", type=_csv, default=None,
                   help="sglang,vllm (default), or one engine for several releases (inferred from the versions)")
    p.add_argument("--engine-version", type=_csv, default=[],
                   help="sglang=X,vllm=Y; or A,B with one --engine (default: the latest known)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (both engines)")
    p.add_argument("--pp", type=int, default=1, help="pipeline parallel size (both engines)")
    p.add_argument("--context", type=int, default=None,
                   help="context per request (SGLang --context-length, vLLM --max-model-len; default: the model's)")
    p.add_argument("--mem-fraction-static", type=float, default=None, help="SGLang's fraction (default: its own)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, help="vLLM's fraction (default: its own)")
    p.add_argument("--kv-cache-dtype", default=None, help="both engines (fp8 maps to fp8_e4m3 for SGLang)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--html", metavar="FILE", default=None,
                   help="also write a self-contained HTML report (inline CSS; no network)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..compare import compare
    from ..errors import FlagError
    from ..report.compare_text import render_compare
    for name, v in (("--tp", args.tp), ("--pp", args.pp)):
        if v < 1:
            raise FlagError(f"must be >= 1, got {v}", field=name, fix="e.g. --tp 4")
    if args.context is not None and args.context < 1:
        raise FlagError(f"must be >= 1, got {args.context}", field="--context", fix="e.g. --context 32768")
    sgl: dict = {}
    vll: dict = {}
    if args.mem_fraction_static is not None:
        sgl["mem_fraction_static"] = args.mem_fraction_static
    if args.gpu_memory_utilization is not None:
        vll["gpu_memory_utilization"] = args.gpu_memory_utilization
    if args.kv_cache_dtype:
        kv = args.kv_cache_dtype
        sgl["kv_cache_dtype"] = "fp8_e4m3" if kv == "fp8" else kv
        vll["kv_cache_dtype"] = "fp8" if kv.startswith("fp8") else kv
    res = compare(args.model, args.gpu, engines=args.engine, versions=args.engine_version, tp=args.tp, pp=args.pp,
                  context=args.context, gpu_memory_mib=args.gpu_memory_mib, sglang=sgl, vllm=vll)
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_compare(res))
    if args.html:
        from ._outputs import write_reports
        from ..report.compare_text import render_compare_html
        write_reports(args, lambda command, version: render_compare_html(res.to_dict(), command, version))
    return 0 if all(c.starts for c in res.columns) else 1
