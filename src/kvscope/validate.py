"""The validation layer at the boundary: rules as data (field → type, range or choices), one checker.

Every value that enters kvscope from outside — a ``config.json`` field, an engine flag (the CLI's,
``fit --set``'s, ``kvscope.plan(**flags)``'s), a measured GiB figure — passes one of these tables
before any formula sees it. A failure is a typed error (``ConfigError`` / ``FlagError``) naming the
field, the value and the valid range or choices, rendered by the CLI as one line with exit 2.

Ranges are wide on purpose: they refuse what no engine could load or would accept (a negative head
dimension, 12.5 heads, NaN GiB, a million layers) and never a real checkpoint's value. The caps on
sizes (``MAX_LAYERS``, ``MAX_HIDDEN``) also bound the work: every per-layer loop of the planners is
O(layers), so an absurd config is refused at once instead of running unbounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .errors import ConfigError, FlagError, KvscopeError

__all__ = ["Rule", "CONFIG_RULES", "VISION_RULES", "SGLANG_FLAG_RULES", "VLLM_FLAG_RULES", "MEASURED_GIB_RULE",
           "MAX_LAYERS", "MAX_HIDDEN", "SGLANG_ATTENTION_BACKENDS", "check_config", "check_config_consistency",
           "check_flags", "check_value", "finite_gib"]

MAX_LAYERS = 10_000  # decoder layers (the largest released model has 126)
MAX_HIDDEN = 10_000_000  # hidden size (the largest released model has 16,384)
_BIG = 1 << 40  # token counts, lengths: beyond any context or pool
_DIM = 1 << 20  # any per-head / latent / state dimension
_COUNT = 1 << 20  # head, expert and group counts
_MAX_GIB = float(1 << 20)  # 1 PiB: beyond any GPU memory


@dataclass(frozen=True)
class Rule:
    """One field: its kind ("int", "number", "bool", "str", "list", "mapping") and, for numbers, the
    closed range [lo, hi] (``lo_open``: lo itself refused), or the allowed ``choices`` of a string."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[Any, ...] = ()
    also: tuple[Any, ...] = ()  # extra allowed values outside the range (e.g. -1 = "auto")
    items: str | None = None  # the kind of each list item

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind in ("int", "number"):
            lo = "" if self.lo is None else (f"> {_num(self.lo)}" if self.lo_open else f">= {_num(self.lo)}")
            hi = "" if self.hi is None else (f"< {_num(self.hi)}" if self.hi_open else f"<= {_num(self.hi)}")
            rng = " and ".join(x for x in (lo, hi) if x)
            extra = f" (or {', '.join(str(a) for a in self.also)})" if self.also else ""
            what = "an integer" if self.kind == "int" else "a finite number"
            return f"{what}{' ' + rng if rng else ''}{extra}"
        return {"bool": "true or false", "str": "a string", "list": "a list", "mapping": "an object"}[self.kind]


def _num(x: float) -> str:
    """A range bound as people write it: 1, 10000, 0.5, 2^40."""
    if x == int(x):
        n = int(abs(x))
        if n >= 1 << 20 and n & (n - 1) == 0:
            return f"{'-' if x < 0 else ''}2^{n.bit_length() - 1}"
        return str(int(x))
    return f"{x:g}"


def _int(lo: float | None = 0, hi: float | None = _DIM, **kw: Any) -> Rule:
    return Rule("int", lo, hi, **kw)


# ---------------------------------------------------------------------------------------------
# config.json (the text config: ``text_config`` of a multimodal wrapper, else the top level).
# Only the fields model/spec.py reads; a field absent or null is left to spec.py (required or default).

