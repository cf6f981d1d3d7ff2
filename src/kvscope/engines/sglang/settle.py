"""Every SGLang auto-choice, settled before any arithmetic: the version-aware defaults (fraction,
chunked prefill, CUDA-graph sizes), the attention backend and the page size it forces, the aiter
fraction factor, the DeepSeek-V4 overrides and the KV dtype. One frozen record; nothing after it
re-decides a flag (mini-sglang ``Engine._adjust_config`` is the model).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...hardware.gpus import GPU
from ...model.spec import ModelSpec
from . import deepseek_v4 as dsv4
from .args import ResolvedDefaults, SGLangArgs, resolve_defaults
from .backend import AttentionBackend, resolve_attention_backend
from .kv_cache import kv_cache_dtype
from .release import SGLangRelease


@dataclass(frozen=True)
class Settled:
    """The flags as SGLang runs them."""

    args: SGLangArgs  # the user's flags after model overrides (DeepSeek-V4: max_running_requests 256)
    defaults: ResolvedDefaults  # chunk, decode max_bs, the fraction (before the aiter factor), prefill graph
    backend: AttentionBackend  # the attention backend, its forced page size and the aiter factor
    page_size: int  # tokens per KV page (DeepSeek-V4: 256)
    fraction_factor: float  # aiter x0.85 at context > 8192, else 1.0
    mem_fraction_static: float  # what the profile uses: the fraction x fraction_factor
    context_len: int  # --context-length, else the model's derived context length
    kv_dtype_name: str  # the KV dtype name (bfloat16, float8_e4m3fn ...)
    kv_bytes: int  # bytes per KV element


def derived_context_len(spec: ModelSpec) -> int:
    """``ModelConfig.context_len`` when ``--context-length`` is not given (model_config.py @ v0.5.9
    ``_derive_context_length``): SGLang's ``get_context_length``, see ``ModelSpec.sglang_context_len``."""
    return spec.sglang_context_len or spec.max_position_embeddings


def settle(spec: ModelSpec, gpu: GPU, a: SGLangArgs, rel: SGLangRelease) -> Settled:
    """Defaults → attention backend → forced page size → aiter factor → DeepSeek-V4 overrides → KV dtype."""
    context_len = a.context_length or derived_context_len(spec)
    d = resolve_defaults(rel, a, gpu.memory_mib, is_mla=spec.is_mla, is_multimodal=spec.is_multimodal,
                         vit_num_layers=spec.vision.sglang_num_layers if spec.vision else 24,
                         vit_hidden_size=spec.vision.sglang_hidden_size if spec.vision else 1024,
                         is_amd=gpu.vendor == "amd")
    backend = resolve_attention_backend(rel, spec, gpu, a, context_len)
    effective, page = a, backend.page_size
    if spec.dsv4 is not None:  # dsv4 backend, page 256, max_running_requests 256
        effective, page = dsv4.apply_overrides(a)
    factor = backend.fraction_factor or 1.0
    kv_name, kv_bytes = kv_cache_dtype(spec, effective.kv_cache_dtype)
    return Settled(args=effective, defaults=d, backend=backend, page_size=page, fraction_factor=factor,
                   mem_fraction_static=d.mem_fraction_static * factor, context_len=context_len,
                   kv_dtype_name=kv_name, kv_bytes=kv_bytes)
