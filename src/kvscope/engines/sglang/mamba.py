"""SGLang's mamba / linear-attention state: bytes per request, the PP stage's share, and the carve
of the state pool out of the profile's rest memory (``handle_max_mamba_cache``).

configs/mamba_utils.py; model_runner.py (<= 0.5.6), model_runner_kv_cache_mixin.py (0.5.9-0.5.17),
kv_cache_configurator.py (0.5.18+). Conformance-tested (tests/conformance/test_sglang_pools.py:
test_mamba_carve, test_mamba_state_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...errors import FlagError
from ...model.spec import ModelSpec
from ...model.weights import pp_layer_range
from .release import MambaCarveEra, SGLangRelease

GIB = 1 << 30


class MambaShapeError(FlagError):
    """SGLang's ``divide()`` assertion: a state dimension does not split evenly over the TP ranks."""

    def __init__(self, numerator: int, tp: int, what: str) -> None:
        self.engine_text = f"{numerator} is not divisible by {tp}"  # distributed/utils.py ensure_divisibility
        super().__init__(f"{what} ({numerator}) is not divisible by the attention TP size {tp}", field="--tp",
                         fix="SGLang asserts at startup; use a --tp that divides the mamba heads and conv width")


def _divide(numerator: int, tp: int, what: str) -> int:
    if numerator % tp:
        raise MambaShapeError(numerator, tp, what)
    return numerator // tp


def mamba_state_bytes_per_req(spec: ModelSpec, tp: int, conv_bytes: int = 2, ssm_bytes: int = 4) -> int:
    """``mamba_cache_per_req`` (configs/mamba_utils.py ``Mamba2StateShape.create`` +
    ``BaseLinearStateParams.mamba_cache_per_req``, the same arithmetic @ v0.5.6 … v0.5.23): per request,
    all state layers, one rank.

    The configs call ``create(intermediate, n_groups, num_heads, head_dim, state_size)`` with
    Mamba2 (configs/nemotron_h.py): ``heads*head_dim, n_groups, heads, head_dim, ssm_state_size``;
    GDN (configs/qwen3_next.py): ``v_heads*v_dim, k_heads, v_heads, v_dim, k_dim``. When ``n_groups % tp``
    the groups are replicated up to ``tp`` (``extra_groups_for_head_shards``); conv state
    ``(conv_dim/tp, kernel-1)`` with ``conv_dim = intermediate + 2*n_groups*state_size``, temporal
    ``(heads/tp, head_dim, state_size)``; ``divide`` asserts divisibility (raised here as
    :class:`MambaShapeError`). Conv state bfloat16 (SGLANG_MAMBA_CONV_DTYPE), SSM state float32
    (``mamba_ssm_dtype`` default)."""
    m = spec.mamba
    if m is None:
        return 0
    if m.kind == "gdn":  # MambaSpec(gdn): num_heads=v_heads, head_dim=k_dim, state_size=v_dim
        intermediate, heads, head_dim, state = m.num_heads * m.state_size, m.num_heads, m.state_size, m.head_dim
    else:
        intermediate, heads, head_dim, state = m.num_heads * m.head_dim, m.num_heads, m.head_dim, m.state_size
    groups = m.n_groups if m.n_groups % tp == 0 else tp  # n_groups += tp - n_groups
    conv_dim = intermediate + 2 * groups * state
    conv = _divide(conv_dim, tp, "mamba conv_dim") * (m.conv_kernel - 1)
    temporal = _divide(heads, tp, "mamba/linear-attention heads") * head_dim * state
    return (conv * conv_bytes + temporal * ssm_bytes) * spec.num_state_layers


def mamba_pp_stage_bytes(rel: SGLangRelease, per_req_bytes: int, state_layer_ids: Sequence[int], num_hidden_layers: int,
                         pp_size: int) -> int:
    """The per-request state the carve charges on every rank: from 0.5.18 the largest PP stage's share,
    ``int(per_req * max_stage_state_layers / all_state_layers)`` with ``get_pp_indices`` stages
    (``_handle_max_mamba_cache`` @ v0.5.18 l.1975, @ v0.5.23); before, the whole model's per request."""
    ids = list(state_layer_ids)
    if pp_size <= 1 or not ids or not rel.mamba_pp_stage_share:
        return per_req_bytes
    most = max(sum(1 for i in ids if lo <= i < hi)
               for lo, hi in (pp_layer_range(num_hidden_layers, r, pp_size) for r in range(pp_size)))
    return int(per_req_bytes * (most / max(len(ids), 1)))


