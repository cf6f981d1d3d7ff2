"""ModelSpec: one normalised, frozen view of a Hugging Face ``config.json``.

The formulas never touch the raw dict. ``ModelSpec.from_hf_config`` resolves, once:
nested ``text_config`` (multimodal wrappers), missing ``num_key_value_heads``, explicit
``head_dim``, MLA ranks, the DSA indexer, per-layer attention kinds (``layer_types``,
``sliding_window_pattern``, Llama 4 chunked layers, Qwen3-Next / Nemotron-H hybrid patterns),
linear-attention / mamba state shapes, MoE layout, MTP layers, the vision tower and quantization.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..errors import ConfigError
from ..validate import Rule, check_config, check_config_consistency, check_value
from .quant import QuantSpec, quant_from_config

# Layer kinds (per decoder layer).
FULL = "full_attention"
SLIDING = "sliding_attention"  # incl. Llama 4 chunked attention (window = attention_chunk_size)
LINEAR = "linear_attention"  # gated delta net (Qwen3-Next) / other linear attention
MAMBA = "mamba"  # Mamba2 (Nemotron-H, Falcon-H1)
NO_ATTENTION = "none"  # an MLP-only layer of a hybrid stack (Nemotron-H '-', 'E')
KV_KINDS = (FULL, SLIDING)

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}

# model_type values we know how to read; anything else falls back to a generic decoder (warned).
KNOWN_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25", "glm4_moe", "glm_moe_dsa",
    "gpt_oss", "gemma", "gemma2", "gemma3", "gemma3_text", "llama4", "llama4_text", "phi3", "phi",
    "minimax_m2", "nemotron_h", "falcon_h1", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe",
    "qwen3_vl_text", "qwen3_vl_moe_text", "qwen2_5_vl_text", "qwen2_vl_text",
    "mistral3", "pixtral", "glm4", "cohere", "starcoder2", "olmo2", "ernie4_5", "ernie4_5_moe",
    "qwen3_5", "qwen3_5_moe", "kimi_linear", "nemotron", "granite", "exaone",
    "minicpm3",  # SGLang: MLA cache (model_config.py); vLLM: MHA cache (engines/vllm/plan.py vllm_attention_view)
    "deepseek_v4",  # compressed/SWA attention: ModelSpec.dsv4, engines/{vllm,sglang}/deepseek_v4.py
})
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa", "kimi_linear"})


@dataclass(frozen=True)
class MoESpec:
    """A model's mixture-of-experts layout."""

    num_experts: int  # routed experts
    num_experts_per_tok: int
    moe_intermediate_size: int  # per routed expert
    shared_intermediate_size: int = 0  # total width of the shared expert(s); 0 when none
    has_gate_bias: bool = False


@dataclass(frozen=True)
class MambaSpec:
    """Recurrent state of one linear-attention / mamba layer (before TP sharding).

    Mamba2: conv state (conv_dim, conv_kernel-1) with conv_dim = intermediate + 2*n_groups*state_size,
    SSM state (num_heads, head_dim, state_size).
    Gated delta net (Qwen3-Next): conv_dim = 2*key_heads*key_dim + value_heads*value_dim,
    SSM state (value_heads, key_dim, value_dim).
    """

    kind: str  # "mamba2" | "gdn"
    conv_dim: int
    conv_kernel: int
    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int = 1


@dataclass(frozen=True)
class VisionSpec:
    """A multimodal model's vision tower."""

    num_layers: int
    hidden_size: int
    intermediate_size: int
    # What SGLang's VLM factor reads: getattr(vision_config, "num_hidden_layers", 24) and
    # getattr(..., "hidden_size", 1024) (server_args.py adjust_mem_fraction_for_vlm @ v0.5.9).
    sglang_num_layers: int = 24
    sglang_hidden_size: int = 1024


