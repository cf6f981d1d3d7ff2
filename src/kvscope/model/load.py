"""Model reference -> ModelSpec (+ exact weights from safetensors headers when a checkpoint dir is given)."""

from __future__ import annotations

import warnings
from typing import Callable

from ..catalog import ModelSource, load_model_source
from .safetensors import checkpoint_tensors, exact_weights_per_rank
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
    """For a local checkpoint directory: ``tp -> exact weight bytes per TP rank`` from the safetensors
    headers (only the headers are read, once); None for a bundled id or a bare config.json."""
    if src.checkpoint_dir is None:
        return None
    tensors = checkpoint_tensors(src.checkpoint_dir)
    if not tensors:
        return None

    def per_rank(tp: int) -> int:
        return exact_weights_per_rank(tensors, tp, spec.num_key_value_heads)[1]

    return per_rank
