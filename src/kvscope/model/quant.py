"""Quantization of a checkpoint, read from ``quantization_config`` / ``hf_quant_config.json``.

Only what memory needs: bits per weight, group/block scale layout, which modules stay in the
model dtype, and whether the checkpoint declares an FP8 KV cache (SGLang ``--kv-cache-dtype auto``
then uses float8_e4m3fn: ``mem_cache/kv_cache_dtype.py::configure_kv_cache_dtype @ v0.5.23``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError


@dataclass(frozen=True)
class QuantSpec:
    """A checkpoint's quantization: method, bits per weight, group size and scales."""

    method: str = "none"  # none | fp8 | compressed-tensors | awq | gptq | mxfp4 | nvfp4 | modelopt-fp8 | bitsandbytes
    weight_bits: int = 16  # bits per stored weight element of a quantized linear layer
    group_size: int | None = None  # elements per scale (int4 / fp4 group), None for per-channel/block
    block_size: tuple[int, int] | None = None  # fp8 block scales (128, 128)
    scale_bytes: int = 0  # bytes per scale element
    zero_point: bool = False  # AWQ/GPTQ asymmetric: packed zeros per group
    experts_only: bool = False  # only routed-expert weights are quantized (Kimi INT4, GPT-OSS MXFP4)
    ignore: tuple[str, ...] = ()  # module-name patterns kept in the model dtype
    kv_cache_quant_algo: str | None = None  # "FP8" when the checkpoint declares an fp8 KV cache
    per_tensor: bool = False  # 8-bit weights with one float32 scale per linear (vLLM online fp8)
    online: str | None = None  # the --quantization flag that quantizes a bf16 checkpoint while loading

    @property
    def is_quantized(self) -> bool:
        return self.method != "none"

    def bytes_per_weight_x64(self) -> int:
        """Bytes per 64 weights of a quantized linear (x64 keeps it an integer for 4-bit groups)."""
        data = self.weight_bits * 64 // 8
        if self.group_size:
            per_group = self.scale_bytes + (1 if self.zero_point else 0) * self.weight_bits / 8
            data += int(round(64 * per_group / self.group_size))
        return data


NONE = QuantSpec()