@dataclass(frozen=True)
class DeepseekV4Spec:
    """DeepSeek-V4 (``model_type: deepseek_v4``) attention geometry the KV planners need.

    Per decoder layer ``compress_ratios[i]``: 0 = sliding-window only (a ``sliding_window``-token
    raw KV ring), 4 = compressed sparse attention (one latent row per 4 tokens + the lightning
    indexer's K cache), 128 = heavily compressed attention (one row per 128 tokens). Every layer
    also keeps the SWA ring. vLLM reads the same list (``get_compress_ratios``,
    vllm/transformers_utils/deepseek_v4_utils.py @ v0.33.0; entries past ``num_hidden_layers`` are
    the MTP layers, which are SWA-only: ``compress_ratio = 1`` for layer ids >= num_hidden_layers in
    vllm/models/deepseek_v4/attention.py @ v0.33.0).
    """

    compress_ratios: tuple[int, ...]  # one per decoder layer (MTP layers excluded)
    sliding_window: int
    head_dim: int  # 512: one latent "head" shared by K and V
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    index_head_dim: int
    index_n_heads: int
    index_topk: int
    hc_mult: int = 1
    num_hash_layers: int = 0
    expert_dtype: str = "fp8"  # "fp4": routed experts stored as packed e2m1 pairs + ue8m0 scales
    n_mtp_layers: int | None = None  # DSpark draft layers (vLLM: ``n_mtp_layers or 3``)

    @property
    def num_c4_layers(self) -> int:
        return sum(1 for r in self.compress_ratios if r == 4)

    @property
    def num_c128_layers(self) -> int:
        return sum(1 for r in self.compress_ratios if r == 128)

    @property
    def num_swa_only_layers(self) -> int:
        return sum(1 for r in self.compress_ratios if r <= 1)


