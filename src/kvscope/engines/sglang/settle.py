"""Every SGLang auto-choice, settled before any arithmetic: the version-aware defaults (fraction,
chunked prefill, CUDA-graph sizes), the attention backend and the page size it forces, the aiter
fraction factor, the DeepSeek-V4 overrides and the KV dtype. One frozen record; nothing after it
re-decides a flag (mini-sglang ``Engine._adjust_config`` is the model).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...hardware.gpus import GPU
from ...model.spec import ModelSpec
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


def sm_major(gpu: GPU) -> int:
    """``torch.cuda.get_device_capability()[0]``: "sm100" -> 10, "sm90" -> 9; ROCm reports the gfx9
    family as major 9 (gfx942 -> (9, 4), gfx950 -> (9, 5))."""
    digits = "".join(ch for ch in gpu.sm if ch.isdigit())
    if gpu.sm.startswith("gfx"):
        return int(digits[0]) if digits else 0
    return int(digits) // 10 if digits else 0


def dsa_kv_cache_flag(spec: ModelSpec, gpu: GPU, flag: str, rel: SGLangRelease) -> str:
    """The KV dtype a DeepSeek DSA model (V3.2, GLM-5: ``has_dsa_indexer``) runs with.

    ``auto`` becomes ``fp8_e4m3`` on SM >= 10 (Blackwell) and ``bfloat16`` below (Hopper SM90; ROCm's
    major 9): server_args.py @ v0.5.6 l.977-986, ``_set_default_nsa_kv_cache_dtype`` @ v0.5.9,
    ``_set_default_dsa_kv_cache_dtype`` @ v0.5.13 / v0.5.14, arg_groups/overrides.py @ v0.5.18 / v0.5.23.
    SGLang 0.5.3 and 0.5.4 set ``fp8_e4m3`` on SM >= 10 whatever ``--kv-cache-dtype`` said
    (server_args.py @ v0.5.4 l.1026-1032). The FP8 choice then sizes the 656-byte fp8 latent + scales +
    rope buffer and the indexer (kv_cache.mla_kv_cache_dim)."""
    if not spec.has_dsa_indexer or not rel.dsa_kv_fp8_default:
        return flag
    major = sm_major(gpu)
    if rel.dsa_kv_fp8_forced and major >= 10:
        return "fp8_e4m3"
    if flag.lower() == "auto":
        return "fp8_e4m3" if major >= 10 else "bfloat16"
    return flag


# ``is_deepseek_nsa`` (configs/model_config.py @ v0.5.3 … v0.5.6): the first architecture is one of these
# (0.5.6 loads DeepseekV32ForCausalLM configs as DeepseekV3ForCausalLM) and the config has index_topk
NSA_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN")


def dsa_server_overrides(spec: ModelSpec, a: SGLangArgs, d: ResolvedDefaults,
                         rel: SGLangRelease) -> tuple[SGLangArgs, ResolvedDefaults]:
    """``_handle_model_specific_adjustments`` for DeepSeek NSA (V3.2) on a GPU, which runs after the memory
    defaults (``_handle_gpu_memory_settings``): 0.5.3-0.5.5 turn DP attention on with ``dp_size = tp_size``
    (server_args.py @ v0.5.3 l.814-818, v0.5.4 l.1018-1021, v0.5.5 l.1070-1073); 0.5.3 also sets
    ``mem_fraction_static = 0.8`` whatever was passed (l.823). From 0.5.6 ``dp_size`` is left as passed and
    ``_handle_data_parallelism`` turns DP attention off again at ``dp_size == 1``: nothing changes."""
    nsa = bool(spec.architectures) and spec.architectures[0] in NSA_ARCHITECTURES and spec.index_topk is not None
    if not nsa:
        return a, d
    if rel.dsa_dp_attention_forced and a.tp_size > 1:
        a = replace(a, enable_dp_attention=True, dp_size=a.tp_size)
    if rel.dsa_mem_fraction_08:
        d = replace(d, mem_fraction_static=0.8, mem_fraction_static_source="model", reserved_mem_mib=None)
    return a, d


def settle(spec: ModelSpec, gpu: GPU, a: SGLangArgs, rel: SGLangRelease) -> Settled:
    """Defaults → DeepSeek NSA overrides → attention backend → forced page size → aiter factor → DeepSeek-V4
    overrides → KV dtype."""
    context_len = a.context_length or derived_context_len(spec)
    d = resolve_defaults(rel, a, gpu.memory_mib, is_mla=spec.is_mla, is_multimodal=spec.is_multimodal,
                         vit_num_layers=spec.vision.sglang_num_layers if spec.vision else 24,
                         vit_hidden_size=spec.vision.sglang_hidden_size if spec.vision else 1024,
                         is_amd=gpu.vendor == "amd")
    a, d = dsa_server_overrides(spec, a, d, rel)
    backend = resolve_attention_backend(rel, spec, gpu, a, context_len)
    effective, page = a, backend.page_size
    if spec.dsv4 is not None:  # dsv4 backend, page 256, max_running_requests 256
        from . import deepseek_v4 as dsv4  # imported only for DeepSeek-V4 (import cost)

        effective, page = dsv4.apply_overrides(a)
    factor = backend.fraction_factor or 1.0
    kv_name, kv_bytes = kv_cache_dtype(spec, dsa_kv_cache_flag(spec, gpu, effective.kv_cache_dtype, rel))
    return Settled(args=effective, defaults=d, backend=backend, page_size=page, fraction_factor=factor,
                   mem_fraction_static=d.mem_fraction_static * factor, context_len=context_len,
                   kv_dtype_name=kv_name, kv_bytes=kv_bytes)
