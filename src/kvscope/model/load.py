"""Model reference -> ModelSpec (+ exact weights from safetensors headers when a checkpoint dir is given)."""

from __future__ import annotations

import warnings
from typing import Callable

from ..catalog import ModelSource, load_model_source
from .spec import ModelSpec


def load_spec(ref: str) -> tuple[ModelSpec, ModelSource]:
    src = load_model_source(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # assumptions are carried in spec.assumed and shown in the output
        spec = ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)
    if src.partial:
        spec = spec.__class__(**{**spec.__dict__, "assumed": spec.assumed + (
            "config.partial.json: a trimmed copy of the config; values unverified",)})
    return spec, src


def exact_weights_per_rank_fn(src: ModelSource, spec: ModelSpec) -> Callable[[int], int] | None:
    """For a local checkpoint directory or a hub model: ``tp -> exact weight bytes per TP rank`` from the
    safetensors headers (only the headers are read, once; remotely by HTTP range requests); None for a
    bundled id or a bare config.json."""
    tensors = checkpoint_tensors_of(src)
    if not tensors:
        return None
    from .safetensors import exact_weights_per_rank  # only with a checkpoint (import cost)

    def per_rank(tp: int) -> int:
        return exact_weights_per_rank(tensors, tp, spec.num_key_value_heads)[1]

    return per_rank


def checkpoint_tensors_of(src: ModelSource) -> list | None:
    """The safetensors headers' tensors (``TensorInfo``) of a local checkpoint directory or a hub model
    (read once: only the headers, remotely by HTTP range requests); None for a bundled id or a bare
    config.json. A truncated or inconsistent checkpoint raises CheckpointError."""
    hub_ref = src.meta.get("hub") if isinstance(src.meta, dict) else None
    if src.checkpoint_dir is not None:
        from .safetensors import checkpoint_tensors  # only with a checkpoint (import cost)

        return checkpoint_tensors(src.checkpoint_dir)
    if hub_ref:
        return _hub_tensors(f"{hub_ref['repo']}@{hub_ref['revision']}")
    return None


def _hub_tensors(ref: str):
    from ..catalog import hub
    from ..errors import ConfigError

    try:
        return hub.fetch_tensors(ref)
    except hub.HubError as exc:
        raise ConfigError(f"hub: cannot read the safetensors headers of {ref} ({exc})", field="model",
                          fix="retry online, or pass a local checkpoint directory") from None


def apply_serving_flags(spec: ModelSpec, src: ModelSource, engine: str, version: str | None,
                        quantization: str | None, dtype: str | None) -> tuple[ModelSpec, ModelSource]:
    """``spec`` as the engine serves it under ``--quantization`` / ``--dtype`` (model/quant.py rules).
    When the flags change what the weights weigh (online quantization, another dtype), the checkpoint's
    safetensors headers no longer give the loaded bytes, so ``src`` loses its exact-weights source."""
    import dataclasses

    from .quant import dtype_for_flag, quantization_for_flag

    q = quantization_for_flag(spec.quant, quantization, engine, version)
    d = dtype_for_flag(spec.dtype, dtype)
    if q is spec.quant and d == spec.dtype:
        return spec, src
    note = (f"--quantization {q.online}: weights quantized while loading (bf16 checkpoint)",) if q.online else ()
    spec = dataclasses.replace(spec, quant=q, dtype=d, assumed=spec.assumed + note)
    meta = {k: v for k, v in src.meta.items() if k != "hub"}
    return spec, dataclasses.replace(src, checkpoint_dir=None, meta=meta)