@dataclass(frozen=True)
class ModelSpec:
    """What sizing reads from a model's config.json (text model, MoE, MLA, state, vision)."""

    name: str
    model_type: str
    architectures: tuple[str, ...]
    hidden_size: int
    num_hidden_layers: int  # decoder layers, MTP layers excluded
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # K head dim (qk_nope + qk_rope for MLA)
    v_head_dim: int
    vocab_size: int
    intermediate_size: int  # dense MLP width
    max_position_embeddings: int
    dtype: str  # torch dtype name of the weights/activations ("bfloat16")
    tie_word_embeddings: bool
    attention: str  # "mha" (incl. GQA/MQA) | "mla"
    layer_types: tuple[str, ...]  # one per decoder layer
    ffn_types: tuple[str, ...]  # "dense" | "moe" | "none", one per decoder layer
    sliding_window: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    q_lora_rank: int | None = None
    index_head_dim: int | None = None  # DSA indexer (DeepSeek V3.2, GLM-5)
    index_n_heads: int | None = None
    index_topk: int | None = None
    moe: MoESpec | None = None
    mamba: MambaSpec | None = None
    num_nextn_predict_layers: int = 0  # MTP layers in the checkpoint
    vision: VisionSpec | None = None
    quant: QuantSpec = field(default_factory=QuantSpec)
    assumed: tuple[str, ...] = ()  # fields we had to assume (unknown model_type, missing keys)
    sglang_context_len: int | None = None  # SGLang's get_context_length(hf_text_config), see below
    # The text config's length and RoPE keys, as read (vLLM's _get_and_verify_max_len needs them,
    # version by version: engines/vllm/max_len.py derive_max_model_len).
    length_config: tuple[tuple[str, Any], ...] = ()
    dsv4: DeepseekV4Spec | None = None  # DeepSeek-V4 compressed/SWA attention (model_type deepseek_v4)
    # config ``attention_bias`` (GPT-OSS, GLM-4.5, some Llama variants): q/k/v(/o) projections carry a bias.
    attention_bias: bool = False

    # --- derived counts -------------------------------------------------------------------
    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def has_dsa_indexer(self) -> bool:
        return self.index_head_dim is not None

    @property
    def is_deepseek_v4(self) -> bool:
        return self.dsv4 is not None

    @property
    def is_multimodal(self) -> bool:
        return self.vision is not None

    @property
    def is_hybrid_swa(self) -> bool:
        return SLIDING in self.layer_types and FULL in self.layer_types

    @property
    def is_mambaish(self) -> bool:
        return self.mamba is not None

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep a per-token KV cache (full + sliding attention)."""
        return sum(1 for t in self.layer_types if t in KV_KINDS)

    @property
    def num_full_attention_layers(self) -> int:
        return self.layer_types.count(FULL)

    @property
    def num_sliding_layers(self) -> int:
        return self.layer_types.count(SLIDING)

    @property
    def num_state_layers(self) -> int:
        return sum(1 for t in self.layer_types if t in (LINEAR, MAMBA))

    @property
    def full_attention_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL)

    @property
    def mla_kv_dim(self) -> int:
        """kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3/Kimi K2)."""
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def context_len(self) -> int:
        return self.max_position_embeddings

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str | None = None,
                       hf_quant_config: Mapping[str, Any] | None = None) -> "ModelSpec":
        return spec_from_hf_config(config, name, hf_quant_config)


# ---------------------------------------------------------------------------------------------
# Parsing


def _int(cfg: Mapping[str, Any], key: str, *, required: bool = True, default: int | None = None) -> int | None:
    v = cfg.get(key, None)
    if v is None:
        if required and default is None:
            raise ConfigError(f"config.json has no '{key}'", field=key,
                              fix="pass a complete Hugging Face config.json")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0:
        raise ConfigError(f"'{key}' must be a non-negative integer, got {v!r}", field=key,
                          fix="fix the value in config.json")
    return int(v)


# sglang/srt/utils/hf_transformers_utils.py CONTEXT_LENGTH_KEYS (same @ v0.4.6.post5 ... v0.5.23)
SGLANG_CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                              "max_position_embeddings")


LENGTH_CONFIG_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len", "rope_scaling",
    "rope_parameters", "rope_theta", "rotary_emb_base", "partial_rotary_factor", "rotary_pct",
    "rotary_emb_fraction", "original_max_position_embeddings",
)


def sglang_context_length(text: Mapping[str, Any], fallback: int) -> int:
    """SGLang's derived ``context_len``: ``get_context_length(hf_text_config)``
    (hf_transformers_utils.py @ v0.4.6.post5, v0.5.9, v0.5.23): the first of
    ``CONTEXT_LENGTH_KEYS`` times the rope-scaling ``factor``, except when the rope-scaling dict
    has ``original_max_position_embeddings`` or ``rope_type == "llama3"`` (factor 1). So a linear
    ``factor: 8`` (gemma-3) gives 8 x max_position_embeddings, yarn with an original length does
    not. transformers fills ``rope_type`` from a legacy ``type`` key, so both are read."""
    rope = text.get("rope_scaling")
    factor: float = 1
    if isinstance(rope, Mapping) and rope:
        f = rope.get("factor", 1)
        factor = f if isinstance(f, (int, float)) and not isinstance(f, bool) else 1
        if "original_max_position_embeddings" in rope:
            factor = 1
        if (rope.get("rope_type") or rope.get("type")) == "llama3":
            factor = 1
    for key in SGLANG_CONTEXT_LENGTH_KEYS:
        val = text.get(key)
        if isinstance(val, (int, float)) and not isinstance(val, bool) and val > 0:
            return int(factor * val)
    return int(factor * fallback)


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and sub:
            return sub
    return config


def _dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    raw = _first(text, "torch_dtype", "dtype") or _first(config, "torch_dtype", "dtype") or "bfloat16"
    raw = str(raw).replace("torch.", "")
    if raw not in DTYPE_BYTES:
        raise ConfigError(f"unknown torch_dtype {raw!r}", field="torch_dtype",
                          fix="use bfloat16, float16 or float32")
    # Both engines serve float32 checkpoints in bfloat16 under --dtype auto
    # (vllm/config/model.py _resolve_auto_dtype; sglang model_config.py _get_and_verify_dtype).
    if DTYPE_BYTES[raw] == 4:
        return "bfloat16"
    return {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}.get(raw, raw)


def _layer_types(text: Mapping[str, Any], model_type: str, n: int) -> tuple[tuple[str, ...], int | None]:
    """Per-layer attention kind and the sliding window (None when every layer is full)."""
    window = text.get("sliding_window")
    explicit = text.get("layer_types")
    if isinstance(explicit, list) and explicit:
        if len(explicit) < n:
            raise ConfigError(f"layer_types has {len(explicit)} entries for {n} layers",
                              field="layer_types", fix="give one entry per decoder layer")
        mapping = {"full_attention": FULL, "sliding_attention": SLIDING, "chunked_attention": SLIDING,
                   "linear_attention": LINEAR, "mamba": MAMBA, "attention": FULL}
        kinds = tuple(mapping.get(str(t), FULL) for t in explicit[:n])
        return kinds, (int(window) if SLIDING in kinds and window else None)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:  # Nemotron-H: M mamba, * attention, - MLP, E MoE
        if len(pattern) < n:
            raise ConfigError(f"hybrid_override_pattern has {len(pattern)} entries for {n} layers",
                              field="hybrid_override_pattern", fix="give one character per decoder layer")
        kinds = tuple({"M": MAMBA, "*": FULL}.get(c, NO_ATTENTION) for c in pattern[:n])
        return kinds, None
    if model_type == "qwen3_next" or text.get("full_attention_interval") is not None:
        k = int(text.get("full_attention_interval") or 4)
        return tuple(FULL if (i + 1) % k == 0 else LINEAR for i in range(n)), None
    if model_type in ("llama4", "llama4_text") and text.get("attention_chunk_size"):
        # Llama 4: no_rope_layers[i] == 0 marks a global (NoPE) layer; default every 4th layer.
        nope = text.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
        if len(nope) < n:
            raise ConfigError(f"no_rope_layers has {len(nope)} entries for {n} layers", field="no_rope_layers",
                              fix="give one entry per decoder layer")
        return tuple(SLIDING if nope[i] else FULL for i in range(n)), int(text["attention_chunk_size"])
    if window and model_type == "gemma2":
        return tuple(SLIDING if i % 2 == 0 else FULL for i in range(n)), int(window)
    if window and model_type in ("gemma3", "gemma3_text"):
        k = int(text.get("sliding_window_pattern") or 6)
        return tuple(FULL if (i + 1) % k == 0 else SLIDING for i in range(n)), int(window)
    return tuple(FULL for _ in range(n)), None


def _moe(text: Mapping[str, Any]) -> MoESpec | None:
    num = _first(text, "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")
    if not num:
        return None
    # Gemma 4 MoE names it ``top_k_experts`` (sglang models/gemma4_causal.py @ 0.5.23, vllm models/gemma4.py @ 0.33.0)
    topk = _first(text, "num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k", "top_k_experts")
    if not topk:
        raise ConfigError("MoE config has no 'num_experts_per_tok'", field="num_experts_per_tok",
                          fix="add the number of routed experts per token")
    width = _first(text, "moe_intermediate_size", "expert_intermediate_size")
    if width is None:
        width = text.get("intermediate_size")  # Mixtral, GPT-OSS, Llama 4: experts use intermediate_size
    if width is None:
        raise ConfigError("MoE config has no 'moe_intermediate_size' (nor 'intermediate_size')",
                          field="moe_intermediate_size", fix="add the routed experts' width")
    shared = 0
    if text.get("n_shared_experts"):
        shared = int(text["n_shared_experts"]) * int(width)
    elif text.get("shared_expert_intermediate_size"):
        shared = int(text["shared_expert_intermediate_size"])
    elif text.get("model_type") in ("llama4_text",):
        shared = int(text.get("intermediate_size") or width)
    return MoESpec(
        num_experts=int(num),
        num_experts_per_tok=int(topk),
        moe_intermediate_size=int(width),
        shared_intermediate_size=shared,
        has_gate_bias=text.get("topk_method") == "noaux_tc",
    )


def _ffn_types(text: Mapping[str, Any], moe: MoESpec | None, layer_types: tuple[str, ...]) -> tuple[str, ...]:
    n = len(layer_types)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        if len(pattern) < n:  # also when layer_types, not the pattern, gave the attention kinds
            raise ConfigError(f"hybrid_override_pattern has {len(pattern)} entries for {n} layers",
                              field="hybrid_override_pattern", fix="give one character per decoder layer")
        return tuple({"-": "dense", "E": "moe"}.get(c, "none") for c in pattern[:n])
    if moe is None:
        return tuple("dense" for _ in range(n))
    first_dense = int(text.get("first_k_dense_replace") or 0)
    mlp_only = set(text.get("mlp_only_layers") or ())
    freq = text.get("moe_layer_freq")
    if isinstance(freq, list):
        return _moe_layer_list(freq, n)
    if freq is not None:  # an integer step here (the list form returned above)
        check_value("moe_layer_freq", freq, Rule("int", 0, 10_000), ConfigError, "config.json: ")
    step = int(_first(text, "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq") or 1)
    out = []
    for i in range(n):
        # HF/SGLang: layer i is MoE when past the dense prefix and (i + 1) % step == 0.
        is_moe = i >= first_dense and i not in mlp_only and (i + 1) % step == 0
        out.append("moe" if is_moe else "dense")
    return tuple(out)


def _moe_layer_list(freq: list, n: int) -> tuple[str, ...]:
    """``moe_layer_freq`` given per layer (MiMo-V2-Flash, MiniMax-M3): layer i is MoE when
    ``moe_layer_freq[i]`` is non-zero (sglang models/mimo_v2.py and minimax_m3.py @ 0.5.23,
    vllm models/mimo_v2.py @ 0.33.0); no other rule (first_k_dense_replace, step) applies."""
    if len(freq) < n or any(isinstance(x, bool) or not isinstance(x, int) or x not in (0, 1) for x in freq):
        raise ConfigError(f"config.json: moe_layer_freq: expected an integer or a list of {n} entries 0 or 1, "
                          f"got {str(freq)[:60]}", field="moe_layer_freq", fix="give one entry per decoder layer")
    return tuple("moe" if freq[i] else "dense" for i in range(n))


def _need(text: Mapping[str, Any], *keys: str) -> int:
    """The first of ``keys`` the config gives (validated an integer by validate.CONFIG_RULES), or a
    ConfigError naming it."""
    v = _first(text, *keys)
    if v is None:
        raise ConfigError(f"config.json has no '{keys[0]}'", field=keys[0],
                          fix="pass the checkpoint's complete config.json")
    return int(v)


def _state_spec(text: Mapping[str, Any], model_type: str, layer_types: tuple[str, ...]) -> MambaSpec | None:
    """The recurrent state of the linear-attention / mamba layers; a config with such layers but no
    state fields is refused (the engines size a state for each of those layers)."""
    m = _mamba(text, model_type)
    if m is None and any(t in (LINEAR, MAMBA) for t in layer_types):
        kind = next(t for t in layer_types if t in (LINEAR, MAMBA))
        raise ConfigError(f"layers of kind {kind} but no state fields (linear_num_value_heads / mamba_num_heads)",
                          field="linear_num_value_heads" if kind == LINEAR else "mamba_num_heads",
                          fix="pass the checkpoint's complete config.json")
    return m


def _mamba(text: Mapping[str, Any], model_type: str) -> MambaSpec | None:
    if text.get("linear_num_value_heads"):  # gated delta net (Qwen3-Next / Qwen3.5)
        kh = _need(text, "linear_num_key_heads")
        vh = _need(text, "linear_num_value_heads")
        kd = _need(text, "linear_key_head_dim")
        vd = _need(text, "linear_value_head_dim")
        return MambaSpec(kind="gdn", conv_dim=2 * kh * kd + vh * vd,
                         conv_kernel=int(text.get("linear_conv_kernel_dim") or 4),
                         num_heads=vh, head_dim=kd, state_size=vd, n_groups=kh)
    if model_type in ("nemotron_h", "falcon_h1") or text.get("mamba_num_heads") or text.get("mamba_n_heads"):
        heads = _need(text, "mamba_num_heads", "mamba_n_heads")
        head_dim = _need(text, "mamba_head_dim", "mamba_d_head")
        state = _need(text, "ssm_state_size", "mamba_d_state")
        groups = int(_first(text, "n_groups", "mamba_n_groups") or 1)
        intermediate = heads * head_dim
        return MambaSpec(kind="mamba2", conv_dim=intermediate + 2 * groups * state,
                         conv_kernel=int(_first(text, "conv_kernel", "mamba_d_conv") or 4),
                         num_heads=heads, head_dim=head_dim, state_size=state, n_groups=groups)
    return None


def _vision(config: Mapping[str, Any]) -> VisionSpec | None:
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return None
    # SGLang's VLM factor reads num_hidden_layers/hidden_size with defaults 24/1024
    # (server_args.py adjust_mem_fraction_for_vlm); Kimi K2.5 names them vt_* (configs/kimi_k25.py).
    layers = _first(vc, "num_hidden_layers", "vt_num_hidden_layers", "depth", "num_layers") or 24
    hidden = _first(vc, "hidden_size", "vt_hidden_size", "embed_dim", "width") or 1024
    inter = _first(vc, "intermediate_size", "vt_intermediate_size", "mlp_dim") or 4 * int(hidden)
    # Kimi K2.5's config class exposes vt_* as num_hidden_layers/hidden_size (configs/kimi_k25.py @ v0.5.9).
    sg_layers = _first(vc, "num_hidden_layers", "vt_num_hidden_layers") or 24
    sg_hidden = _first(vc, "hidden_size", "vt_hidden_size") or 1024
    return VisionSpec(num_layers=int(layers), hidden_size=int(hidden), intermediate_size=int(inter),
                      sglang_num_layers=int(sg_layers), sglang_hidden_size=int(sg_hidden))


def _deepseek_v4(text: Mapping[str, Any], model_type: str, n: int) -> DeepseekV4Spec | None:
    """DeepSeek-V4 fields: the legacy per-layer ``compress_ratios`` (MTP entries after the
    decoder layers), or the upstream ``layer_types`` + ``compress_rates`` form, as
    ``get_compress_ratios`` reads them (vllm/transformers_utils/deepseek_v4_utils.py @ v0.33.0)."""
    if model_type != "deepseek_v4":
        return None
    ratios = text.get("compress_ratios")
    if ratios is None and isinstance(text.get("compress_rates"), Mapping) and isinstance(text.get("layer_types"), list):
        rates = text["compress_rates"]
        ratios = [int(check_value("compress_rates", rates.get(t, 0) or 0, Rule("int", 0, 1 << 20), ConfigError,
                                  "config.json: ")) for t in text["layer_types"]]
    if not isinstance(ratios, list) or len(ratios) < n:
        raise ConfigError(f"deepseek_v4 config needs compress_ratios with one entry per layer ({n})",
                          field="compress_ratios", fix="pass the checkpoint's own config.json")
    ratios = [int(r) for r in ratios[:n]]
    bad = sorted({r for r in ratios if r not in (0, 1, 4, 128)})
    if bad:
        raise ConfigError(f"compress_ratios {bad} are not modelled (0/1 = sliding window only, 4, 128)",
                          field="compress_ratios", fix="DeepSeek-V4 uses 0, 4 and 128")
    return DeepseekV4Spec(
        compress_ratios=tuple(0 if r <= 1 else r for r in ratios),
        sliding_window=int(_int(text, "sliding_window")),
        head_dim=int(_int(text, "head_dim")),
        qk_rope_head_dim=int(_int(text, "qk_rope_head_dim")),
        q_lora_rank=int(_int(text, "q_lora_rank")),
        o_groups=int(_int(text, "o_groups")),
        o_lora_rank=int(_int(text, "o_lora_rank")),
        index_head_dim=int(_int(text, "index_head_dim")),
        index_n_heads=int(_int(text, "index_n_heads")),
        index_topk=int(_int(text, "index_topk")),
        hc_mult=int(_int(text, "hc_mult", required=False, default=1)),
        num_hash_layers=int(_int(text, "num_hash_layers", required=False, default=0)),
        expert_dtype=str(text.get("expert_dtype") or "fp8"),
        n_mtp_layers=_int(text, "n_mtp_layers", required=False),
    )


# ---------------------------------------------------------------------------------------------
# Normalisation steps. Each reads the (text) config and returns plain values or a small frozen
# record whose field names are ModelSpec's; a step that has to assume a value returns the note too.


@dataclass(frozen=True)
class _Attention:
    """Attention shape: head counts, head dims and, for MLA, the latent ranks."""

    num_attention_heads: int
    num_key_value_heads: int  # 1 for MLA (one latent "head")
    head_dim: int
    v_head_dim: int
    attention: str  # "mha" | "mla"
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    q_lora_rank: int | None = None


@dataclass(frozen=True)
class _AttentionLayers:
    """Per-layer attention kinds, the sliding window and the DeepSeek-V4 geometry that overrides both."""

    layer_types: tuple[str, ...]
    sliding_window: int | None
    dsv4: DeepseekV4Spec | None


@dataclass(frozen=True)
class _DsaIndexer:
    """The DSA indexer of every layer (DeepSeek V3.2, GLM-5); None when absent."""

    index_head_dim: int | None = None
    index_n_heads: int | None = None
    index_topk: int | None = None


def _fields(record: Any) -> dict[str, Any]:
    """A step record's fields by name (shallow: nested specs stay records)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _json_object(config: Any) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise ConfigError("config.json is not a JSON object", field="config.json",
                          fix="pass a Hugging Face config.json")
    return config