_LENGTH = _int(0, _BIG)
CONFIG_RULES: dict[str, Rule] = {
    "hidden_size": _int(1, MAX_HIDDEN),
    "num_hidden_layers": _int(1, MAX_LAYERS),
    "num_attention_heads": _int(1, _COUNT),
    "num_key_value_heads": _int(1, _COUNT),
    "head_dim": _int(1, _DIM),
    "attention_head_dim": _int(1, _DIM),
    "vocab_size": _int(1, 1 << 31),
    "intermediate_size": _int(0, 1 << 31),
    "intermediate_size_mlp": _int(0, 1 << 31),
    "ffn_hidden_size": _int(0, 1 << 31),
    "max_position_embeddings": _int(1, _BIG),
    "max_sequence_length": _LENGTH, "seq_length": _LENGTH, "max_seq_len": _LENGTH, "model_max_length": _LENGTH,
    "n_positions": _LENGTH, "max_target_positions": _LENGTH, "max_seq_length": _LENGTH, "seq_len": _LENGTH,
    "original_max_position_embeddings": _LENGTH,
    "sliding_window": _int(0, _BIG),
    "attention_chunk_size": _int(1, _BIG),
    "sliding_window_pattern": _int(1, MAX_LAYERS),
    "full_attention_interval": _int(1, MAX_LAYERS),
    "layer_types": Rule("list", items="str"),
    "hybrid_override_pattern": Rule("str"),
    "no_rope_layers": Rule("list", items="int"),
    "mlp_only_layers": Rule("list", items="int"),
    "compress_ratios": Rule("list", items="int"),
    "compress_rates": Rule("mapping"),
    # MoE
    "n_routed_experts": _int(0, _COUNT), "num_local_experts": _int(0, _COUNT), "num_experts": _int(0, _COUNT),
    "moe_num_experts": _int(0, _COUNT),
    "num_experts_per_tok": _int(0, _COUNT), "experts_per_token": _int(0, _COUNT), "moe_topk": _int(0, _COUNT),
    "moe_k": _int(0, _COUNT),
    "moe_intermediate_size": _int(0, 1 << 31), "expert_intermediate_size": _int(0, 1 << 31),
    "shared_expert_intermediate_size": _int(0, 1 << 31), "n_shared_experts": _int(0, _COUNT),
    "first_k_dense_replace": _int(0, MAX_LAYERS),
    "interleave_moe_layer_step": _int(0, MAX_LAYERS), "decoder_sparse_step": _int(0, MAX_LAYERS),
    # moe_layer_freq: an integer step or a per-layer 0/1 list, checked in model/spec.py (_ffn_types)
    # MLA / DSA indexer
    "kv_lora_rank": _int(1, _DIM), "q_lora_rank": _int(0, _DIM), "qk_rope_head_dim": _int(0, _DIM),
    "qk_nope_head_dim": _int(0, _DIM), "v_head_dim": _int(0, _DIM),
    "index_head_dim": _int(0, _DIM), "index_n_heads": _int(0, _COUNT), "index_topk": _int(0, _BIG),
    "num_nextn_predict_layers": _int(0, MAX_LAYERS),
    # linear attention / mamba state
    "linear_num_key_heads": _int(1, _COUNT), "linear_num_value_heads": _int(0, _COUNT),
    "linear_key_head_dim": _int(1, _DIM), "linear_value_head_dim": _int(1, _DIM),
    "linear_conv_kernel_dim": _int(1, 1 << 10),
    "mamba_num_heads": _int(0, _COUNT), "mamba_n_heads": _int(0, _COUNT), "mamba_head_dim": _int(1, _DIM),
    "mamba_d_head": _int(1, _DIM), "ssm_state_size": _int(1, _DIM), "mamba_d_state": _int(1, _DIM),
    "n_groups": _int(0, _COUNT), "mamba_n_groups": _int(0, _COUNT), "conv_kernel": _int(0, 1 << 10),
    "mamba_d_conv": _int(0, 1 << 10),
    # DeepSeek-V4
    "o_groups": _int(1, _COUNT), "o_lora_rank": _int(1, _DIM), "hc_mult": _int(1, 1 << 10),
    "num_hash_layers": _int(0, MAX_LAYERS), "n_mtp_layers": _int(0, MAX_LAYERS),
    # names and flags
    "model_type": Rule("str"),
    "architectures": Rule("list", items="str"),
    "torch_dtype": Rule("str"), "dtype": Rule("str"),
    "tie_word_embeddings": Rule("bool"),
    "attention_bias": Rule("bool"),
    "rope_scaling": Rule("mapping"),
    "rope_parameters": Rule("mapping"),
    "rope_theta": Rule("number", 0, None, lo_open=True),
    "partial_rotary_factor": Rule("number", 0, 1),
    "vision_config": Rule("mapping"),
    "text_config": Rule("mapping"),
    "quantization_config": Rule("mapping"),
}
# The rope-scaling dict's numbers (SGLang's context length multiplies by ``factor``).
ROPE_RULES: dict[str, Rule] = {
    "factor": Rule("number", 0, 1 << 20, lo_open=True),
    "original_max_position_embeddings": _LENGTH,
}
VISION_RULES: dict[str, Rule] = {
    k: _int(0, hi) for k, hi in (("num_hidden_layers", MAX_LAYERS), ("vt_num_hidden_layers", MAX_LAYERS),
                                 ("depth", MAX_LAYERS), ("num_layers", MAX_LAYERS), ("hidden_size", MAX_HIDDEN),
                                 ("vt_hidden_size", MAX_HIDDEN), ("embed_dim", MAX_HIDDEN), ("width", MAX_HIDDEN),
                                 ("intermediate_size", 1 << 31), ("vt_intermediate_size", 1 << 31),
                                 ("mlp_dim", 1 << 31))
}
# Keys the reader takes from the top level of a wrapper config as well as from the text config.
_TOP_LEVEL_KEYS = ("model_type", "architectures", "torch_dtype", "dtype", "vocab_size", "tie_word_embeddings",
                   "max_position_embeddings", "vision_config", "quantization_config")


