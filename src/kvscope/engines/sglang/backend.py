"""SGLang's attention-backend choice and the two things it does to memory: page size, and the
aiter ``mem_fraction_static * 0.85``.

SGLang picks an attention backend when ``--attention-backend`` is not given, then forces the page
size some backends need, and on ROCm scales the static fraction for ``aiter``. Mirrors, read from
the released wheels:

* default backend: ``ModelRunner.model_specific_adjustment`` (model_runner.py @ v0.4.6.post5,
  v0.4.8.post1, v0.4.10.post2, v0.5.3), ``ServerArgs._handle_attention_backend_compatibility``
  (server_args.py @ v0.5.6 ... v0.5.13), ``get_default_attn_backend``
  (arg_groups/model_override_base.py @ v0.5.23). MHA: FA3 on Hopper (<= 0.5.8 only for
  ``is_fa3_default_architecture``), ``trtllm_mha`` on SM100/SM103 from 0.5.7, ``aiter`` on ROCm,
  else flashinfer. MLA: FA3 on Hopper, flashinfer on SM100, on ROCm ``aiter`` when
  ``get_num_kv_heads(tp_size)`` is 16 or 128 (else triton), else triton.
* model overrides (``_handle_model_specific_adjustments``): DeepseekV3ForCausalLM on SM100 ->
  ``trtllm_mla`` (from 0.5.4, server_args.py @ v0.5.4 l.872-886; absent @ v0.5.3); DSA (DeepSeek V3.2 / GLM-5) page 64 on CUDA, 1 on
  ROCm; gpt-oss SM100 -> trtllm_mha, SM90 -> fa3, else triton; Llama 4 SM100 -> trtllm_mha,
  SM90 -> fa3, ROCm -> aiter.
* page constraints: flashmla 64, cutlass_mla 128, trtllm_mla 32|64 (else 64), trtllm_mha
  16|32|64 (0.5.23: also 128; else 64) -- server_args.py @ v0.5.9 l.1855-1910,
  arg_groups/overrides.py::_mla_backend_page_constraints @ v0.5.23.
* aiter: ``if context_len > 8192: mem_fraction_static *= 0.85``, applied to the user's value too
  (model_runner.py @ v0.4.7 l.423-425 (first release; absent @ v0.4.6.post5), v0.4.8.post1 l.436 and v0.5.3 l.600, in the runner only, so the ServerArgs
  dump shows the unscaled value; server_args.py @ v0.5.6 l.1420 and v0.5.9 l.1924;
  attention_hook.py @ v0.5.23 l.244, unless ``SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION``).
  Absent @ v0.4.6.post5.

* hybrid GDN models (Qwen3-Next, Qwen3.5) on SM100 from 0.5.13: triton while the mamba radix
  cache is on, trtllm_mha (page 64) with ``--disable-radix-cache`` or speculative decoding.

Not modelled (left at page size 1 / no factor): FA4 prefill for asymmetric-KV MHA (page 128),
the mamba ``extra_buffer`` scheduler strategy, NPU/XPU/MUSA.
Boundaries read from adjacent release wheels (not conformance-run; see docs/conformance.md): aiter
x0.85 and the ROCm MLA aiter choice from 0.4.7 (absent @ v0.4.6.post5), DeepseekV3 SM100
trtllm_mla from 0.5.4 (absent @ v0.5.3), the trtllm_mla backend and its page constraint from 0.4.10
(server_args.py @ v0.4.10.post2 l.428; no trtllm_mla @ v0.4.9), the SM100 trtllm_mha default from
0.5.7 (absent @ v0.5.6).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...hardware.gpus import GPU
from ...model.spec import ModelSpec
from .args import SGLangArgs
from .release import SGLangRelease

AITER_CONTEXT_THRESHOLD = 8192
AITER_FRACTION_FACTOR = 0.85
# v0.5.4.post1 moved the aiter factor into ServerArgs._handle_attention_backend_compatibility with x0.90
# (server_args.py @ v0.5.4.post1 l.1196-1199); v0.5.4 (model_runner.py l.646-648) and v0.5.5+ (server_args.py) use x0.85
AITER_FRACTION_FACTOR_BY_RELEASE = {"0.5.4.post1": 0.90}

# utils/common.py::is_fa3_default_architecture @ v0.5.6 (dropped from the default rule in 0.5.9).
FA3_DEFAULT_ARCHITECTURES = frozenset({
    "Qwen2ForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM", "Olmo2ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Glm4MoeForCausalLM", "Glm4vMoeForConditionalGeneration", "Step3VLForConditionalGeneration",
})

# server_args.py @ v0.5.13 l.2506 / overrides.py::_qwen3_5_hybrid_overrides @ v0.5.18: on SM100
# these default to triton (page 1) while the mamba radix cache is on (no extra buffer, no spec),
# else trtllm_mha (page 64). The "auto" mamba_scheduler_strategy is taken as no_buffer.
HYBRID_GDN_ARCHS = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration",
})

# Backends that force a page size: (allowed sizes, size forced otherwise).
PAGE_CONSTRAINTS = {
    "flashmla": ((64,), 64),
    "cutlass_mla": ((128,), 128),
    "trtllm_mla": ((32, 64), 64),
    "trtllm_mha": ((16, 32, 64), 64),
}


@dataclass(frozen=True)
class AttentionBackend:
    """The attention backend SGLang runs, the page size it forces and the aiter fraction factor."""

    name: str
    source: str  # "user" | "default" | "model override"
    page_size: int
    page_size_source: str  # "user" | "default" | why it was forced
    fraction_factor: float | None  # aiter x0.85 (None: not applied)
    reason: str  # one line: why this backend


def _arch(spec: ModelSpec) -> str:
    return spec.architectures[0] if spec.architectures else ""


def _platform(gpu: GPU) -> str:
    """``is_hip`` / ``is_sm100_supported`` (capability major 10: SM100, SM103) /
    ``is_hopper_with_cuda_12_3`` (SM90); anything else (SM80, SM89, SM120 ...) is "other"."""
    if gpu.vendor == "amd":
        return "hip"
    if gpu.sm in ("sm100", "sm103"):
        return "sm100"
    if gpu.sm == "sm90":
        return "sm90"
    return "other"


def _speculative_topk_ok(a: SGLangArgs) -> bool:
    """``is_no_spec_infer_or_topk_one`` and the eagle-topk condition of the trtllm_mha default."""
    if a.speculative_algorithm is None:
        return True
    return a.speculative_eagle_topk is not None and a.speculative_eagle_topk == 1


def mla_kv_heads_per_rank(spec: ModelSpec, tp: int) -> int:
    """SGLang ``ModelConfig.get_num_kv_heads(tp)`` for an MLA model: the config's
    ``num_key_value_heads`` // tp. DeepSeek-V3/R1, Kimi-K2 and GLM-5 configs set it equal to
    ``num_attention_heads`` (kvscope's ModelSpec stores 1 for MLA), so the head count is used."""
    return max(1, spec.num_attention_heads // tp)


def default_backend(rel: SGLangRelease, spec: ModelSpec, gpu: GPU, a: SGLangArgs) -> tuple[str, str, str]:
    """(backend, source, reason) when ``--attention-backend`` is not given."""
    plat = _platform(gpu)
    arch = _arch(spec)
    if spec.has_dsa_indexer:
        return "nsa", "model override", "DSA model: native sparse attention backend"
    if arch == "GptOssForCausalLM":
        name = {"sm100": "trtllm_mha", "sm90": "fa3"}.get(plat, "triton")
        return name, "model override", f"gpt-oss on {gpu.sm}"
    if "Llama4" in arch and rel.llama4_backend_override:
        name = {"sm100": "trtllm_mha", "sm90": "fa3", "hip": "aiter"}.get(plat)
        if name:
            return name, "model override", f"Llama 4 on {gpu.sm}"
    if arch in HYBRID_GDN_ARCHS and plat == "sm100" and rel.hybrid_gdn_sm100_backend:
        if a.disable_radix_cache or a.speculative_algorithm is not None:
            return "trtllm_mha", "model override", f"{arch} on SM100 without mamba radix cache"
        return "triton", "model override", f"{arch} on SM100: mamba radix cache needs page_size 1"
    if spec.is_mla:
        if arch == "DeepseekV3ForCausalLM" and plat == "sm100" and rel.deepseek_v3_sm100_trtllm_mla:
            return "trtllm_mla", "model override", "DeepseekV3ForCausalLM on SM100"
        if plat == "sm90":
            return "fa3", "default", "MLA on Hopper"
        if plat == "sm100":
            return "flashinfer", "default", "MLA on SM100"
        if plat == "hip":
            heads = mla_kv_heads_per_rank(spec, a.tp_size)
            spec_ok = a.speculative_algorithm is None or rel.rocm_mla_aiter_with_speculative
            if heads in (16, 128) and spec_ok and rel.rocm_mla_aiter:
                return "aiter", "default", f"MLA on ROCm with {heads} KV heads per rank"
            return "triton", "default", f"MLA on ROCm with {heads} KV heads per rank (aiter needs 16 or 128)"
        return "triton", "default", f"MLA on {gpu.sm}"
    if plat == "sm90" and _speculative_topk_ok(a) and (
            rel.fa3_default_all_mha or arch in FA3_DEFAULT_ARCHITECTURES):
        return "fa3", "default", "MHA on Hopper"
    if plat == "sm100" and _speculative_topk_ok(a) and rel.sm100_trtllm_mha_default:
        return "trtllm_mha", "default", "MHA on SM100"
    if plat == "hip":
        return "aiter", "default", "MHA on ROCm"
    return "flashinfer", "default", f"MHA on {gpu.sm}"


def resolve_attention_backend(rel: SGLangRelease, spec: ModelSpec, gpu: GPU, a: SGLangArgs,
                              context_len: int) -> AttentionBackend:
    """The backend, the page size after its constraints, and the aiter fraction factor."""
    if a.attention_backend:
        name, source, reason = a.attention_backend, "user", "--attention-backend"
    else:
        name, source, reason = default_backend(rel, spec, gpu, a)
    page = a.page_size
    page_source = "user" if page is not None else "default"
    if page is None:
        page = 1
    if spec.has_dsa_indexer and rel.dsa_forced_page:
        forced = 1 if gpu.vendor == "amd" else 64
        if forced != page:
            page, page_source = forced, f"DSA model on {'ROCm' if forced == 1 else 'CUDA'}"
    if name in PAGE_CONSTRAINTS and (name != "trtllm_mla" or rel.trtllm_mla_page_constraint):
        allowed, forced = PAGE_CONSTRAINTS[name]
        if name == "trtllm_mha" and rel.trtllm_mha_page_128:
            allowed = allowed + (128,)
        if page not in allowed:
            page, page_source = forced, f"{name} supports page_size {'/'.join(map(str, allowed))}"
    factor = None
    if name == "aiter" and context_len > AITER_CONTEXT_THRESHOLD and rel.aiter_fraction_factor:
        factor = AITER_FRACTION_FACTOR_BY_RELEASE.get(str(rel.version), AITER_FRACTION_FACTOR)
    return AttentionBackend(name, source, page, page_source, factor, reason)