def _model_type(config: Mapping[str, Any], text: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if not model_type:
        raise ConfigError("config.json has no 'model_type'", field="model_type",
                          fix="pass a Hugging Face config.json (it names its model_type)")
    if model_type in KNOWN_MODEL_TYPES:
        return model_type, ()
    return model_type, (f"unknown model_type {model_type!r}: read as a generic decoder "
                        "(hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim)",)


def _sizes(text: Mapping[str, Any]) -> tuple[int, int, int]:
    """hidden_size, num_hidden_layers, num_attention_heads: required and > 0."""
    hidden = _int(text, "hidden_size")
    layers = _int(text, "num_hidden_layers")
    heads = _int(text, "num_attention_heads")
    if hidden == 0 or layers == 0 or heads == 0:
        raise ConfigError("hidden_size, num_hidden_layers and num_attention_heads must be > 0",
                          field="num_attention_heads" if heads == 0 else "hidden_size",
                          fix="fix config.json")
    return hidden, layers, heads


def _kv_heads(text: Mapping[str, Any], heads: int) -> tuple[int, tuple[str, ...]]:
    kv_heads = _int(text, "num_key_value_heads", required=False)
    notes: tuple[str, ...] = ()
    if kv_heads is None:
        kv_heads = heads  # HF default: MHA
        notes = ("num_key_value_heads missing: assumed = num_attention_heads (MHA)",)
    if kv_heads == 0 or heads % kv_heads:
        raise ConfigError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}",
                          field="num_key_value_heads", fix="fix config.json")
    return kv_heads, notes