def _kind_ok(rule: Rule, v: Any) -> bool:
    if rule.kind == "bool":
        return isinstance(v, bool)
    if rule.kind in ("int", "number"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return rule.kind == "number" or v == int(v)
    if rule.kind == "str":
        return isinstance(v, str)
    if rule.kind == "list":
        return isinstance(v, list)
    return isinstance(v, Mapping)


def _in_range(rule: Rule, v: Any) -> bool:
    if v in rule.also:
        return True
    if rule.choices:
        return v in rule.choices
    if rule.kind not in ("int", "number"):
        return True
    if rule.lo is not None and (v < rule.lo or (rule.lo_open and v == rule.lo)):
        return False
    return rule.hi is None or (v < rule.hi if rule.hi_open else v <= rule.hi)


def check_value(name: str, value: Any, rule: Rule, error: type[KvscopeError], where: str = "") -> Any:
    """``value`` if it obeys ``rule``; else ``error`` naming the field, the value and the valid range."""
    if (not _kind_ok(rule, value) and value not in rule.also) or not _in_range(rule, value):
        raise error(f"{where}{name}: expected {rule.describe()}, got {_show(value)}", field=name)
    if rule.kind == "list" and rule.items:
        item = Rule(rule.items, None, None) if rule.items != "int" else _int(-_BIG, _BIG)
        for i, x in enumerate(value):
            if not _kind_ok(item, x):
                raise error(f"{where}{name}[{i}]: expected {item.describe()}, got {_show(x)}", field=name)
    return value


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_table(cfg: Mapping[str, Any], rules: Mapping[str, Rule], where: str) -> None:
    for key, rule in rules.items():
        v = cfg.get(key)
        if v is not None:
            check_value(key, v, rule, ConfigError, where)


def check_config(config: Any, text: Mapping[str, Any]) -> None:
    """Every field model/spec.py reads, type- and range-checked (absent / null fields are not checked
    here: spec.py requires them or applies the documented default)."""
    if isinstance(config, Mapping) and config is not text:
        _check_table(config, {k: CONFIG_RULES[k] for k in _TOP_LEVEL_KEYS}, "config.json: ")
    _check_table(text, CONFIG_RULES, "config.json: ")
    for holder in (text, config):
        if not isinstance(holder, Mapping):
            continue
        for key in ("rope_scaling", "rope_parameters"):
            if isinstance(holder.get(key), Mapping):
                _check_table(holder[key], ROPE_RULES, f"config.json: {key}.")
        if isinstance(holder.get("vision_config"), Mapping):
            _check_table(holder["vision_config"], VISION_RULES, "config.json: vision_config.")


def check_config_consistency(*, hidden: int, heads: int, kv_heads: int, head_dim: int, explicit_head_dim: bool,
                             experts: int | None = None, topk: int | None = None) -> None:
    """Rules across fields: a head dimension of at least 1 (hidden_size // num_attention_heads when
    the config gives none), KV heads dividing the query heads, heads × head_dim within 64 × hidden
    (the released models reach 8), no more routed experts per token than experts."""
    if head_dim < 1 and explicit_head_dim:
        raise ConfigError(f"head_dim is {head_dim} (MLA: qk_nope_head_dim + qk_rope_head_dim)", field="head_dim",
                          fix="a head dimension of at least 1")
    if head_dim < 1:
        raise ConfigError(f"hidden_size={hidden} is smaller than num_attention_heads={heads}: the derived "
                          f"head_dim hidden_size // num_attention_heads is {head_dim}", field="hidden_size",
                          fix="hidden_size must be >= num_attention_heads (or give head_dim)")
    if heads % kv_heads:
        raise ConfigError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}",
                          field="num_key_value_heads", fix="num_key_value_heads must divide num_attention_heads")
    if explicit_head_dim and heads * head_dim > 64 * hidden:
        raise ConfigError(f"num_attention_heads x head_dim = {heads} x {head_dim} = {heads * head_dim} is more than "
                          f"64 x hidden_size ({64 * hidden})", field="head_dim",
                          fix="check head_dim and num_attention_heads (released models stay within 8 x hidden_size)")
    if experts is not None and topk is not None and topk > experts:
        raise ConfigError(f"num_experts_per_tok={topk} is more than the {experts} routed experts",
                          field="num_experts_per_tok", fix="num_experts_per_tok must be <= the number of experts")


