"""vLLM ``max_model_len``: ``ModelConfig._get_and_verify_max_len`` per release.

``derive_max_model_len`` reads the HF config as the release does (keys, RoPE scaling, the
``model_max_length`` escape hatch); ``verify_max_model_len`` applies the user's value and raises the
engine's own error text. Version-dependent rules read ``VersionTraits`` (release.py). Conformance:
tests/conformance/test_vllm_memory.py (``_get_and_verify_max_len`` of each release).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import ConfigError, FlagError
from .release import VersionTraits


# ---------------------------------------------------------------------------------------------
# max_model_len from the HF config: ModelConfig ``_get_and_verify_max_len``

# vllm/config/model.py @ v0.11.0 (``possible_keys``); model_arch_config_convertor.py
# ``derive_max_model_len_and_key`` @ v0.19.1 … v0.33.0: the smallest present value wins.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_ROPE_KEYS_V4_PATCH = ("rope_theta", "rotary_emb_base", "partial_rotary_factor", "rotary_pct",
                       "rotary_emb_fraction", "original_max_position_embeddings")
DEFAULT_MAX_LEN_NO_KEYS = 2048


def _rope_default_keys(traits: VersionTraits) -> tuple[str, ...]:
    """The config keys for which the transformers-v4 branch of ``patch_rope_parameters`` creates
    ``rope_parameters = {"rope_type": "default"}`` (vllm/transformers_utils/config.py): only
    ``rope_theta`` in v0.12.0; + rotary_emb_base / partial_rotary_factor / rotary_pct /
    rotary_emb_fraction in v0.13.0; + original_max_position_embeddings from v0.14.1."""
    if not traits.rope_default_rotary_keys:
        return ("rope_theta",)
    if not traits.rope_default_ompe_key:
        return _ROPE_KEYS_V4_PATCH[:-1]
    return _ROPE_KEYS_V4_PATCH


def _yarn_from_original(traits: VersionTraits) -> bool:
    """0.12 … 0.28: rope_parameters read, yarn starts from ``original_max_position_embeddings``."""
    return traits.max_len_rope_parameters and not traits.max_len_yarn_unscaled


@dataclass(frozen=True)
class DerivedMaxModelLen:
    """``derived_max_model_len`` as vLLM holds it (a float once a RoPE factor was applied, which
    shows in its error text: ``max_position_embeddings=32768.0``), the key it came from, the
    default ``max_model_len`` and the ``model_max_length`` escape hatch."""

    derived: int | float
    key: str | None
    default_max_model_len: int
    model_max_length: int | None
    keys_found: bool
    error: str | None = None  # the engine fails deriving it (raised by verify_max_model_len)
    default_error: str | None = None  # the engine fails only when it takes the default (no user value / -1)


def _rope_dicts(config: Mapping[str, Any], traits: VersionTraits) -> list[dict] | None:
    """The RoPE dicts ``_get_and_verify_max_len`` iterates, after vLLM's config patching.

    0.10-0.11: ``rope_scaling`` (``patch_rope_scaling``: ``type`` -> ``rope_type``, ``su`` ->
    ``longrope``). 0.19-0.28 (transformers v4 path of ``patch_rope_parameters``):
    ``rope_parameters = rope_scaling``, or ``{"rope_type": "default"}`` when any of rope_theta /
    rotary_emb_base / partial_rotary_factor / rotary_pct / rotary_emb_fraction /
    original_max_position_embeddings is set (nested per layer type when keyed by layer type).
    From 0.26 (transformers v5 only: ``patch_rope_parameters`` calls ``standardize_rope_params``
    when rope_theta / rotary_emb_base or rope_parameters is set): the same dicts, the default one
    only for rope_theta / rotary_emb_base."""
    rs = config.get("rope_scaling")
    rp = config.get("rope_parameters")
    if not traits.max_len_rope_parameters:
        if not isinstance(rs, Mapping):
            return None
        dicts = [dict(rs)]
    else:
        base = rp if isinstance(rp, Mapping) and rp else rs
        if isinstance(base, Mapping) and base:
            nested = all(isinstance(v, Mapping) for v in base.values()) and \
                set(base) <= {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"}
            dicts = [dict(v) for v in base.values()] if nested else [dict(base)]
            if nested and not traits.transformers_v5 and traits.rope_nested_v4_unpatched:
                # v0.22.1 / v0.23: the transformers-v4 branch of patch_rope_parameters leaves nested
                # rope_parameters unpatched (transformers_utils/config.py @ v0.22.1): the dicts as
                # written (a legacy ``type`` key then fails ``rp["rope_type"]``: KeyError)
                return dicts
        elif any(config.get(k) is not None for k in (_rope_default_keys(traits) if not traits.transformers_v5
                                                      else ("rope_theta", "rotary_emb_base"))):
            dicts = [{"rope_type": "default"}]
        else:
            return None
    ompe = config.get("original_max_position_embeddings")
    if _yarn_from_original(traits) and not traits.transformers_v5 and ompe is not None and len(dicts) == 1:
        dicts[0]["original_max_position_embeddings"] = ompe  # the v4 branch patches the top-level key in
    for d in dicts:
        if "rope_type" not in d and "type" in d:
            d["rope_type"] = d["type"]
        d.setdefault("rope_type", "default")
        if d["rope_type"] == "su":
            d["rope_type"] = "longrope"
        elif d["rope_type"] == "mrope":
            d["rope_type"] = "default"
    return dicts


def derive_max_model_len(config: Mapping[str, Any], traits: VersionTraits) -> DerivedMaxModelLen:
    """``_get_and_verify_max_len`` without a user value (vllm/config/model.py @ v0.11.0, v0.19.1 …
    v0.28.0, v0.33.0; vllm/config/__init__.py @ v0.10.1.1), for the text config of a generate model:
    the length from the config keys (:func:`_max_len_from_keys`), scaled by RoPE
    (:func:`_rope_scaled`), and the default a longrope model takes (:func:`_longrope_default`).

    Not modelled: ``tokenizer_config.json``'s ``model_max_length``, ``--disable-sliding-window``,
    encoder configs, draft models.
    """
    derived, key, found = _max_len_from_keys(config)
    error = None
    rope = _rope_dicts(config, traits)
    gemma3 = "gemma3" in str(config.get("model_type", ""))
    if rope and not gemma3 and any("rope_type" not in rp for rp in rope):
        error, rope = _missing_rope_type_error(traits), None  # the scaling loop reads every dict
    if rope and not gemma3:
        derived, error = _rope_scaled(derived, rope, traits)
    default = int(derived) if error is None else 0
    default_error = None
    if traits.max_len_rope_parameters and rope:
        default, default_error = _longrope_default(default, derived, rope, config, traits)
    return DerivedMaxModelLen(derived, key, default, config.get("model_max_length"), found, error,
                              default_error)


def _max_len_from_keys(config: Mapping[str, Any]) -> tuple[int | float, str | None, bool]:
    """(derived, key, keys_found): the smallest of ``MAX_LEN_KEYS`` present (vllm/config/model.py
    @ v0.11.0 ``possible_keys``; ``derive_max_model_len_and_key`` @ v0.19.1 … v0.33.0); a truthy
    ``model_max_length`` overrides it; none: 2048 (only when the user passes no value)."""
    derived: int | float = float("inf")
    key = None
    for k in MAX_LEN_KEYS:
        v = config.get(k)
        if v is not None:
            if v < derived:
                key = k
            derived = min(derived, v)
    mml_key = config.get("model_max_length")
    if mml_key:
        key, derived = "model_max_length", mml_key
    found = derived != float("inf")
    if not found:
        derived = DEFAULT_MAX_LEN_NO_KEYS
    return derived, key, found


def _missing_rope_type_error(traits: VersionTraits) -> str:
    """v0.22.1 / v0.23 (see :func:`_rope_dicts`): a nested dict without ``rope_type`` fails."""
    return (f"rope_parameters: a per-layer-type dict has no rope_type: vLLM {traits.version} fails "
            "reading it (KeyError in _get_and_verify_max_len; its transformers-v4 branch of "
            "patch_rope_parameters does not patch nested dicts)")


def _rope_scaled(derived: int | float, rope: list[dict], traits: VersionTraits) -> tuple[int | float, str | None]:
    """(derived, error) after RoPE scaling (skipped for ``gemma3*`` by the caller): types other than
    su/longrope/llama3 (0.33: also yarn, deepseek_yarn, deepseek_llama_scaling) multiply by
    ``factor`` (default 1.0, ``None`` -> 1.0 from 0.18; a TypeError before); up to 0.28 yarn
    starts from ``original_max_position_embeddings``."""
    if not traits.max_len_rope_parameters:
        return _rope_scaling_scaled(derived, rope[0], traits)
    return _rope_parameters_scaled(derived, rope, traits)


def _rope_scaling_scaled(derived: int | float, rp: dict, traits: VersionTraits) -> tuple[int | float, str | None]:
    """0.10 / 0.11: the one ``rope_scaling`` dict (vllm/config/__init__.py @ v0.10.1.1,
    vllm/config/model.py @ v0.11.0); a null ``factor`` is a TypeError."""
    if rp["rope_type"] in ("su", "longrope", "llama3"):
        return derived, None
    factor = rp.get("factor", 1.0)
    if rp["rope_type"] == "yarn":
        derived = rp["original_max_position_embeddings"]
    if factor is None:
        return derived, (f"rope_scaling.factor is null: vLLM {traits.version} fails reading it "
                         "(TypeError in _get_and_verify_max_len; 0.19+ falls back to 1.0)")
    return derived * factor, None


def _rope_parameters_scaled(derived: int | float, rope: list[dict],
                            traits: VersionTraits) -> tuple[int | float, str | None]:
    """0.12+: every ``rope_parameters`` dict; the last scaled one's ``factor`` applies
    (vllm/config/model.py @ v0.19.1 … v0.28.0, v0.33.0); a null ``factor`` is a TypeError before
    0.18, 1.0 from it."""
    unscaled = ("su", "longrope", "llama3") if _yarn_from_original(traits) else \
        ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
    factor: Any = 1.0
    for rp in rope:
        if rp["rope_type"] not in unscaled:
            factor = rp.get("factor", factor)
            if _yarn_from_original(traits) and rp["rope_type"] == "yarn":
                derived = rp["original_max_position_embeddings"]
    if factor is None and not traits.max_len_null_factor_ok:
        return derived, (f"rope_scaling.factor is null: vLLM {traits.version} fails reading it "
                         "(TypeError in _get_and_verify_max_len; 0.18+ falls back to 1.0)")
    return derived * (1.0 if factor is None else factor), None


def _longrope_default(default: int, derived: int | float, rope: list[dict], config: Mapping[str, Any],
                      traits: VersionTraits) -> tuple[int, str | None]:
    """(default max_model_len, default_error): from 0.12 a longrope model defaults to the top-level
    ``original_max_position_embeddings`` (vllm/config/model.py @ v0.19.1 … v0.33.0:
    ``any(rp["rope_type"] == "longrope" ...)``, which stops at the first longrope)."""
    for rp in rope:
        if "rope_type" not in rp:  # only for gemma3 here (the default-length path alone reads it)
            return default, _missing_rope_type_error(traits)
        if rp["rope_type"] == "longrope":
            return int(config.get("original_max_position_embeddings", derived)), None
    return default, None


def max_model_len_error(user: int, d: DerivedMaxModelLen, traits: VersionTraits) -> str:
    """The ValueError of ``_get_and_verify_max_len`` (text per version, see ``derive_max_model_len``)."""
    msg = (f"User-specified max_model_len ({user}) is greater than the derived max_model_len "
           f"({d.key}={d.derived} or model_max_length={d.model_max_length} in model's config.json).")
    if not traits.max_len_error_warning:
        return (f"{msg} This may lead to incorrect model outputs or CUDA errors. To allow overriding this "
                "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    warning = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
               "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "
               "If the model uses absolute position encoding, positions exceeding derived_max_model_len "
               "will cause a CUDA array out-of-bounds error.")
    return f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}"


def verify_max_model_len(user: int | None, d: DerivedMaxModelLen, traits: VersionTraits,
                         allow_long: bool = False) -> int:
    """``max_model_len`` after ``_get_and_verify_max_len``; raises FlagError with the engine's text.
    ``-1`` (auto-fit, v0.14+) takes the default like ``None``."""
    if not d.keys_found and user is not None:
        return user
    if d.error:
        raise ConfigError(d.error, field="rope_scaling", fix="set rope_scaling.factor or drop it")
    if user is None or (user == -1 and traits.requested_memory_ceil):
        if d.default_error:
            raise ConfigError(d.default_error, field="rope_parameters", fix="add rope_type to every dict")
        return d.default_max_model_len
    if user > d.derived:
        if d.model_max_length is None or user > d.model_max_length:
            if not allow_long:
                raise FlagError(max_model_len_error(user, d, traits), field="--max-model-len",
                                fix=f"use --max-model-len <= {int(d.derived)}, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    return int(user)