def _explicit_head_dim(text: Mapping[str, Any]) -> Any:
    return text.get("head_dim") or text.get("attention_head_dim")


def _attention_shape(text: Mapping[str, Any], model_type: str, hidden: int, heads: int,
                     kv_heads: int) -> _Attention:
    """MHA/GQA (explicit ``head_dim`` or hidden / heads) or MLA (qk_nope + qk_rope, latent ranks)."""
    is_mla = text.get("kv_lora_rank") is not None and model_type in MLA_MODEL_TYPES | {model_type} and (
        text.get("qk_rope_head_dim") is not None)
    if not is_mla:
        explicit = _explicit_head_dim(text)
        head_dim = int(explicit) if explicit else hidden // heads
        return _Attention(num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                          v_head_dim=head_dim, attention="mha")
    rope = _int(text, "qk_rope_head_dim")
    nope = _int(text, "qk_nope_head_dim")
    # MiniCPM3's config has no v_head_dim: both engines build ``v_head_dim = hidden_size //
    # num_attention_heads`` (sglang models/minicpm3.py @ 0.5.23, vllm models/minicpm3.py @ 0.33.0)
    v_head_dim = hidden // heads if model_type == "minicpm3" else _int(text, "v_head_dim")
    return _Attention(
        num_attention_heads=heads,
        num_key_value_heads=1,
        head_dim=nope + rope,
        v_head_dim=v_head_dim,
        attention="mla",
        kv_lora_rank=int(text["kv_lora_rank"]),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        q_lora_rank=int(text["q_lora_rank"]) if text.get("q_lora_rank") else None,
    )


