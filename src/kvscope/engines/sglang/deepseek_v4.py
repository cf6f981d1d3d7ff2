"""DeepSeek-V4 KV pools in SGLang 0.5.23: ``DSV4PoolConfigurator`` (model_executor/pool_configurator.py).

SGLang sizes V4 with its own configurator, not with a cell size. Given the profile's
``available_bytes`` (rest memory) it solves

    full_token = int((available - fixed_bytes) / bytes_per_full_token) // page * page

with (default NVIDIA path: ``SGLANG_DSV4_KV_LAYOUT=v4``, FlashMLA, not unified-KV, no HiSparse,
no encoder replay, no online c128; mem_cache/deepseek_v4_memory_pool.py and
kernels/ops/attention/dsv4/kv_layout.py @ v0.5.23):

* a paged latent slot of ``KVLayout.V4``: 584 B (448 fp8 NoPE + 64 bf16 RoPE + 8 scale bytes),
  pages padded to 576 B: ``page_bytes(n) = ceil(n * 584 / 576) * 576`` -- per token
  ``page_bytes(page) / page`` for the SWA ring, ``page_bytes(page / ratio) / (page / ratio)`` per
  compressed row;
* ``bytes_per_swa_token = swa_slot * L + ring_c4 / page * (2*2*512*4 + 2*2*128*4) * n_c4``
  (the c4 compress state follows the SWA pool);
* ``bytes_per_full_token = r * bytes_per_swa_token + n_c4 * (slot_c4 / 4 + indexer / 4)
  + n_c128 * slot_c128 / 128`` where the indexer row is 128 fp8 + 4 scale bytes and ``r`` is the
  SWA ratio in ratio mode (``--swa-full-tokens-ratio``, default 0.1) and 0 in cap mode;
* cap mode (no explicit ratio, ``max_running_requests`` known -- V4 defaults it to 256 in
  arg_groups/deepseek_v4_hook.py -- and chunked prefill on): the SWA pool is a fixed
  ``swa_cap_tokens = ceil_align(compute_swa_request_cap + 4*max_running_requests*(W + page),
  page)`` slots, priced at ``bytes_per_swa_token`` in ``fixed_bytes``;
* ``fixed_bytes`` also holds the c128 compress-state rows: ``ceil((slots*ring + ring + 1)/128)*128
  * 2*512 * 4 B * n_c128`` with ``slots = max_running_requests + 1`` and ring 128 (256 with
  speculation);
* speculation (EAGLE / DSPARK, no encoder replay): both per-token figures x ``(L + 1) / L`` and
  rings 16 / 256.

``page_size`` is 256 on CUDA (arg_groups/model_overrides/deepseek_v4.py @ v0.5.23; 128 on NPU).
Exact here: the pool arithmetic above for a given ``available_bytes`` without speculation.
Estimated: the cap-mode decode allocation with speculation (spec-v2 ``get_alloc_len_per_decode``
is taken as one page), and everything about ``available_bytes`` itself (kvscope's profile model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...model.spec import ModelSpec
from .kv_cache import CellSize

PAGE_SIZE_CUDA = 256
DEFAULT_MAX_RUNNING_REQUESTS = 256  # apply_deepseek_v4_defaults
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.1  # DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO
SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL default
V4_SLOT_BYTES = 584  # KVLayout.V4.bytes_per_token = 576 data + 8 scale
V4_PAGE_ALIGN = 576  # KVLayout.V4.page_align
STATE_DTYPE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE=float32


def v4_page_bytes(n: int) -> int:
    """``KVLayout.V4.page_bytes``: ``ceil(n * 584 / 576) * 576``."""
    return -(-n * V4_SLOT_BYTES // V4_PAGE_ALIGN) * V4_PAGE_ALIGN


def paged_kv_bytes_per_token(page_size: int, ratio: int = 0) -> float:
    """``_get_paged_kv_bytes_per_token``: bytes per stored row of the paged latent pool."""
    n = page_size // ratio if ratio else page_size
    return v4_page_bytes(n) / n


def indexer_bytes_per_token(index_head_dim: int) -> int:
    """``get_dsv4_indexer_bytes_per_token`` (fp8): 128 + 128 // 128 * 4 = 132."""
    return index_head_dim + index_head_dim // 128 * 4


