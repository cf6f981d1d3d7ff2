"""``kvscope sweep``: ``kvscope plan`` over a grid of engine flags, one CSV / JSON row per point.

    kvscope sweep Qwen/Qwen3-32B --gpu h100-sxm --grid mem_fraction_static=0.5:0.95:0.01 \\
        context_length=8k,32k tp=1,2,4,8 kv_cache_dtype=auto,fp8_e4m3

Axes are the engine's flags in Python spelling (``--engine vllm``: ``gpu_memory_utilization``,
``max_model_len``, ``tensor_parallel_size``, ``kv_cache_dtype``, ...; ``tp``/``pp``/``dp`` for
either); an axis with one value is a fixed flag. Exit status: 0 the rows were written (whatever the
points' verdicts), 2 bad input (one line), 3 internal error.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("sweep", help="plan over a grid of flags: one CSV/JSON row per point",
                       description="Run kvscope plan at every point of a grid of engine flags, in bulk: KV tokens, "
                                   "request limit, max concurrency (vLLM), verdict and the engine's error per point.",
                       allow_abbrev=False)
    p.add_argument("model", help="HF id of a bundled model, a config.json path, or a checkpoint directory")
    p.add_argument("--gpu", default=None, help="a GPU name (see kvscope plan --help)")
    p.add_argument("--gpu-memory-mib", type=int, default=None, help="GPU capacity for any other GPU")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--engine-version", default=None, help="engine version (default: the latest modelled)")
    p.add_argument("--grid", nargs="+", metavar="NAME=VALUES", required=True,
                   help="axes: NAME=a,b,c or NAME=START:STOP:STEP (inclusive); tokens take k/m (x1000) and K/M "
                        "(x1024); none = the engine default")
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here instead of stdout")
    p.add_argument("--html", metavar="FILE", default=None, help="also write the rows as a self-contained HTML table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import FlagError
    from ..report.sweep_text import write_csv, write_json
    from ..sweep import sweep

    result = sweep(args.model, args.gpu, grid=args.grid, engine=args.engine, engine_version=args.engine_version,
                   gpu_memory_mib=args.gpu_memory_mib)
    write = write_json if args.format == "json" else write_csv
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8", newline="") as f:
                write(result, f)
        except OSError as exc:
            raise FlagError(f"{args.output}: cannot write ({exc.strerror or exc})", field="--output",
                            fix="give a writable file path") from None
    else:
        write(result, sys.stdout)
    if args.html:
        from ._outputs import write_reports

        def html(command: str, version: str) -> str:
            from ..report.html import render_sweep_html

            return render_sweep_html(result.to_dict(), command, version)

        write_reports(args, html)
    return 0
