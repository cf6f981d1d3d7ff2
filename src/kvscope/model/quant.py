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
    method: str = "none"  # none | fp8 | compressed-tensors | awq | gptq | mxfp4 | nvfp4 | modelopt-fp8 | bitsandbytes
    weight_bits: int = 16  # bits per stored weight element of a quantized linear layer
    group_size: int | None = None  # elements per scale (int4 / fp4 group), None for per-channel/block
    block_size: tuple[int, int] | None = None  # fp8 block scales (128, 128)
    scale_bytes: int = 0  # bytes per scale element
    zero_point: bool = False  # AWQ/GPTQ asymmetric: packed zeros per group
    experts_only: bool = False  # only routed-expert weights are quantized (Kimi INT4, GPT-OSS MXFP4)
    ignore: tuple[str, ...] = ()  # module-name patterns kept in the model dtype
    kv_cache_quant_algo: str | None = None  # "FP8" when the checkpoint declares an fp8 KV cache

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
        return QuantSpec(kv_cache_quant_algo=kv)
    q = _cfg_quant(config, text)
    if not q:
        return NONE
    method = str(q.get("quant_method") or "").lower()
    if not method and "weight_block_size" in q:
        method = "fp8"
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
        return QuantSpec(method="compressed-tensors", weight_bits=bits,
                         group_size=int(weights.get("group_size") or 128), scale_bytes=2,
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
