"""Use-case: plan an engine start from a model reference, a GPU and the engine's own flag names.

``plan(model, gpu, engine="sglang" | "vllm", **flags)`` is what ``kvscope plan`` runs and renders:
the same model loading (bundled id, config.json or checkpoint directory, with exact weights from the
safetensors headers), the same flag names as the engine's command line (``--tp-size`` → ``tp_size``,
``--gpu-memory-utilization`` → ``gpu_memory_utilization``) and the same Timeline.

Either engine accepts either spelling of the parallel sizes (``tp_size`` / ``tensor_parallel_size``,
``pp_size`` / ``pipeline_parallel_size``, ``dp_size`` / ``data_parallel_size``). Measured inputs are
given in GiB as the engine's log prints them (SGLang ``pre_load_free_gib`` / ``post_load_free_gib``,
one value or one per rank; vLLM ``available_kv_cache_gib``, ``weights_gib``, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping, Sequence

from ._callable import make_callable
from .errors import FlagError
from .hardware.gpus import get_gpu
from .model.load import checkpoint_tensors_of, exact_weights_per_rank_fn, load_spec
from .timeline import Timeline
from .units import gib_to_bytes
from .validate import finite_gib

__all__ = ["plan", "Engine", "SGLANG_MEASURED", "VLLM_MEASURED", "reconcile_parallel_sizes"]

Engine = Literal["sglang", "vllm"]

SGLANG_MEASURED = ("pre_load_free_gib", "post_load_free_gib")


def __getattr__(name: str) -> Any:
    """``VLLM_MEASURED`` (``VllmMeasured``'s fields), read on first use: each engine is imported only
    when a plan needs it (docs/performance.md)."""
    if name == "VLLM_MEASURED":
        from .engines.vllm.plan import VllmMeasured

        return tuple(f.name for f in dataclasses.fields(VllmMeasured) if f.name != "total_gib")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# SGLang and vLLM spell the parallel sizes differently; kvscope accepts either spelling for either
# engine (--tp 4 == --tensor-parallel-size 4).
_PARALLEL_ALIASES = (("tp_size", "tensor_parallel_size", "--tp"), ("pp_size", "pipeline_parallel_size", "--pp"),
                     ("dp_size", "data_parallel_size", "--dp"))


def reconcile_parallel_sizes(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Both spellings of each parallel size, set to the one value given (1 when neither is)."""
    out = dict(flags)
    for short, long, flag in _PARALLEL_ALIASES:
        a, b = (1 if out.get(k) is None else out[k] for k in (short, long))  # 0 is a value, not "unset"
        if a != 1 and b != 1 and a != b:
            raise FlagError(f"{flag} {a} and --{long.replace('_', '-')} {b} disagree", field=flag,
                            fix="give the size once")
        out[short] = out[long] = a if a != 1 else b
    return out


def _gib_per_rank(values: float | Sequence[float] | None, name: str = "--pre-load-free-gib"
                  ) -> tuple[int, ...] | None:
    if values is None:
        return None
    if isinstance(values, (int, float)):
        values = [values]
    finite_gib(name, values)  # finite, > 0 (validate.MEASURED_GIB_RULE): NaN never reaches the arithmetic
    return tuple(gib_to_bytes(x) for x in values) or None


def sglang_inputs(flags: dict[str, Any]) -> tuple[SGLangArgs, Measured]:
    """(args, measured inputs) from reconciled flags, as ``kvscope.plan`` reads them (pops ``flags``;
    ``kvscope.sweep`` reads a grid point the same way)."""
    from .engines.sglang.args import SGLangArgs
    from .engines.sglang.plan import Measured

    measured = Measured(pre_load_free_bytes=_gib_per_rank(flags.pop("pre_load_free_gib", None)),
                        post_load_free_bytes=_gib_per_rank(flags.pop("post_load_free_gib", None),
                                                           "--post-load-free-gib"))
    for long in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        flags.pop(long)
    known = {f.name for f in dataclasses.fields(SGLangArgs)}
    unknown = sorted(set(flags) - known)
    if unknown:
        raise FlagError(f"not an SGLang flag kvscope models: {', '.join(unknown)}", field=unknown[0],
                        fix=f"use ServerArgs names: {', '.join(sorted(known))}")
    return SGLangArgs(**flags), measured


def vllm_inputs(flags: dict[str, Any]) -> tuple[Any, VllmMeasured]:
    """(VllmFlags, measured inputs) from reconciled flags, as ``kvscope.plan`` reads them (pops ``flags``)."""
    from .engines.vllm.args import flags_from_options as vllm_flags_from_options
    from .engines.vllm.plan import VllmMeasured

    measured = VllmMeasured(**{k: flags.pop(k) for k in __getattr__("VLLM_MEASURED") if k in flags})
    for short in ("tp_size", "pp_size", "dp_size"):
        flags.pop(short)
    return vllm_flags_from_options(**flags), measured


def _sglang(spec, src, gpu, version: str | None, flags: dict[str, Any], check_fixes: bool = True) -> Timeline:
    from .engines.sglang.plan import plan_sglang

    a, measured = sglang_inputs(flags)
    draft = load_spec(a.speculative_draft_model_path)[0] if a.speculative_draft_model_path else None
    exact_fn = exact_weights_per_rank_fn(src, spec)
    exact = exact_fn(a.tp_size) if exact_fn is not None else None
    return plan_sglang(spec, gpu, a, version, measured, draft, exact, check_fixes=check_fixes)


def _vllm(spec, gpu, version: str | None, flags: dict[str, Any], tensors=None, check_fixes: bool = True) -> Timeline:
    """``tensors``: the checkpoint's safetensors headers (``checkpoint_tensors_of``): exact weights per
    rank under vLLM's sharding (model/shard.py)."""
    from .engines.vllm.plan import plan_vllm

    vflags, measured = vllm_inputs(flags)
    return plan_vllm(spec, gpu, vflags, version, measured, tensors=tensors, check_fixes=check_fixes)


def _serving_flags(spec, src, engine: str, version: str | None, flags: dict[str, Any]):
    """``--quantization`` / ``--dtype`` (both engines' names) applied to the model (model/load.py)."""
    quantization, dtype = flags.pop("quantization", None), flags.pop("dtype", None)
    if quantization is None and dtype is None:
        return spec, src
    from .engines.vllm.release import LATEST_VERSION
    from .model.load import apply_serving_flags

    version = version or (LATEST_VERSION if engine == "vllm" else None)
    return apply_serving_flags(spec, src, engine, version, quantization, dtype)


def plan(model: str, gpu: str | None = None, *, engine: Engine = "sglang", engine_version: str | None = None,
         gpu_memory_mib: int | None = None, check_fixes: bool = True, **flags: Any) -> Timeline:
    """Simulate one engine start. ``flags`` are the engine's own flag names in Python spelling.
    ``check_fixes=False`` skips re-planning each fix (engines/fixcheck.py) for callers that read none.

    >>> t = plan("moonshotai/Kimi-K2.5", "rtx-pro-6000", tp_size=8, mem_fraction_static=0.55,
    ...          pre_load_free_gib=94, post_load_free_gib=21.7)
    >>> t.starts, t.kv_cell_bytes
    (False, 70272)
    """
    if engine not in ("sglang", "vllm"):
        raise FlagError(f"unknown engine {engine!r}", field="engine", fix="use 'sglang' or 'vllm'")
    spec, src = load_spec(model)
    spec, src = _serving_flags(spec, src, engine, engine_version, flags)
    g = get_gpu(gpu, gpu_memory_mib)
    flags = reconcile_parallel_sizes(flags)
    if engine == "vllm":
        return _vllm(spec, g, engine_version, flags, checkpoint_tensors_of(src), check_fixes)
    return _sglang(spec, src, g, engine_version, flags, check_fixes)


make_callable(__name__, plan)  # kvscope.plan(...) is plan(...)