def _attention_layers(text: Mapping[str, Any], model_type: str, n: int) -> _AttentionLayers:
    layer_types, window = _layer_types(text, model_type, n)
    dsv4 = _deepseek_v4(text, model_type, n)
    if dsv4 is not None:  # every layer keeps the SWA ring; compressed layers add latent rows
        layer_types = tuple(SLIDING if r == 0 else FULL for r in dsv4.compress_ratios)
        window = dsv4.sliding_window
    return _AttentionLayers(layer_types=layer_types, sliding_window=window, dsv4=dsv4)


def _dsa_indexer(text: Mapping[str, Any], dsv4: DeepseekV4Spec | None) -> _DsaIndexer:
    if dsv4 is not None:  # DeepSeek-V4's C4-only indexer lives in ``dsv4``
        return _DsaIndexer()
    return _DsaIndexer(
        index_head_dim=int(text["index_head_dim"]) if text.get("index_head_dim") else None,
        index_n_heads=int(text["index_n_heads"]) if text.get("index_n_heads") else None,
        index_topk=int(text["index_topk"]) if text.get("index_topk") else None,
    )


def _intermediate_size(text: Mapping[str, Any], model_type: str, hidden: int, moe: MoESpec | None,
                       dsv4: DeepseekV4Spec | None) -> tuple[int, tuple[str, ...]]:
    """The dense MLP width."""
    intermediate = _int(text, "intermediate_size", required=False)
    notes: tuple[str, ...] = ()
    if intermediate is None and dsv4 is not None and moe is not None:
        intermediate = moe.moe_intermediate_size  # DeepSeek-V4: every layer is MoE (no dense MLP)
    if intermediate is None:
        intermediate = _first(text, "intermediate_size_mlp", "ffn_hidden_size") or 4 * hidden
        notes = (f"intermediate_size missing: assumed {intermediate}",)
    if model_type == "llama4_text" and text.get("intermediate_size_mlp"):
        intermediate = int(text["intermediate_size_mlp"])  # dense layers of Llama 4 use the _mlp width
    return int(intermediate), notes