def ring_size(ratio: int, speculative: bool) -> int:
    """``get_compress_state_ring_size``: c4 8 (16 with speculation), c128 128 (256)."""
    if ratio == 4:
        return 16 if speculative else 8
    return 256 if speculative else 128


@dataclass(frozen=True)
class DSV4Inputs:
    """The flags DSV4PoolConfigurator reads (per worker)."""

    page_size: int = PAGE_SIZE_CUDA
    max_running_requests: int = DEFAULT_MAX_RUNNING_REQUESTS  # per worker (/ attn_dp)
    chunked_prefill_size: int = 8192
    disable_radix_cache: bool = False
    speculative: bool = False
    num_draft_tokens: int = 1
    swa_full_tokens_ratio: float | None = None  # only when the operator set it
    disable_overlap_schedule: bool = False


@dataclass(frozen=True)
class DSV4Pools:
    """DeepSeek-V4's token pools as its configurator sizes them."""

    full_tokens: int
    swa_tokens: int
    c4_tokens: int
    c128_tokens: int
    c4_state_pool_size: int
    c128_state_pool_size: int
    bytes_per_full_token: float
    bytes_per_swa_token: float
    fixed_bytes: int
    mode: str  # "cap" | "ratio"
    estimated: tuple[str, ...] = field(default_factory=tuple)
    error: str | None = None  # calculate_pool_sizes' RuntimeError (cap leaves no full pool)


def _layers(spec: ModelSpec) -> tuple[int, int, int]:
    v4 = spec.dsv4
    assert v4 is not None
    return len(v4.compress_ratios), v4.num_c4_layers, v4.num_c128_layers


def bytes_per_swa_token(spec: ModelSpec, page_size: int, speculative: bool = False) -> float:
    """``_get_bytes_per_swa_token`` (before the speculative inflation)."""
    v4 = spec.dsv4
    assert v4 is not None
    n, n4, _ = _layers(spec)
    head = v4.head_dim  # attn_head_dim = qk_nope + qk_rope = 512
    c4_state = 2 * 2 * head * STATE_DTYPE_BYTES
    c4_index_state = 2 * 2 * v4.index_head_dim * STATE_DTYPE_BYTES
    ring = ring_size(4, speculative) if n4 else 0
    return paged_kv_bytes_per_token(page_size) * n + ring / page_size * (c4_state + c4_index_state) * n4


def compressed_bytes_per_full_token(spec: ModelSpec, page_size: int) -> float:
    """``sum(_compressed_bytes_per_full_token(ratio) * layers)`` over c4 and c128 layers."""
    v4 = spec.dsv4
    assert v4 is not None
    _, n4, n128 = _layers(spec)
    c4 = 1 / 4 * paged_kv_bytes_per_token(page_size, 4) + 1 / 4 * indexer_bytes_per_token(v4.index_head_dim)
    c128 = 1 / 128 * paged_kv_bytes_per_token(page_size, 128)
    return c4 * n4 + c128 * n128


def swa_request_cap(spec: ModelSpec, x: DSV4Inputs) -> tuple[int, bool]:
    """``compute_swa_request_cap`` (non-disaggregated): ``(W + interval * draft + page +
    decode_alloc) * reqs + chunks_in_flight * chunked_prefill_size + page``; returns
    (cap, exact). With speculation the spec-v2 decode allocation is estimated as one page."""
    v4 = spec.dsv4
    assert v4 is not None
    draft = x.num_draft_tokens if x.speculative else 1
    trailing = v4.sliding_window + SWA_EVICTION_INTERVAL * draft + x.page_size
    decode_alloc = x.page_size if not x.speculative else 2 * x.page_size
    chunks = 1 if x.disable_overlap_schedule else 2
    cap = (trailing + decode_alloc) * max(1, x.max_running_requests) + chunks * x.chunked_prefill_size + x.page_size
    return cap, not x.speculative