@dataclass(frozen=True)
class MambaCarve:
    """The mamba state pool carved from the budget, and the rest left for KV."""

    rest_gib: float  # rest memory left for KV after the state pool
    max_mamba_cache_size: int
    per_req_bytes: int
    error: str | None = None  # RuntimeError "Not enough GPU memory for hybrid ..." (>=0.5.13)


def mamba_request_ratio(disable_radix_cache: bool) -> int:
    """``_calculate_mamba_ratio`` with the default ``no_buffer`` strategy and env: 1 without the radix
    cache, else ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` = 3 (mixin @ v0.5.13/0.5.14,
    kv_cache_configurator.py @ v0.5.18/0.5.23; model_runner.py @ v0.5.6)."""
    return 1 if disable_radix_cache else 3


def _mamba_oom_text(size: int, rest_gib: float, per_req_bytes: int) -> str:
    return (f"RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={size} (total_rest_memory={rest_gib:.2f} GB, "
            f"mamba_cache_per_req={per_req_bytes / (1 << 20):.2f} MB). Try: (1) reduce --max-running-requests, "
            f"(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
            f"(4) use GPUs with more memory.")


def handle_max_mamba_cache(rel: SGLangRelease, rest_gib: float, per_req_bytes: int, *, ratio: float = 0.9,
                           max_mamba_cache_size: int | None = None, disable_radix_cache: bool = False,
                           max_running_requests: int | None = None, attn_dp_size: int = 1,
                           speculative_num_draft_tokens: int | None = None, is_gdn: bool = True) -> MambaCarve:
    """Carve the mamba/linear-attention state pool out of ``rest`` (GiB floats, in the engine's order).

    ``ratio`` = ``--mamba-full-memory-ratio`` R; ``speculative_num_draft_tokens`` D is set iff a
    speculative algorithm is (SGLang then requires ``--max-running-requests``).

    * <0.5.9: :func:`_runner_carve` (model_runner.py ``handle_max_mamba_cache`` @ v0.5.6 l.1450).
    * 0.5.9-0.5.12: :func:`_mixin_carve` (mixin @ v0.5.9 l.151).
    * 0.5.13+: :func:`_configurator_carve` (mixin @ v0.5.13 l.82; kv_cache_configurator.py
      ``_handle_max_mamba_cache`` @ v0.5.18 l.1970, @ v0.5.23 l.3229).
    """
    f = _CarveFlags(ratio, max_mamba_cache_size, disable_radix_cache, max_running_requests, attn_dp_size,
                    speculative_num_draft_tokens, is_gdn)
    era = rel.mamba_carve
    if era == MambaCarveEra.RUNNER:  # (0.5.6 handles a zero state in its own branch)
        return _runner_carve(rest_gib, per_req_bytes, f)
    if per_req_bytes <= 0:
        return MambaCarve(rest_gib, 0, 0)
    if era == MambaCarveEra.MIXIN:
        return _mixin_carve(rest_gib, per_req_bytes, f)
    return _configurator_carve(rel, rest_gib, per_req_bytes, f)


@dataclass(frozen=True)
class _CarveFlags:
    """The flags the carve reads (SGLang's names; ``attn_dp_size``: the per-worker division)."""

    ratio: float  # --mamba-full-memory-ratio R
    max_mamba_cache_size: int | None
    disable_radix_cache: bool
    max_running_requests: int | None
    attn_dp_size: int
    speculative_num_draft_tokens: int | None  # D; None without a speculative algorithm
    is_gdn: bool


def _state_budget_bytes(rest_gib: float, ratio: float) -> float:
    """The state pool's share of rest, ``rest · R / (1 + R)`` GiB, in bytes."""
    return rest_gib * ratio / (1 + ratio) * GIB