def _cfg_quant(config: Mapping[str, Any], text: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for src in (text, config):
        q = src.get("quantization_config")
        if isinstance(q, Mapping):
            return q
    return None


def quant_from_config(config: Mapping[str, Any], text: Mapping[str, Any],
                      hf_quant_config: Mapping[str, Any] | None = None) -> QuantSpec:
    if hf_quant_config is None and isinstance(config.get("_hf_quant_config"), Mapping):
        hf_quant_config = config["_hf_quant_config"]
    if hf_quant_config:  # NVIDIA ModelOpt checkpoints
        q = hf_quant_config.get("quantization", hf_quant_config)
        algo = str(q.get("quant_algo") or "").upper()
        kv = q.get("kv_cache_quant_algo")
        if algo == "FP8":
            return QuantSpec(method="modelopt-fp8", weight_bits=8, scale_bytes=4,
                             ignore=tuple(q.get("exclude_modules") or ()), kv_cache_quant_algo=kv)
        if algo in ("NVFP4", "FP4"):
            return QuantSpec(method="nvfp4", weight_bits=4, group_size=16, scale_bytes=1,
                             ignore=tuple(q.get("exclude_modules") or ()), kv_cache_quant_algo=kv)
        if algo not in ("", "NONE"):  # MIXED_PRECISION, W4A8_AWQ, ...: per-layer formats not modelled
            raise ConfigError(f"ModelOpt quant_algo {algo!r} is not modelled (only FP8 and NVFP4)",
                              field="quant_algo", fix="kvscope would count these weights wrongly; use an FP8 or "
                                                      "NVFP4 checkpoint, or plan with measured weights")
        return QuantSpec(kv_cache_quant_algo=kv)
    q = _cfg_quant(config, text)
    if not q:
        return NONE
    method = str(q.get("quant_method") or "").lower()
    if not method and "weight_block_size" in q:
        method = "fp8"
    if method in ("", "modelopt", "modelopt_fp4") and q.get("quant_algo"):
        # ModelOpt's own form inside config.json (quant_algo + ignore/exclude_modules), read as
        # hf_quant_config.json is (vLLM model_executor/layers/quantization/modelopt.py @ v0.33.0)
        scheme = q.get("kv_cache_scheme")
        kv = q.get("kv_cache_quant_algo") or (scheme if isinstance(scheme, str) else "FP8" if isinstance(
            scheme, Mapping) and int(scheme.get("num_bits") or 0) == 8 and scheme.get("type") == "float" else None)
        excl = tuple(q.get("exclude_modules") or q.get("ignore") or ())
        return quant_from_config({}, {}, {"quantization": {"quant_algo": q["quant_algo"], "kv_cache_quant_algo": kv,
                                                           "exclude_modules": excl}})
    ignore = tuple(q.get("modules_to_not_convert") or q.get("ignore") or ())
    if method == "fp8":
        block = q.get("weight_block_size")
        return QuantSpec(method="fp8", weight_bits=8,
                         block_size=(int(block[0]), int(block[1])) if block else None,
                         scale_bytes=4, ignore=ignore,
                         kv_cache_quant_algo="FP8" if q.get("kv_cache_quant_method") == "fp8" else None)
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, Mapping) and g.get("weights")), {})
        bits = int(weights.get("num_bits") or 8)
        kind = weights.get("type") or "int"
        kv_scheme = q.get("kv_cache_scheme")
        kv = "FP8" if isinstance(kv_scheme, Mapping) and int(kv_scheme.get("num_bits") or 0) == 8 else None
        experts_only = any("self_attn" in str(p) for p in ignore) and any("mlp" in str(p) for p in ignore)
        if bits >= 8:
            return QuantSpec(method="compressed-tensors", weight_bits=8, scale_bytes=4 if kind == "float" else 2,
                             ignore=ignore, kv_cache_quant_algo=kv)
        # NVFP4 (type float, 4 bits): one float8_e4m3 scale per 16 weights (compressed_tensors_w4a4_nvfp4.py
        # @ vLLM v0.33.0); int4 groups carry bf16/fp16 scales.
        return QuantSpec(method="compressed-tensors", weight_bits=bits,
                         group_size=int(weights.get("group_size") or 128), scale_bytes=1 if kind == "float" else 2,
                         zero_point=not weights.get("symmetric", True),
                         experts_only=experts_only, ignore=ignore, kv_cache_quant_algo=kv)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        return QuantSpec(method=method.split("_")[0], weight_bits=bits,
                         group_size=group if group > 0 else None, scale_bytes=2,
                         zero_point=bool(q.get("zero_point", True)) or method.startswith("gptq"),
                         ignore=ignore)
    if method == "mxfp4":
        # MXFP4: 4-bit e2m1 + one e8m0 scale byte per 32 elements; only MoE experts (GPT-OSS).
        return QuantSpec(method="mxfp4", weight_bits=4, group_size=32, scale_bytes=1, experts_only=True,
                         ignore=ignore)
    if method in ("modelopt", "modelopt_fp4", "nvfp4"):
        return QuantSpec(method="nvfp4", weight_bits=4, group_size=16, scale_bytes=1, ignore=ignore)
    if method == "bitsandbytes":
        bits = 4 if q.get("load_in_4bit") else 8
        return QuantSpec(method="bitsandbytes", weight_bits=bits, group_size=64 if bits == 4 else None,
                         scale_bytes=4 if bits == 4 else 0, ignore=ignore)
    raise ConfigError(f"unsupported quant_method {method!r}", field="quantization_config.quant_method",
                      fix="use one of fp8, compressed-tensors, awq, gptq, mxfp4, nvfp4, bitsandbytes")


# --- the engines' --quantization / --dtype flags ---------------------------------------------------
# Accepted names: sglang/srt/arg_groups/choices.py QUANTIZATION_CHOICES @ v0.5.23;
# vllm/model_executor/layers/quantization/__init__.py QuantizationMethods @ v0.33.0.
ENGINE_QUANTIZATION = {
    "sglang": ("awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
               "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed", "petit_nvfp4", "w8a8_int8",
               "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round", "auto-round-int8", "compressed-tensors",
               "modelslim", "mxfp_w4a8", "quark", "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8",
               "unquant", "humming"),
    "vllm": ("awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
             "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
             "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8",
             "online", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only",
             "nvfp4_per_token", "mxfp8"),
}
# Flag names that select the quantization a checkpoint already carries (QuantSpec.method -> names).
# vLLM resolves awq -> awq_marlin and gptq -> gptq_marlin itself (config/model.py _verify_quantization
# "overrides"); any other name raises "Quantization method specified in the model config (X) does not
# match the quantization method specified in the `quantization` argument (Y)".
CHECKPOINT_FLAG_NAMES = {
    "fp8": ("fp8", "deepseek_v4_fp8"), "compressed-tensors": ("compressed-tensors", "w8a8_fp8", "w8a8_int8"),
    "awq": ("awq", "awq_marlin", "auto_awq", "moe_wna16"), "gptq": ("gptq", "gptq_marlin", "auto_gptq", "moe_wna16"),
    "mxfp4": ("mxfp4", "gpt_oss_mxfp4"), "nvfp4": ("modelopt_fp4", "modelopt", "modelopt_mixed"),
    "modelopt-fp8": ("modelopt", "modelopt_fp8", "modelopt_mixed"), "bitsandbytes": ("bitsandbytes",),
}
# vLLM dropped online quantization from --quantization fp8 (ValueError "The `fp8` quantization method no
# longer supports online quantization. Please use `--quantization fp8_per_tensor`"): present in
# quantization/fp8.py @ v0.33.0, absent @ v0.20.2 (Fp8OnlineLinearMethod); releases in between not checked.
VLLM_FP8_ONLINE_REMOVED = "0.33.0"
DTYPE_FLAGS = {"auto": None, "half": "float16", "float16": "float16", "bfloat16": "bfloat16",
               "float": "float32", "float32": "float32"}  # both engines' --dtype choices