# ---------------------------------------------------------------------------------------------
# Engine flags (field names of SGLangArgs / VllmFlags). None = the engine's default, not checked.

# ``--attention-backend`` choices, union over the modelled releases: server_args.py @ v0.4.6.post5,
# v0.4.8.post1, v0.4.10.post2, v0.5.3, v0.5.9, v0.5.13 (ATTENTION_BACKEND_CHOICES) and
# srt/arg_groups/choices.py @ v0.5.23. SGLang's argparse refuses any other name.
SGLANG_ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "cutlass_mla", "fa3",
    "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "dual_chunk_flash_attn", "aiter", "wave",
    "intel_amx", "ascend", "intel_xpu",
)
_PARALLEL = _int(1, 1 << 16)
_TOKENS = _int(1, _BIG)
_FLAG = Rule("bool")
SGLANG_FLAG_RULES: dict[str, Rule] = {
    "tp_size": _PARALLEL, "pp_size": _PARALLEL, "dp_size": _PARALLEL, "ep_size": _PARALLEL,
    "enable_dp_attention": _FLAG,
    "mem_fraction_static": Rule("number", 0, 1, lo_open=True, hi_open=True),  # (0, 1), as plan.validate() says
    "context_length": _TOKENS, "kv_cache_dtype": Rule("str"), "page_size": _int(1, 1 << 20),
    "attention_backend": Rule("str", choices=SGLANG_ATTENTION_BACKENDS),
    "max_running_requests": _TOKENS, "max_total_tokens": _TOKENS,
    "chunked_prefill_size": _int(1, 1 << 31, also=(-1,)),  # -1 disables chunked prefill
    "max_prefill_tokens": _TOKENS, "cuda_graph_max_bs": _int(1, 1 << 20),
    "disable_cuda_graph": _FLAG, "disable_piecewise_cuda_graph": _FLAG, "enable_piecewise_cuda_graph": _FLAG,
    "speculative_algorithm": Rule("str"), "speculative_draft_model_path": Rule("str"),
    "speculative_num_steps": _int(1, 1 << 10), "speculative_eagle_topk": _int(1, 1 << 10),
    "speculative_num_draft_tokens": _int(1, 1 << 12), "moe_a2a_backend": Rule("str"),
    "disable_radix_cache": _FLAG, "language_only": _FLAG,
}
VLLM_FLAG_RULES: dict[str, Rule] = {
    "tensor_parallel_size": _PARALLEL, "pipeline_parallel_size": _PARALLEL, "data_parallel_size": _PARALLEL,
    "enable_expert_parallel": _FLAG,
    "gpu_memory_utilization": Rule("number", 0, 1, lo_open=True),
    "max_model_len": _int(1, _BIG, also=(-1,)),  # -1 = auto-fit
    "max_num_seqs": _TOKENS, "max_num_batched_tokens": _TOKENS, "kv_cache_dtype": Rule("str"),
    "block_size": _int(1, 1 << 20), "enforce_eager": _FLAG, "kv_cache_memory_bytes": _int(1, 1 << 60),
    "num_gpu_blocks_override": _TOKENS, "num_speculative_tokens": _int(0, 1 << 12),
    "speculative_method": Rule("str"), "enable_prefix_caching": _FLAG, "enable_chunked_prefill": _FLAG,
    "allow_long_max_model_len": _FLAG, "api_server": _FLAG, "performance_mode": Rule("str"),
    "attention_backend": Rule("str"),
}
MEASURED_GIB_RULE = Rule("number", 0, _MAX_GIB, lo_open=True)