def _vocab_size(config: Mapping[str, Any], text: Mapping[str, Any]) -> int:
    vocab = _int(text, "vocab_size", required=False) or _int(config, "vocab_size", required=False)
    if not vocab:
        raise ConfigError("config.json has no 'vocab_size'", field="vocab_size", fix="add vocab_size")
    return int(vocab)


def _max_position_embeddings(config: Mapping[str, Any], text: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    max_pos = _first(text, "max_position_embeddings", "max_sequence_length", "seq_length") or \
        _first(config, "max_position_embeddings")
    if not max_pos:
        return 4096, ("max_position_embeddings missing: assumed 4096",)
    return int(max_pos), ()


def _mtp_layers(text: Mapping[str, Any]) -> int:
    # MiniMax-M2's num_mtp_modules are not in the released checkpoint (HF count 228.7B without them).
    return int(text.get("num_nextn_predict_layers") or 0)


def _tie_word_embeddings(config: Mapping[str, Any], text: Mapping[str, Any], model_type: str) -> bool:
    # transformers' default tie_word_embeddings is True; Gemma configs rely on it.
    tie_default = model_type.startswith("gemma")
    return bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", tie_default)))


def _length_config(text: Mapping[str, Any], model_type: str) -> tuple[tuple[str, Any], ...]:
    return tuple((k, text[k]) for k in LENGTH_CONFIG_KEYS if text.get(k) is not None) + (
        ("model_type", model_type),)


# Attention layouts kvscope does not model yet; a generic read would size every layer like the first kind
# (field that marks the layout, what the engines do with it). Refused with one line, never a wrong number.
UNMODELLED_ATTENTION = {
    "gemma4": ("global_head_dim", "full-attention layers with their own head_dim and KV heads "
                                  "(num_global_key_value_heads, attention_k_eq_v): vllm models/gemma4.py @ 0.33.0"),
    "gemma4_text": ("global_head_dim", "full-attention layers with their own head_dim and KV heads "
                                       "(num_global_key_value_heads, attention_k_eq_v): vllm models/gemma4.py @ 0.33.0"),
    "mimo_v2_flash": ("swa_num_key_value_heads", "sliding-window layers with their own KV heads and v_head_dim != "
                                                 "head_dim, attention sinks: sglang models/mimo_v2.py @ 0.5.23"),
    "minimax_m3": ("sparse_attention_config", "sparse attention with an indexer cache: sglang models/minimax_m3.py "
                                              "@ 0.5.23"),
}


def _refuse_unmodelled_attention(text: Mapping[str, Any], model_type: str) -> None:
    field_, what = UNMODELLED_ATTENTION.get(model_type, (None, ""))
    if field_ is not None and text.get(field_) is not None:
        raise ConfigError(f"{model_type}: {field_} is set; kvscope does not model this attention yet ({what})",
                          field=field_, fix="plan a model `kvscope models` lists, or measure the start "
                                            "(kvscope doctor on its log)")


def spec_from_hf_config(config: Mapping[str, Any], name: str | None = None,
                        hf_quant_config: Mapping[str, Any] | None = None) -> ModelSpec:
    """The normalisation steps in order (the order decides which error a broken config reports)."""
    text = _text_config(_json_object(config))
    check_config(config, text)  # every field's type and range (validate.CONFIG_RULES), before any arithmetic
    model_type, type_notes = _model_type(config, text)
    _refuse_unmodelled_attention(text, model_type)
    hidden, layers, heads = _sizes(text)
    kv_heads, kv_notes = _kv_heads(text, heads)
    attention = _attention_shape(text, model_type, hidden, heads, kv_heads)
    stack = _attention_layers(text, model_type, layers)
    moe = _moe(text)
    if SLIDING in stack.layer_types and not stack.sliding_window:  # the engines size those layers by the window
        raise ConfigError("sliding_attention layers but no sliding_window", field="sliding_window",
                          fix="give the window in tokens (sliding_window)")
    if stack.dsv4 is not None and moe is None:  # every DeepSeek-V4 layer is MoE (weights.py reads the experts)
        raise ConfigError("deepseek_v4 config has no routed experts ('n_routed_experts')", field="n_routed_experts",
                          fix="pass the checkpoint's own config.json")
    check_config_consistency(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=attention.head_dim,
                             explicit_head_dim=attention.attention == "mla" or bool(_explicit_head_dim(text)),
                             experts=moe.num_experts if moe else None, topk=moe.num_experts_per_tok if moe else None)
    ffn_types = _ffn_types(text, moe, stack.layer_types)
    intermediate, mlp_notes = _intermediate_size(text, model_type, hidden, moe, stack.dsv4)
    vocab = _vocab_size(config, text)
    max_pos, pos_notes = _max_position_embeddings(config, text)
    mtp = _mtp_layers(text)
    tie = _tie_word_embeddings(config, text, model_type)
    assumed = type_notes + kv_notes + mlp_notes + pos_notes
    spec = ModelSpec(
        name=name or str(config.get("_name_or_path") or model_type),
        model_type=model_type,
        architectures=tuple(config.get("architectures") or text.get("architectures") or ()),
        hidden_size=hidden,
        num_hidden_layers=layers,
        vocab_size=vocab,
        intermediate_size=intermediate,
        max_position_embeddings=max_pos,
        dtype=_dtype(config, text),
        tie_word_embeddings=tie,
        ffn_types=ffn_types,
        **_fields(attention),
        **_fields(stack),
        **_fields(_dsa_indexer(text, stack.dsv4)),
        moe=moe,
        mamba=_state_spec(text, model_type, stack.layer_types),
        num_nextn_predict_layers=mtp,
        vision=_vision(config),
        quant=quant_from_config(config, text, hf_quant_config),
        assumed=assumed,
        sglang_context_len=sglang_context_length(text, max_pos),
        length_config=_length_config(text, model_type),
        attention_bias=bool(text.get("attention_bias", False)),
    )
    for note in assumed:
        warnings.warn(f"kvscope: {spec.name}: {note}", stacklevel=2)
    return spec