def _online_fp8(flag: str, engine: str, version: str | None) -> QuantSpec | None:
    """What a bf16 checkpoint holds after online fp8 quantization at load: every linear layer (attention,
    MLP, routed and shared experts) in float8_e4m3 with its scales; embeddings, lm_head, norms and MoE
    routers (ReplicatedLinear gates built with quant_config=None) stay in the model dtype.

    SGLang ``--quantization fp8``: Fp8LinearMethod.process_weights_after_loading quantizes per output
    channel (``per_token_group_quant_fp8``, float32 scale per row) on cutlass/marlin GPUs
    (sglang/srt/layers/quantization/fp8.py @ v0.5.23). vLLM: ``fp8`` (< 0.33) and ``fp8_per_tensor`` use
    one float32 scale per weight (``scaled_fp8_quant(weight, scale=None)``, fp8.py Fp8OnlineLinearMethod
    @ v0.20.2; online/fp8.py Fp8PerTensorOnlineLinearMethod @ v0.33.0); ``fp8_per_channel`` one per row;
    ``fp8_per_block`` one per 128 x 128 block (config/quantization.py _ONLINE_SHORTHANDS @ v0.33.0)."""
    from packaging.version import Version

    if engine == "sglang":
        return QuantSpec(method="fp8", weight_bits=8, scale_bytes=4, online=flag) if flag == "fp8" else None
    if flag == "fp8" and version and Version(version) >= Version(VLLM_FP8_ONLINE_REMOVED):
        from ..errors import FlagError

        raise FlagError(f"vLLM {version} refuses --quantization fp8 on an unquantized checkpoint (\"The `fp8` "
                        "quantization method no longer supports online quantization\")", field="--quantization",
                        fix="use --quantization fp8_per_tensor (or fp8_per_channel / fp8_per_block)")
    if flag in ("fp8", "fp8_per_tensor"):
        return QuantSpec(method="fp8", weight_bits=8, scale_bytes=4, per_tensor=True, online=flag)
    if flag == "fp8_per_channel":
        return QuantSpec(method="fp8", weight_bits=8, scale_bytes=4, online=flag)
    if flag == "fp8_per_block":
        return QuantSpec(method="fp8", weight_bits=8, block_size=(128, 128), scale_bytes=4, online=flag)
    return None


def quantization_for_flag(current: QuantSpec, flag: str | None, engine: str, version: str | None = None) -> QuantSpec:
    """The weights' quantization under ``--quantization flag``: the checkpoint's own when the flag names
    it, the online layout for a bf16 checkpoint, otherwise the engine's refusal as a FlagError."""
    from ..errors import FlagError

    if not flag:
        return current
    names = ENGINE_QUANTIZATION.get(engine, ())
    if flag not in names:
        raise FlagError(f"--quantization {flag!r} is not a {engine} method", field="--quantization",
                        fix=f"one of {', '.join(names)}")
    if current.is_quantized:
        if flag in CHECKPOINT_FLAG_NAMES.get(current.method, ()):
            return current
        raise FlagError(f"the checkpoint is quantized with {current.method}; --quantization {flag} does not match it "
                        "(the engine refuses a method that differs from the model config's)", field="--quantization",
                        fix=f"use {CHECKPOINT_FLAG_NAMES.get(current.method, (current.method,))[0]} or drop the flag")
    online = _online_fp8(flag, engine, version)
    if online is not None:
        return online
    raise FlagError(f"--quantization {flag} needs a checkpoint quantized that way; this one is unquantized (the engine "
                    "finds no quantization config for it)", field="--quantization",
                    fix="pass the quantized repo, or an online method: "
                        + ("fp8" if engine == "sglang" else "fp8_per_tensor, fp8_per_channel, fp8_per_block"))


def dtype_for_flag(current: str, flag: str | None) -> str:
    """The model dtype under ``--dtype`` (weights not quantized and, with ``--kv-cache-dtype auto``, the KV
    cache): ``auto`` keeps the config's (vllm/config/model.py _resolve_auto_dtype; SGLang
    model_config.py _get_and_verify_dtype)."""
    from ..errors import FlagError

    if not flag:
        return current
    if flag not in DTYPE_FLAGS:
        raise FlagError(f"unknown --dtype {flag!r}", field="--dtype", fix=f"one of {', '.join(DTYPE_FLAGS)}")
    return DTYPE_FLAGS[flag] or current