def _runner_carve(rest_gib: float, per_req_bytes: int, f: _CarveFlags) -> MambaCarve:
    """<0.5.9 (model_runner.py ``handle_max_mamba_cache`` @ v0.5.6 l.1450): radix cache off → size =
    user size, else ``--max-running-requests``, else 512; otherwise ``int(rest R/(1+R) 2^30 // per_req //
    (1+D))`` (a user size is overwritten); GDN models divide by attn-DP; state = size · per_req · (1+D)."""
    d = f.speculative_num_draft_tokens or 0
    if f.disable_radix_cache or per_req_bytes == 0:
        size = f.max_mamba_cache_size if f.max_mamba_cache_size is not None else (
            f.max_running_requests if f.max_running_requests is not None else 512)
    else:
        size = int(_state_budget_bytes(rest_gib, f.ratio) // per_req_bytes // (1 + d))
    if f.is_gdn:
        size = size // f.attn_dp_size
    return MambaCarve(rest_gib - size * per_req_bytes * (1 + d) / GIB, size, per_req_bytes)


def _mixin_carve(rest_gib: float, per_req_bytes: int, f: _CarveFlags) -> MambaCarve:
    """0.5.9-0.5.12 (mixin @ v0.5.9 l.151): spec first subtracts ``per_req · (running // dp) · D``;
    size = user // dp, else (radix off) running // dp, else ``int(rest R/(1+R) 2^30 // per_req)``."""
    dp, D = f.attn_dp_size, f.speculative_num_draft_tokens
    rest = rest_gib
    if D is not None:
        rest = rest - (per_req_bytes * (f.max_running_requests // dp) * D) / GIB
    if f.max_mamba_cache_size is not None:
        size = f.max_mamba_cache_size // dp
    elif f.disable_radix_cache and f.max_running_requests is not None:
        size = f.max_running_requests // dp
    else:
        size = int(_state_budget_bytes(rest, f.ratio) // per_req_bytes)
    return MambaCarve(rest - size * per_req_bytes / GIB, size, per_req_bytes)


def _configurator_carve(rel: SGLangRelease, rest_gib: float, per_req_bytes: int, f: _CarveFlags) -> MambaCarve:
    """0.5.13+: size K (:func:`_configurator_size`); with speculative decoding the intermediate state,
    ``per_req · D`` for each of :func:`_draft_state_requests`, leaves rest first; RuntimeError when
    K <= 0; state ``(K + pad) · per_req`` (:func:`_padding_slot`). (PP=1; no ReplaySSM, no fused
    draft state, no extra buffer.)"""
    size = _configurator_size(rel, rest_gib, per_req_bytes, f)
    rest = rest_gib
    D = f.speculative_num_draft_tokens
    if D is not None:
        rest = rest - (per_req_bytes * _draft_state_requests(rel, size, f) * D) / GIB
    if size <= 0:
        return MambaCarve(rest, size, per_req_bytes, _mamba_oom_text(size, rest, per_req_bytes))
    return MambaCarve(rest - (size + _padding_slot(rel)) * per_req_bytes / GIB, size, per_req_bytes)


def _padding_slot(rel: SGLangRelease) -> int:
    """The +1 padding slot on both state buffers from 0.5.18 (kv_cache_configurator.py @ v0.5.18 l.1970)."""
    return 1 if rel.mamba_carve == MambaCarveEra.PADDED else 0


def _running_per_dp(rel: SGLangRelease, f: _CarveFlags) -> int:
    """``running // dp``; ``max(1, …)`` after 0.5.20 (kv_cache_configurator.py @ v0.5.23)."""
    n = f.max_running_requests // f.attn_dp_size
    return max(1, n) if rel.running_per_dp_at_least_one else n


def _configurator_size(rel: SGLangRelease, rest_gib: float, per_req_bytes: int, f: _CarveFlags) -> int:
    """K = user size // dp; else (radix off) :func:`_running_per_dp`; else from B = rest R/(1+R) 2^30:
    ``int(B // per_req)``, spec solved jointly ``int(B // (per_req (1 + D/ratio)))`` (mixin @ v0.5.13 l.82 =
    @ v0.5.14 l.122); from 0.5.18 less the padding slot, ``int((B − per_req) // per_req)`` or
    ``int((B − per_req(1+D)) // (per_req(1+D/ratio)))`` (kv_cache_configurator.py @ v0.5.18 l.1970)."""
    if f.max_mamba_cache_size is not None:
        return f.max_mamba_cache_size // f.attn_dp_size
    if f.disable_radix_cache and f.max_running_requests is not None:
        return _running_per_dp(rel, f)
    padded = bool(_padding_slot(rel))
    budget_bytes = _state_budget_bytes(rest_gib, f.ratio)
    per = per_req_bytes
    D = f.speculative_num_draft_tokens
    if D is None:
        return int((budget_bytes - per) // per) if padded else int(budget_bytes // per)
    per_with_draft = per * (1 + D / mamba_request_ratio(f.disable_radix_cache))
    if padded:
        return int((budget_bytes - per * (1 + D)) // per_with_draft)
    return int(budget_bytes // per_with_draft)


def _draft_state_requests(rel: SGLangRelease, size: int, f: _CarveFlags) -> int:
    """Requests the intermediate draft state is reserved for: the radix-off size, else
    ``min(running // dp, K // ratio)`` (0.5.13+ mixin, kv_cache_configurator.py @ v0.5.18 l.1970), plus
    the padding slot."""
    if f.max_mamba_cache_size is None and f.disable_radix_cache and f.max_running_requests is not None:
        return size + _padding_slot(rel)
    return min(_running_per_dp(rel, f), size // mamba_request_ratio(f.disable_radix_cache)) + _padding_slot(rel)