def _flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def check_flags(engine: str, values: Mapping[str, Any], *, names: Callable[[str], str] = _flag_name,
                types_only: bool = False) -> None:
    """Each given flag (None = engine default) against the engine's table; unknown names are left to
    the engine's own dataclass (which names them). ``types_only``: the kind, not the range (so that
    the engine's own range checks, with the engine's text, can run first without a TypeError)."""
    rules = SGLANG_FLAG_RULES if engine == "sglang" else VLLM_FLAG_RULES
    for key, v in values.items():
        rule = rules.get(key)
        if rule is not None and v is not None:
            if rule.kind == "int" and isinstance(v, float):  # a flag reaches the engine's int arithmetic as is
                raise FlagError(f"{names(key)}: expected {rule.describe()}, got {_show(v)}", field=names(key))
            if types_only:
                rule = Rule(rule.kind, also=rule.also, items=rule.items)
            check_value(names(key), v, rule, FlagError)


# ---------------------------------------------------------------------------------------------
# Probe records (one JSON object per line of a ``kvscope probe --out`` file). A record whose fields
# do not have these kinds is a damaged line: the reader counts it and skips it.

_ID = _int(-1, 1 << 62)
PROBE_RECORD_RULES: dict[str, Rule] = {
    "event": Rule("str"), "pid": _ID, "seq": _ID, "call_id": _ID, "target": Rule("str"), "phase": Rule("str"),
    "phase_own": Rule("bool"), "engine": Rule("str"), "engine_version": Rule("str"), "exc": Rule("str"),
    "exc_type": Rule("str"), "reason": Rule("str"), "rank": Rule("mapping"), "inputs": Rule("mapping"),
    "outputs": Rule("mapping"), "locals": Rule("mapping"), "mem": Rule("mapping"),
}
PROBE_RANK_RULES: dict[str, Rule] = {k: _int(0, 1 << 20) for k in (
    "rank", "RANK", "tp_rank", "tp_size", "pp_rank", "pp_size", "dp_rank", "dp_size", "ep_rank", "ep_size",
    "local_rank", "LOCAL_RANK", "world_size", "WORLD_SIZE")}
PROBE_MEM_RULES: dict[str, Rule] = {k: _int(0, 1 << 60) for k in ("free_bytes", "total_bytes", "allocated_bytes",
                                                                    "reserved_bytes", "peak_bytes")}


def probe_record_ok(rec: Any) -> bool:
    """Whether a probe record has the kinds the readers rely on (validate.PROBE_*_RULES)."""
    if not isinstance(rec, Mapping) or ("seq" in rec and rec["seq"] is None):  # readers order records by seq
        return False
    try:
        _check_table(rec, PROBE_RECORD_RULES, "")
        if isinstance(rec.get("rank"), Mapping):
            _check_table(rec["rank"], PROBE_RANK_RULES, "")
        if isinstance(rec.get("mem"), Mapping):
            _check_table(rec["mem"], PROBE_MEM_RULES, "")
    except ConfigError:
        return False
    return True


def finite_gib(name: str, values: Iterable[Any]) -> None:
    """Measured GiB figures: finite, > 0 and at most 1 PiB."""
    for v in values:
        check_value(name, v, MEASURED_GIB_RULE, FlagError)
