"""Model reference -> ModelSpec (+ exact weights from safetensors headers when a checkpoint dir is given)."""

from __future__ import annotations

import warnings

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
