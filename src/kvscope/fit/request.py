"""What to fit: ``FitRequest``, built by ``fit_request``, checked by ``validate_request``; ``--set`` values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..engines.sglang import kv_cache as sgl_kv_cache
from ..engines.sglang.plan import Measured
from ..engines.sglang.release import parse_version as sglang_version
from ..errors import FlagError
from ..hardware.gpus import GPU, get_gpu
from ..model.load import load_spec
from ..model.spec import ModelSpec
from ..units import gib_to_bytes

ENGINES = ("sglang", "vllm")
OPTIMIZE = ("throughput", "latency", "gpus")
FP8 = {"sglang": "fp8_e4m3", "vllm": "fp8"}

# SGLangArgs / VllmFlags fields a user may fix (``--set name=value``) -> the engine's flag name. Limited to
# flags ``kvscope plan`` also takes, so that every option's ``plan_command`` reproduces it exactly.
SGLANG_SETTABLE = {
    "page_size": "--page-size", "chunked_prefill_size": "--chunked-prefill-size",
    "cuda_graph_max_bs": "--cuda-graph-max-bs", "disable_cuda_graph": "--disable-cuda-graph",
    "disable_radix_cache": "--disable-radix-cache", "moe_a2a_backend": "--moe-a2a-backend", "ep_size": "--ep-size",
    "speculative_algorithm": "--speculative-algorithm",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens", "mem_fraction_static": "--mem-fraction-static",
}
VLLM_SETTABLE = {
    "block_size": "--block-size", "enforce_eager": "--enforce-eager",
    "max_num_batched_tokens": "--max-num-batched-tokens", "enable_prefix_caching": "--enable-prefix-caching",
    "enable_expert_parallel": "--enable-expert-parallel", "gpu_memory_utilization": "--gpu-memory-utilization",
}


@dataclass(frozen=True)
class FitRequest:
    """What to fit. ``fixed``: SGLangArgs / VllmFlags field values held constant (see *_SETTABLE)."""

    spec: ModelSpec
    gpu: GPU
    gpus: int
    context_tokens: int
    concurrency: int
    engine: str = "sglang"
    version: str | None = None
    kv_cache_dtype: str | None = None  # None: try auto and fp8
    tp: int | None = None  # None: search
    pp: int | None = None  # None: search
    dp: int | None = None  # data-parallel replicas; None: search (1 with PP > 1)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    measured: Measured | None = None  # SGLang measured free memory; needs tp and pp fixed
    # tp -> exact weights per rank (SGLang, pp 1). None: read from the safetensors headers when
    # ``model_ref`` is a checkpoint directory (as ``kvscope plan`` does), else the estimate.
    exact_weights: Callable[[int], int] | None = None
    step: float = 0.01
    model_ref: str | None = None  # what the user typed (for the command lines)
    gpu_ref: str | None = None  # None with gpu_memory_mib: a custom GPU
    gpu_memory_mib: int | None = None
    allow_dp_attention: bool = True  # SGLang, MLA models
    allow_dp_replicas: bool = True
    optimize: str = "throughput"  # ranking: throughput | latency | gpus


def fit_request(model: str, gpu: str | None = None, *, context: int, concurrency: int, gpus: int = 8,
                engine: str = "sglang", engine_version: str | None = None, gpu_memory_mib: int | None = None,
                kv_cache_dtype: str | None = None, tp: int | None = None, pp: int | None = None,
                dp: int | None = None, fixed: Mapping[str, Any] | None = None,
                pre_load_free_gib: Sequence[float] | None = None,
                post_load_free_gib: Sequence[float] | None = None, step: float = 0.01,
                allow_dp_attention: bool = True, optimize: str = "throughput") -> FitRequest:
    """A ``FitRequest`` from a model reference (bundled id, config.json or checkpoint directory) and a
    GPU name, as ``kvscope fit`` builds it. Measured free memory is in GiB as the log prints it (one
    value or one per rank); ``fixed`` holds SGLangArgs / VllmFlags fields (see *_SETTABLE)."""
    spec, _ = load_spec(model)
    g = get_gpu(gpu, gpu_memory_mib)
    measured = None
    if pre_load_free_gib or post_load_free_gib:
        measured = Measured(
            pre_load_free_bytes=tuple(gib_to_bytes(x) for x in pre_load_free_gib) if pre_load_free_gib else None,
            post_load_free_bytes=tuple(gib_to_bytes(x) for x in post_load_free_gib) if post_load_free_gib else None)
    return FitRequest(
        spec=spec, gpu=g, gpus=gpus, context_tokens=context, concurrency=concurrency, engine=engine,
        version=engine_version, kv_cache_dtype=kv_cache_dtype, tp=tp, pp=pp, dp=dp, fixed=dict(fixed or {}),
        measured=measured, step=step, model_ref=model, gpu_ref=gpu, gpu_memory_mib=gpu_memory_mib,
        allow_dp_attention=allow_dp_attention, optimize=optimize)


def validate_request(r: FitRequest) -> str:
    """Bad input as one-line FlagErrors (field + fix). Returns the resolved engine version."""
    if r.engine not in ENGINES:
        raise FlagError(f"unknown engine {r.engine!r}", field="--engine", fix="use sglang or vllm")
    for name, val in (("--gpus", r.gpus), ("--context", r.context_tokens), ("--concurrency", r.concurrency)):
        if not isinstance(val, int) or val < 1:
            raise FlagError(f"must be a positive integer, got {val!r}", field=name, fix="e.g. --gpus 8 --context 32768 --concurrency 16")
    for name, val in (("--tp", r.tp), ("--pp", r.pp), ("--dp", r.dp)):
        if val is not None and val < 1:
            raise FlagError(f"must be >= 1, got {val}", field=name, fix="pass a positive integer or leave it out")
    world = (r.tp or 1) * (r.pp or 1) * (r.dp or 1)
    if world > r.gpus:
        raise FlagError(f"--tp {r.tp or 1} x --pp {r.pp or 1} x --dp {r.dp or 1} needs more than --gpus {r.gpus}",
                        field="--gpus", fix=f"raise --gpus to {world} or lower --tp/--pp/--dp")
    if r.optimize not in OPTIMIZE:
        raise FlagError(f"unknown --optimize {r.optimize!r}", field="--optimize", fix="use " + ", ".join(OPTIMIZE))
    if not 0 < r.step < 0.5:
        raise FlagError(f"step must be in (0, 0.5), got {r.step}", field="--step", fix="e.g. 0.01")
    limit = r.spec.max_position_embeddings
    if r.context_tokens > limit:
        raise FlagError(f"{r.context_tokens} tokens exceed the model's context ({limit}, max_position_embeddings)",
                        field="--context", fix=f"use --context <= {limit}")
    settable = SGLANG_SETTABLE if r.engine == "sglang" else VLLM_SETTABLE
    for k in r.fixed:
        if k not in settable:
            raise FlagError(f"{k!r} cannot be fixed for {r.engine}", field="--set",
                            fix=f"use one of {', '.join(sorted(settable))}")
    if r.measured is not None and (r.tp is None or r.pp is None or r.engine != "sglang"):
        raise FlagError("measured free memory belongs to one layout", field="--pre-load-free-gib",
                        fix="pass --tp and --pp with it (SGLang only)")
    if r.kv_cache_dtype is not None:
        if r.engine == "sglang":
            known = sgl_kv_cache.KV_DTYPES
        else:
            from ..engines.vllm.args import KV_CACHE_DTYPES as known  # vLLM modules only for a vLLM fit
        if r.kv_cache_dtype.lower() not in known:
            raise FlagError(f"unknown --kv-cache-dtype {r.kv_cache_dtype!r} for {r.engine}", field="--kv-cache-dtype",
                            fix=f"use one of {', '.join(known)}")
    if r.engine == "sglang":
        return str(sglang_version(r.version))
    from ..engines.vllm.release import version_traits
    return version_traits(r.version).version


def parse_set(items: Sequence[str] | None) -> dict[str, Any]:
    """``name=value`` pairs (SGLangArgs / VllmFlags field names; dashes allowed) to typed values."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise FlagError(f"expected NAME=VALUE, got {item!r}", field="--set", fix="e.g. --set page_size=64")
        k, v = item.split("=", 1)
        k = k.strip().lstrip("-").replace("-", "_")
        low = v.strip().lower()
        val: Any
        if low in ("true", "yes", "on"):
            val = True
        elif low in ("false", "no", "off"):
            val = False
        else:
            try:
                val = int(v)
            except ValueError:
                try:
                    val = float(v)
                except ValueError:
                    val = v.strip()
        out[k] = val
    return out