def c128_state_fixed_bytes(spec: ModelSpec, x: DSV4Inputs) -> int:
    """``_get_c128_state_fixed_bytes`` (offline compress): rows padded to 128, ``2 * 512`` fp32."""
    v4 = spec.dsv4
    assert v4 is not None
    _, _, n128 = _layers(spec)
    if not n128:
        return 0
    ring = ring_size(128, x.speculative)
    rows = (x.max_running_requests + 1) * ring + ring + 1
    rows = -(-rows // 128) * 128
    return rows * 2 * v4.head_dim * STATE_DTYPE_BYTES * n128


def pool_sizes(spec: ModelSpec, available_bytes: int, x: DSV4Inputs) -> DSV4Pools:
    """``DSV4PoolConfigurator.calculate_pool_sizes`` + ``_compute_dsv4_sizes`` (pool_configurator.py
    @ v0.5.23), for the default NVIDIA layout."""
    n, _, _ = _layers(spec)
    page = x.page_size
    est: list[str] = []
    bpst = bytes_per_swa_token(spec, page, x.speculative)
    cap_mode = (x.swa_full_tokens_ratio is None and x.max_running_requests is not None
                and x.chunked_prefill_size is not None and x.chunked_prefill_size > 0)
    ratio = 0.0 if cap_mode else (x.swa_full_tokens_ratio if x.swa_full_tokens_ratio is not None
                                  else DEFAULT_SWA_FULL_TOKENS_RATIO)
    bpft = ratio * bpst + compressed_bytes_per_full_token(spec, page)
    if x.speculative:
        infl = (n + 1) / n
        bpft *= infl
        bpst *= infl
    swa_cap = None
    if cap_mode:
        cap, exact = swa_request_cap(spec, x)
        if not exact:
            est.append("SWA request cap with speculation (decode allocation taken as 2 pages)")
        tails = 0 if x.disable_radix_cache else 4 * x.max_running_requests
        assert spec.dsv4 is not None
        headroom = tails * (spec.dsv4.sliding_window + page)
        swa_cap = -(-(cap + headroom) // page) * page
    fixed = c128_state_fixed_bytes(spec, x) + (int(swa_cap * bpst) if swa_cap is not None else 0)
    avail = max(available_bytes - fixed, 0)
    full = int(avail / bpft) // page * page
    error = None
    if full <= 0 and swa_cap is not None:
        error = (f"The DSV4 SWA pool cap ({swa_cap} tokens, {int(swa_cap * bpst) / (1 << 30):.2f} GB) leaves no room "
                 f"for the full KV pool within the available {available_bytes / (1 << 30):.2f} GB. Reduce "
                 "--max-running-requests, lower --swa-prefix-tails or SGLANG_SWA_EVICTION_INTERVAL, or increase "
                 "--mem-fraction-static.")
    swa = swa_cap if swa_cap is not None else int(full * ratio) // page * page
    return DSV4Pools(
        full_tokens=full, swa_tokens=swa, c4_tokens=full // 4, c128_tokens=full // 128,
        c4_state_pool_size=swa // page * ring_size(4, x.speculative),
        c128_state_pool_size=(x.max_running_requests + 1) * ring_size(128, x.speculative),
        bytes_per_full_token=bpft, bytes_per_swa_token=bpst, fixed_bytes=fixed,
        mode="cap" if cap_mode else "ratio", estimated=tuple(est), error=error)


def inputs_from_args(a, chunked_prefill_size: int, page_size: int | None = None) -> DSV4Inputs:
    """The configurator's inputs from kvscope's SGLang args (V4 defaults applied)."""
    mrr = a.max_running_requests if a.max_running_requests is not None else DEFAULT_MAX_RUNNING_REQUESTS
    algo = (a.speculative_algorithm or "").upper()
    return DSV4Inputs(
        page_size=page_size or PAGE_SIZE_CUDA,
        max_running_requests=max(1, mrr // max(1, a.attn_dp_size)),
        chunked_prefill_size=chunked_prefill_size,
        disable_radix_cache=a.disable_radix_cache,
        speculative=bool(algo),
        num_draft_tokens=a.speculative_num_draft_tokens or 1,
    )


def cell_size(spec: ModelSpec, page_size: int = PAGE_SIZE_CUDA, speculative: bool = False) -> CellSize:
    """A ``kv_cache.CellSize`` view: the ratio-mode coefficient rounded up (what a cell-size
    profile would divide by). The real pool is :func:`pool_sizes`."""
    n, n4, n128 = _layers(spec)
    bpst = bytes_per_swa_token(spec, page_size, speculative)
    bpft = DEFAULT_SWA_FULL_TOKENS_RATIO * bpst + compressed_bytes_per_full_token(spec, page_size)
    if speculative:
        bpft *= (n + 1) / n
    # full_layer x n = compressed KV + indexer bytes per full token; swa_layer x n = one SWA slot
    # (+ c4 state): what the pools hold per full / SWA token (c128 state rows are fixed bytes).
    comp = compressed_bytes_per_full_token(spec, page_size)
    return CellSize(cell_bytes=math.ceil(bpft), full_layer_bytes=math.ceil(comp / n), num_full_layers=n,
                    swa_layer_bytes=math.ceil(bpst / n), num_swa_layers=n,
                    formula=(f"DSV4 pools: 0.1 x SWA {bpst:.2f} B + c4 ({n4} layers) + c128 ({n128} layers) "
                             f"= {bpft:.2f} B per full token (estimated as a cell; see deepseek_v4.pool_sizes)"))


def apply_overrides(a):
    """``_deepseek_v4_overrides`` + ``apply_deepseek_v4_defaults`` (arg_groups @ v0.5.23): the dsv4
    attention backend with ``page_size`` 256 on CUDA, ``max_running_requests`` 256 when unset.
    Returns (args, page_size)."""
    from dataclasses import replace

    if a.max_running_requests is None:
        a = replace(a, max_running_requests=DEFAULT_MAX_RUNNING_REQUESTS)
    return a, PAGE_SIZE_CUDA


def plan_tokens(spec: ModelSpec, available_bytes: int, a, chunked_prefill_size: int, page_size: int | None = None
                ) -> tuple[int, int, list[str], DSV4Pools]:
    """(full tokens, SWA tokens, warnings, pools) for ``plan_sglang``."""
    x = inputs_from_args(a, chunked_prefill_size, page_size)
    pools = pool_sizes(spec, available_bytes, x)
    notes = [f"DeepSeek-V4 pools ({pools.mode} mode, SGLang 0.5.23 DSV4PoolConfigurator): full={pools.full_tokens}, "
             f"swa={pools.swa_tokens}, c4={pools.c4_tokens}, c128={pools.c128_tokens}, "
             f"bytes_per_full_token={pools.bytes_per_full_token:.2f}, fixed={pools.fixed_bytes} B"]
    notes += [f"DeepSeek-V4 estimated: {e}" for e in pools.estimated]
    if getattr(a, "pp_size", 1) > 1:
        notes.append("DeepSeek-V4 estimated: with PP, SGLang sizes each stage from its own compress_ratios slice; "
                     "kvscope prices the whole model's layers on every stage (fewer tokens than the engine)")
    notes.append("DeepSeek-V4 in SGLang 0.5.23 runs the dsv4 attention backend with page_size 256 (CUDA); the "
                 "KV budget (rest memory) is kvscope's generic profile estimate, the pool split above is the "
                 "configurator's own arithmetic")
    return pools.full_tokens, pools.swa_tokens, notes, pools


__all__ = ["DSV4Inputs", "DSV4Pools", "bytes_per_swa_token", "c128_state_fixed_bytes", "cell_size",
           "compressed_bytes_per_full_token", "paged_kv_bytes_per_token", "plan_tokens", "pool_sizes",
           "swa_request_cap", "v4_page_bytes", "apply_overrides"]
