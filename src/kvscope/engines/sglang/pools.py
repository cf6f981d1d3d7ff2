"""SGLang's pools after the profile: the final token pool (page rounding, ``--max-total-tokens``,
the classic speculative headroom), the hybrid sliding-window split, the request pool
(``max_num_reqs`` / ``max_running_requests``, ``req_to_token``), the KV buffers as allocated.

``init_memory_pool`` (model_runner.py <= 0.5.6, mixin 0.5.9), ``_resolve_memory_pool_config``
(mixin 0.5.10-0.5.17), ``pool_configurator.py`` (0.5.11+), ``kv_cache_configurator.py`` and
``mem_cache/allocation_sizing.py`` (0.5.18+). Conformance-tested (tests/conformance/test_sglang_pools.py:
``request_pools``, ``hybrid_swa_pools``); ``plan_sglang`` runs these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kv_cache import CellSize
from .mamba import mamba_request_ratio
from .release import OomErrorText, ReqRowExtra, SGLangRelease, SwaSplit


def runtime_error_text(rel: SGLangRelease, mfs: float) -> str:
    """The RuntimeError raised when ``max_total_num_tokens <= 0`` — its wording per version
    (model_runner.py @ v0.4.6.post5 / @ v0.5.6, mixin @ v0.5.9, pool_configurator.py @ v0.5.11+).
    Conformance-tested (tests/conformance/test_sglang_pools.py)."""
    base = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    if rel.oom_error_text == OomErrorText.BARE:
        return base
    if rel.oom_error_text == OomErrorText.WITH_VALUE:
        return f"{base} Current value: self.server_args.mem_fraction_static={mfs}"
    # MemoryPoolConfig.__post_init__ (mixin @ v0.5.10 l.55, pool_configurator.py @ v0.5.13 l.51, @ v0.5.23
    # l.94) appends the value only when the config carries it; the configs built by calculate_pool_sizes /
    # calculate_pool_sizes_from_max_tokens never do (mem_fraction_static is set after), so the text ends here.
    return base


@dataclass(frozen=True)
class PoolFlags:
    """The flags the pool sizing reads (SGLang's names; per server, the functions divide by attn DP)."""

    page_size: int = 1
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    attn_dp_size: int = 1
    speculative_algorithm: str | None = None
    num_steps: int | None = None  # --speculative-num-steps
    topk: int | None = None  # --speculative-eagle-topk
    num_draft_tokens: int | None = None  # --speculative-num-draft-tokens
    mem_fraction_static: float = 0.88  # the effective fraction (only quoted in error texts)
    disable_radix_cache: bool = False
    chunked_prefill_size: int | None = None


@dataclass(frozen=True)
class SwaLayout:
    """A hybrid sliding-window model's KV per token per layer on one rank (F, S) and layer counts."""

    full_layer_bytes: int
    num_full_layers: int
    swa_layer_bytes: int
    num_swa_layers: int
    draft_full_layers: int = 0  # EAGLE/STANDALONE draft layers priced at the full width (0.5.18+)
    draft_bytes: int = 0  # a draft share already in the cell (0.5.14 profile split)


def round_to_page(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def apply_token_constraints(tokens: int, page_size: int, max_total_tokens: int | None) -> tuple[int, bool]:
    """``min(T, --max-total-tokens)`` then page rounding (the order of mixin @ v0.5.9 init_memory_pool;
    v0.5.23 rounds, caps and re-rounds — the same result)."""
    capped = max_total_tokens is not None and max_total_tokens < tokens
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return round_to_page(tokens, page_size), capped


def swa_split(rel: SGLangRelease, rest_bytes: int, cell: CellSize, page_size: int, ratio: float) -> tuple[int, int]:
    """Hybrid SWA pools (full_layer_tokens, swa_layer_tokens) from the budget, current code
    (``HybridSWAPoolConfigurator`` @ v0.5.13 … v0.5.23, ``rel.swa_split_in_profile``): see
    :func:`hybrid_swa_pools`."""
    layout = SwaLayout(cell.full_layer_bytes, cell.num_full_layers, cell.swa_layer_bytes or cell.full_layer_bytes,
                       cell.num_swa_layers, draft_bytes=cell.draft_bytes)
    p = hybrid_swa_pools(rel, rest_bytes, layout, PoolFlags(page_size=page_size, mem_fraction_static=0.0), ratio=ratio)
    return p.full_tokens, p.swa_tokens


@dataclass(frozen=True)
class SWAPools:
    """The hybrid sliding-window pools: full-attention and SWA tokens."""

    max_total_num_tokens: int  # = full_tokens (all-SWA: swa_tokens)
    full_tokens: int
    swa_tokens: int
    error: str | None = None


def hybrid_swa_pools(rel: SGLangRelease, available_bytes: int, layout: SwaLayout, flags: PoolFlags, *,
                     ratio: float, sliding_window: int | None = None, llama4_chunk_ratio: float | None = None,
                     swa_eviction_interval: int = 128) -> SWAPools:
    """The hybrid sliding-window split, per release. F/S = bytes per token per full/SWA layer,
    r = ``--swa-full-tokens-ratio``; ``available_bytes`` = the profile's ``int(rest × 2^30)``.

    * <0.5.11: profile, ``--max-total-tokens`` cap and page rounding, then the split of T
      (:func:`_mixin_swa_pools`: ``set_num_token_hybrid`` @ v0.5.6, mixin @ v0.5.9 / v0.5.10).
    * 0.5.14+ with the radix cache off and ``--max-running-requests`` set: the SWA pool is the running
      requests' worst case, the rest goes to the full pool (:func:`_swa_request_cap_pools`).
    * Otherwise 0.5.11+: ``HybridSWAPoolConfigurator`` (pool_configurator.py @ v0.5.13 l.196, @ v0.5.23
      l.656) solves both pools from one cell (:func:`_configurator_swa_pools`).
    """
    if rel.swa_split != SwaSplit.CONFIGURATOR:
        return _mixin_swa_pools(rel, available_bytes, layout, flags, ratio, llama4_chunk_ratio)
    if _swa_request_cap_applies(rel, layout.num_full_layers, sliding_window, flags.disable_radix_cache,
                                flags.max_running_requests, flags.chunked_prefill_size):
        return _swa_request_cap_pools(rel, available_bytes, layout, flags, sliding_window, swa_eviction_interval)
    return _configurator_swa_pools(rel, available_bytes, layout, flags, ratio, sliding_window)


def _swa_pools(rel: SGLangRelease, flags: PoolFlags, max_total_num_tokens: int, full_tokens: int,
               swa_tokens: int) -> SWAPools:
    """The pools, with the RuntimeError of an empty token pool (:func:`runtime_error_text`)."""
    error = None if max_total_num_tokens > 0 else runtime_error_text(rel, flags.mem_fraction_static)
    return SWAPools(max_total_num_tokens, full_tokens, swa_tokens, error)


def _mixin_swa_pools(rel: SGLangRelease, available_bytes: int, layout: SwaLayout, flags: PoolFlags, ratio: float,
                     llama4_chunk_ratio: float | None) -> SWAPools:
    """<0.5.11: T = the profile's tokens, capped by ``--max-total-tokens`` and page-rounded, then split.

    * <0.5.9 the profile divides by the plain cell F·(n_full+n_swa) (:func:`_layer_count_split`).
    * 0.5.9-0.5.10 the profile cell is F n_full + S n_swa (:func:`_byte_weighted_split`); an all-SWA
      model keeps T as its SWA pool.
    """
    F, nf, S, ns = layout.full_layer_bytes, layout.num_full_layers, layout.swa_layer_bytes, layout.num_swa_layers
    page_size = flags.page_size
    era = rel.swa_split
    profile_cell = F * (nf + ns) if era == SwaSplit.LAYER_COUNT else F * nf + S * ns
    tokens, _ = apply_token_constraints(available_bytes // profile_cell, page_size, flags.max_total_tokens)
    if era == SwaSplit.LAYER_COUNT:
        full, swa = _layer_count_split(tokens, nf, ns, page_size, ratio, llama4_chunk_ratio)
    elif nf == 0:
        swa = round_to_page(tokens, page_size)
        return _swa_pools(rel, flags, swa, 0, swa)
    else:
        full, swa = _byte_weighted_split(rel, tokens, layout, page_size, ratio)
    return _swa_pools(rel, flags, full, full, swa)


def _layer_count_split(tokens: int, nf: int, ns: int, page_size: int, ratio: float,
                       llama4_chunk_ratio: float | None) -> tuple[int, int]:
    """(full, swa) <0.5.9 (model_runner.py ``set_num_token_hybrid`` @ v0.5.6 l.1526): T·L layer-tokens
    re-split by *layer count*, ``full = int(T L / (r n_swa + n_full))``, ``swa = int(full r)``, no page
    rounding. Llama 4 (``llama4_chunk_ratio`` = attention_chunk_size / context_len = t):
    ``swa = 4 T t // (3t+1)``, ``full = 4T − 12 T t // (3t+1)``, both page-rounded."""
    if llama4_chunk_ratio is not None:
        t = llama4_chunk_ratio
        swa = _align(4 * tokens * t // (3 * t + 1), page_size)
        full = _align(4 * tokens - 12 * tokens * t // (3 * t + 1), page_size)
        return full, swa
    full = int(tokens * (nf + ns) / (ratio * ns + nf))
    return full, int(full * ratio)


def _align(tokens: float, page_size: int) -> int:
    return int(tokens // page_size * page_size)


def _byte_weighted_split(rel: SGLangRelease, tokens: int, layout: SwaLayout, page_size: int,
                         ratio: float) -> tuple[int, int]:
    """(full, swa) 0.5.9-0.5.10: ``full = int(T (F nf + S ns) / (F nf + r S ns))`` page-rounded;
    ``swa = int(full r)`` page-rounded, from the *unrounded* full in 0.5.9 (mixin
    ``set_num_tokens_hybrid_swa`` @ v0.5.9 l.251), from the page-rounded full in 0.5.10 (mixin
    ``_resolve_hybrid_swa_tokens``)."""
    F, nf, S, ns = layout.full_layer_bytes, layout.num_full_layers, layout.swa_layer_bytes, layout.num_swa_layers
    total = tokens * (F * nf + S * ns)
    full_raw = int(total / (F * nf + ratio * S * ns))
    full = round_to_page(full_raw, page_size)
    swa_from = full if rel.swa_split == SwaSplit.MIXIN_ROUNDED else full_raw
    return full, round_to_page(int(swa_from * ratio), page_size)


def _swa_draft_layers(rel: SGLangRelease, layout: SwaLayout) -> int:
    """EAGLE/STANDALONE draft layers priced at the full-layer width (0.5.18+, ``eagle_draft_num_layers``;
    0.5.14 adds no draft share for hybrid SWA models). Banded MTP depths of Inkling and
    ``eagle_draft_swa_num_layers`` are not modelled."""
    return layout.draft_full_layers if rel.swa_draft_share else 0


def _configurator_swa_pools(rel: SGLangRelease, available_bytes: int, layout: SwaLayout, flags: PoolFlags,
                            ratio: float, sliding_window: int | None) -> SWAPools:
    """0.5.11+ (pool_configurator.py ``HybridSWAPoolConfigurator`` @ v0.5.13 l.196, @ v0.5.23 l.656):
    ``max_total = int(bytes // cell)`` (:func:`_swa_cell_bytes`), split by :func:`_solve_swa`; a
    ``--max-total-tokens`` cap re-solves from the capped value."""
    first = _solve_swa(rel, int(available_bytes // _swa_cell_bytes(rel, layout, ratio)), layout, flags, ratio,
                       sliding_window)
    max_total_tokens = flags.max_total_tokens
    if first.error is None and max_total_tokens is not None and max_total_tokens < first.max_total_num_tokens:
        return _solve_swa(rel, max_total_tokens, layout, flags, ratio, sliding_window)
    return first


def _swa_cell_bytes(rel: SGLangRelease, layout: SwaLayout, ratio: float) -> float:
    """Bytes per full-pool token: ``F (nf + d) + r S ns [+ draft]``; all-SWA ``S ns + F d``
    (d: :func:`_swa_draft_layers`; the 0.5.14 profile split's draft share as ``draft_bytes``)."""
    F, nf, S, ns = layout.full_layer_bytes, layout.num_full_layers, layout.swa_layer_bytes, layout.num_swa_layers
    d = _swa_draft_layers(rel, layout)
    if nf == 0:
        return S * ns + F * d
    return (F * (nf + d)  # full layers and the draft at the full width
            + ratio * S * ns  # r SWA tokens per full token
            + layout.draft_bytes)


def _solve_swa(rel: SGLangRelease, max_total: int, layout: SwaLayout, flags: PoolFlags, ratio: float,
               sliding_window: int | None) -> SWAPools:
    """``full = max_total // page · page``; ``swa = int(full r) // page · page``; all-SWA models:
    ``swa = max_total // page · page``. From 0.5.18 (inline; a method @ v0.5.23) ``validate_swa_pool_size``
    raises when ``sliding_window + page >= swa``."""
    page_size = flags.page_size
    if layout.num_full_layers == 0:
        swa = round_to_page(max_total, page_size)
        return _swa_pools(rel, flags, swa, 0, swa)
    full = round_to_page(max_total, page_size)
    swa = round_to_page(int(full * ratio), page_size)
    if rel.validate_swa_pool_size and sliding_window is not None and sliding_window + page_size >= swa:
        return SWAPools(full, full, swa, (
            f"ValueError: SWA pool ({swa} tokens) cannot hold even one request: the prefill admission "
            f"floor is sliding_window_size ({sliding_window}) + page_size ({page_size}). Increase "
            f"--swa-full-tokens-ratio or the total KV budget."))
    return _swa_pools(rel, flags, full, full, swa)


def _swa_request_cap_pools(rel: SGLangRelease, available_bytes: int, layout: SwaLayout, flags: PoolFlags,
                           sliding_window: int, swa_eviction_interval: int) -> SWAPools:
    """0.5.14+ (``SWAChunkCapPoolConfigurator`` @ v0.5.14 l.339 / @ v0.5.18 l.598,
    ``SWARequestCapPoolConfigurator`` @ v0.5.23 l.924): the SWA pool is :func:`_swa_request_cap_tokens`,
    the rest of the budget goes to the full pool: ``full = int((bytes − swa S ns) // (F (nf + d))) // page · page``
    (RuntimeError when <= 0); a cap re-solve keeps swa ``min(swa, T)``. Overlap schedule on, not a PD
    decode node."""
    F, nf, S, ns = layout.full_layer_bytes, layout.num_full_layers, layout.swa_layer_bytes, layout.num_swa_layers
    page_size, max_total_tokens = flags.page_size, flags.max_total_tokens
    swa = _swa_request_cap_tokens(rel, flags, sliding_window, swa_eviction_interval)
    fixed = swa * S * ns
    full = int((available_bytes - fixed) // (F * (nf + _swa_draft_layers(rel, layout)))) // page_size * page_size
    if full <= 0:
        return SWAPools(full, full, swa, (
            f"RuntimeError: SWA pool cap ({swa} tokens, {fixed / (1 << 30):.2f} GiB) leaves no room for the "
            f"full KV pool within the available {available_bytes / (1 << 30):.2f} GiB. Reduce "
            f"--max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static."))
    if max_total_tokens is not None and max_total_tokens < full:
        capped_full = round_to_page(max_total_tokens, page_size)
        return _swa_pools(rel, flags, capped_full, capped_full, min(swa, max_total_tokens))
    return SWAPools(full, full, swa)


def _swa_request_cap_tokens(rel: SGLangRelease, flags: PoolFlags, sliding_window: int,
                            swa_eviction_interval: int) -> int:
    """``compute_swa_request_cap`` (@ v0.5.23): the worst case of the running requests,
    ``cap = (window + eviction_interval · D + page + decode) · (running // dp) + 2 · chunk + page``
    with D = draft tokens (1 without speculative decoding), ``running // dp`` ``max(1, …)`` and
    ``chunk > 0`` required after 0.5.20; ``swa = ceil(cap / page) · page``."""
    x = flags
    page_size = x.page_size
    running = _attn_dp_requested(rel, x.max_running_requests, x.attn_dp_size)
    per_request = (sliding_window
                   + swa_eviction_interval * (x.num_draft_tokens or 1)  # SGLANG_SWA_EVICTION_INTERVAL · D
                   + page_size
                   + _swa_decode_tokens(rel, x))
    cap = per_request * running + 2 * x.chunked_prefill_size + page_size
    return -(-cap // page_size) * page_size


def _swa_decode_tokens(rel: SGLangRelease, flags: PoolFlags) -> int:
    """The decode allowance per request in the SWA cap: the page, or ``2 · alloc_len_per_decode`` with
    speculative decoding (overlap schedule)."""
    algo = (flags.speculative_algorithm or "").upper()
    if not algo:
        return flags.page_size
    return 2 * _alloc_len_per_decode(rel, algo, num_steps=flags.num_steps, topk=flags.topk,
                                     num_draft_tokens=flags.num_draft_tokens, page_size=flags.page_size)


def _swa_request_cap_applies(rel: SGLangRelease, nf: int, sliding_window: int | None, disable_radix_cache: bool,
                             max_running_requests: int | None, chunked_prefill_size: int | None) -> bool:
    """``SWAChunkCapPoolConfigurator.is_applicable`` (@ v0.5.14/0.5.18) / ``SWARequestCapPoolConfigurator``
    (@ v0.5.23: also needs ``chunked_prefill_size > 0``)."""
    if not rel.swa_request_cap or max_running_requests is None or not disable_radix_cache:
        return False
    if chunked_prefill_size is None or (rel.swa_request_cap_needs_chunk and chunked_prefill_size <= 0):
        return False
    return sliding_window is not None and nf > 0


def _attn_dp_requested(rel: SGLangRelease, max_running_requests: int, attn_dp_size: int) -> int:
    """``max_running_requests // attn_dp_size``; clamped to >= 1 after 0.5.20
    (``max(1, ...)`` in kv_cache_configurator.py ``resolve_max_num_reqs`` @ v0.5.23; absent @ v0.5.20)."""
    n = max_running_requests // attn_dp_size
    return max(1, n) if rel.running_per_dp_at_least_one else n


def max_num_reqs(rel: SGLangRelease, *, token_capacity: int, profiled_tokens: int, context_len: int,
                 max_running_requests: int | None, attn_dp_size: int, mamba_cap: int | None = None) -> tuple[int, int]:
    """(``ReqToTokenPool.size``, ``max_running_requests`` per DP worker).

    ``token_capacity`` is the final pool size (after the classic speculative headroom, the user cap
    and page rounding); ``profiled_tokens`` the profile's value before them.

    * <0.5.10 (model_runner.py ``init_memory_pool`` @ v0.4.6.post5 / @ v0.5.6, mixin @ v0.5.9):
      pool = user value, else ``min(max(int(profiled / context_len * 512), 2048), 4096)``;
      running = ``min(T // 2 if user is None else user // attn_dp, pool size)``
      (tp_worker.py @ v0.4.6.post5 l.119 / @ v0.5.6 l.289, model_runner.py @ v0.5.9 l.593).
      v0.4.6 builds ``ReqToTokenPool(size=max_num_reqs + 1)`` — hence logs printing 2049; v0.4.7+
      passes ``max_num_reqs`` (model_runner.py @ v0.4.7 l.926, conformance-run on 0.4.8.post1).
    * 0.5.10-0.5.13 (mixin ``_resolve_max_num_reqs`` @ v0.5.13 l.876), on the final capacity:
      estimated = ``max(min(int(T / context_len * 512), 4096), 2048)``;
      user → ``min(user // attn_dp, estimated)``, else ``min(estimated, T // 2)``; running = pool.
    * 0.5.14+ (mixin @ v0.5.14 l.981; kv_cache_configurator.py ``resolve_max_num_reqs`` @ v0.5.18
      l.1873, @ v0.5.23 l.3119): user → ``min(user // attn_dp, T // 2)`` (``max(1, …)`` after 0.5.20).
    Then the mamba cap ``max_mamba_cache_size // ratio`` (given as ``mamba_cap``).
    """
    if rel.reqs_from_final_tokens:
        estimated = int(token_capacity / context_len * 512)
        estimated = max(min(estimated, 4096), 2048)
        if max_running_requests is not None:
            cap = token_capacity // 2 if rel.user_reqs_capped_by_half_tokens else estimated
            n = min(_attn_dp_requested(rel, max_running_requests, attn_dp_size), cap)
        else:
            n = min(estimated, token_capacity // 2)
        if mamba_cap is not None:
            n = min(n, mamba_cap)
        return n, n
    pool = max_running_requests if max_running_requests is not None else min(
        max(int(profiled_tokens / context_len * 512), 2048), 4096)
    if mamba_cap is not None:
        pool = min(pool, mamba_cap)
    if rel.req_pool_size_plus_one:
        pool += 1  # ReqToTokenPool(size=max_num_reqs + 1)
    running = token_capacity // 2 if max_running_requests is None else max_running_requests // attn_dp_size
    return pool, min(running, pool)


def classic_spec_headroom_tokens(rel: SGLangRelease, speculative_algorithm: str | None, max_num_reqs_: int, *,
                                 num_steps: int, topk: int, num_draft_tokens: int) -> int:
    """Tokens the target adds to the shared KV pool for EAGLE/STANDALONE drafts before 0.5.9
    (``draft_runner_cache_size``, model_runner.py ``init_memory_pool`` @ v0.4.6.post5 l.866,
    @ v0.5.6): ``max_num_reqs * steps * topk + max_num_reqs * draft_tokens + 100``, added to the
    profiled tokens *before* the ``--max-total-tokens`` cap and page rounding. v0.4.6 does it for
    every algorithm it has (EAGLE, EAGLE3); v0.5.6 for ``is_eagle() or is_standalone()`` (not NGRAM).
    Gone in v0.5.9 (the draft reuses the target's count)."""
    algo = (speculative_algorithm or "").upper()
    if not rel.classic_draft_headroom or algo in ("", "NGRAM"):
        return 0
    return max_num_reqs_ * num_steps * topk + max_num_reqs_ * num_draft_tokens + 100


def _alloc_len_per_decode(rel: SGLangRelease, algo: str, *, num_steps: int | None, topk: int | None,
                          num_draft_tokens: int | None, page_size: int) -> int:
    """``get_alloc_len_per_decode`` (mem_cache/common.py @ v0.5.13/0.5.14; allocation_sizing.py @ v0.5.18+)."""
    steps = num_steps or 1
    k = topk or 1
    tokens = num_draft_tokens or 0  # set whenever an algorithm is (server_args resolves it)
    draft_kv = algo != "NGRAM" or not rel.ngram_has_no_draft_kv  # has_draft_kv()
    if page_size == 1 or k == 1 or not draft_kv:
        return max(steps * k, tokens)
    pages_per_topk = ((page_size - 1) + steps + page_size - 1) // page_size
    return max(pages_per_topk * page_size * k, tokens)


def req_to_token_extra_context_len(rel: SGLangRelease, *, speculative_algorithm: str | None = None,
                                   num_draft_tokens: int | None = None, num_steps: int | None = None,
                                   topk: int | None = None, page_size: int = 1) -> int:
    """Row headroom of ``req_to_token`` beyond ``context_len``.

    * <0.5.0: 4 (model_runner.py @ v0.4.6.post5 l.905).
    * 0.5.0-0.5.12: ``4 + speculative_num_draft_tokens`` (model_runner.py @ v0.5.6, mixin @ v0.5.9..0.5.12).
    * 0.5.13-0.5.17 (``get_req_to_token_extra_context_len``, mem_cache/common.py @ v0.5.13/0.5.14):
      with a speculative algorithm, page > 1 and topk > 1: ``max(extra, 2 * alloc_len_per_decode)``.
    * 0.5.18+ (mem_cache/allocation_sizing.py @ v0.5.18/0.5.23): with a speculative algorithm and
      page > 1: ``max(extra, 2 * alloc_len_per_decode + page - 1)``.
    """
    era = rel.req_row_extra
    if era == ReqRowExtra.FOUR:
        return 4
    extra = 4 + (num_draft_tokens or 0)
    algo = (speculative_algorithm or "").upper()
    if not algo or era == ReqRowExtra.DRAFT_TOKENS:
        return extra
    if era == ReqRowExtra.PAGED:
        if page_size > 1:
            extra = max(extra, 2 * _alloc_len_per_decode(rel, algo, num_steps=num_steps, topk=topk,
                                                         num_draft_tokens=num_draft_tokens, page_size=page_size)
                        + page_size - 1)
        return extra
    if page_size > 1 and (topk or 1) > 1:
        extra = max(extra, 2 * _alloc_len_per_decode(rel, algo, num_steps=num_steps, topk=topk,
                                                     num_draft_tokens=num_draft_tokens, page_size=page_size))
    return extra


def req_to_token_rows(rel: SGLangRelease, pool_size: int) -> int:
    """Rows of the int32 table: ``size + 1`` (padding row 0) from v0.5.12 (mem_cache/memory_pool.py
    ``ReqToTokenPool.__init__`` @ v0.5.12 l.145, @ v0.5.23 l.402); ``size`` before (v0.4.6 passes
    ``max_num_reqs + 1`` as the size)."""
    return pool_size + 1 if rel.req_to_token_padding_row else pool_size


def req_to_token_bytes(rel: SGLangRelease, pool_size: int, context_len: int, draft_tokens: int = 0, *,
                       extra_context_len: int | None = None) -> int:
    """``ReqToTokenPool``: int32 [rows x (context_len + extra)]. ``extra`` defaults to
    :func:`req_to_token_extra_context_len` with ``draft_tokens`` and no page/topk rule."""
    if extra_context_len is None:
        extra_context_len = req_to_token_extra_context_len(rel, speculative_algorithm="EAGLE" if draft_tokens else None,
                                                           num_draft_tokens=draft_tokens or None)
    return req_to_token_rows(rel, pool_size) * (context_len + extra_context_len) * 4


@dataclass(frozen=True)
class RequestPools:
    """What follows the profile: the final token pool, the request pool and the request limit."""

    max_total_num_tokens: int | None
    req_pool_size: int | None  # ReqToTokenPool.size
    req_rows: int | None
    req_row_len: int | None  # context_len + extra
    req_to_token_bytes: int | None
    max_running_requests: int | None  # per DP worker
    spec_headroom_tokens: int = 0  # classic (<0.5.9) draft_runner_cache_size headroom
    capped_by_user: bool = False
    error: str | None = None
    state_cache_too_small: bool = False  # the error is the hybrid state cache's (>=0.5.13), not the KV pool's


def request_pools(rel: SGLangRelease, profiled_tokens: int, context_len: int, flags: PoolFlags, *,
                  max_mamba_cache_size: int | None = None, sized_tokens: int | None = None) -> RequestPools:
    """The pool sizing after the profile, in the engine's order (PP: the smallest stage's tokens).

    Classic (<0.5.10, ``init_memory_pool``): request estimate from the profiled T → speculative
    headroom (<0.5.9) → ``--max-total-tokens`` cap → page rounding → RuntimeError if <= 0 →
    ``ReqToTokenPool`` → ``max_running_requests``. Current (>=0.5.10, ``_resolve_memory_pool_config``):
    page rounding → cap → re-round (RuntimeError from ``MemoryPoolConfig`` if <= 0) →
    ``resolve_max_num_reqs`` on the final T → ``ReqToTokenPool``.

    Mamba-ish models: ``max_mamba_cache_size`` (the carve's result, per DP worker) caps the requests
    (:func:`mamba_request_cap`); from 0.5.13 ``_resolve_max_num_reqs`` raises when the result is <= 0.

    ``sized_tokens``: the final T when a configurator of its own sized the token pool (hybrid SWA,
    DeepSeek-V4); the request steps run on it (``capped_by_user`` still reports the generic cap).
    """
    x = flags
    page_size, max_running_requests = x.page_size, x.max_running_requests
    speculative_algorithm = x.speculative_algorithm
    mamba_cap = mamba_request_cap(rel, max_mamba_cache_size, disable_radix_cache=x.disable_radix_cache,
                                  speculative_algorithm=speculative_algorithm, attn_dp_size=x.attn_dp_size,
                                  max_running_requests=max_running_requests)
    tokens = profiled_tokens
    headroom = 0
    if not rel.reqs_from_final_tokens:
        pool_reqs = max_running_requests if max_running_requests is not None else min(
            max(int(profiled_tokens / context_len * 512), 2048), 4096)
        if mamba_cap is not None:
            pool_reqs = min(pool_reqs, mamba_cap)
        if speculative_algorithm:
            headroom = classic_spec_headroom_tokens(rel, speculative_algorithm, pool_reqs, num_steps=x.num_steps or 0,
                                                    topk=x.topk or 0, num_draft_tokens=x.num_draft_tokens or 0)
        tokens += headroom
    tokens, capped = apply_token_constraints(round_to_page(tokens, page_size) if rel.reqs_from_final_tokens else tokens,
                                             page_size, x.max_total_tokens)
    if sized_tokens is not None:
        tokens = sized_tokens
    if tokens <= 0:
        return RequestPools(None, None, None, None, None, None, headroom, capped,
                            runtime_error_text(rel, x.mem_fraction_static))
    pool, running = max_num_reqs(rel, token_capacity=tokens, profiled_tokens=profiled_tokens, context_len=context_len,
                                 max_running_requests=max_running_requests, attn_dp_size=x.attn_dp_size,
                                 mamba_cap=mamba_cap)
    if max_mamba_cache_size is not None and rel.mamba_state_too_small_error and pool <= 0:
        return RequestPools(tokens, None, None, None, None, None, headroom, capped, (
            f"RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={max_mamba_cache_size}, mamba_ratio={mamba_request_ratio(x.disable_radix_cache)}, "
            f"resulting max_num_reqs={pool}. Try: (1) reduce --max-running-requests, (2) increase "
            f"--mem-fraction-static, or (3) use GPUs with more memory."), state_cache_too_small=True)
    extra = req_to_token_extra_context_len(rel, speculative_algorithm=speculative_algorithm,
                                           num_draft_tokens=x.num_draft_tokens, num_steps=x.num_steps, topk=x.topk,
                                           page_size=page_size)
    rows = req_to_token_rows(rel, pool)
    return RequestPools(tokens, pool, rows, context_len + extra, rows * (context_len + extra) * 4, running,
                        headroom, capped)


def mamba_request_cap(rel: SGLangRelease, max_mamba_cache_size: int | None, *, disable_radix_cache: bool,
                      speculative_algorithm: str | None, attn_dp_size: int,
                      max_running_requests: int | None) -> int | None:
    """The requests the mamba state pool admits: ``size // ratio`` (:func:`mamba_request_ratio`;
    model_runner.py @ v0.5.6), in 0.5.9 also ``<= running // dp`` with speculative decoding and DP
    attention (mixin @ v0.5.9 l.355). None: no state pool (or no mamba pool in the release)."""
    if max_mamba_cache_size is None or not rel.mamba_request_cap:
        return None
    cap = max_mamba_cache_size // mamba_request_ratio(disable_radix_cache)
    if rel.mamba_cap_running_per_dp and speculative_algorithm and attn_dp_size > 1:
        cap = min(cap, max_running_requests // attn_dp_size)
    return cap


def kv_buffer_bytes(tokens: int, page_size: int, per_token_bytes: int) -> int:
    """KV buffers hold ``size + page_size`` rows (one padded page): real bytes allocated."""
    return (tokens + page_size) * per_token_bytes


# c10/cuda/CUDACachingAllocator.cpp: kMinLargeAlloc = 10 MiB, kRoundLarge = 2 MiB. A request of at
# least 10 MiB gets its own segment rounded up to 2 MiB; what torch.cuda.mem_get_info sees.
TORCH_MIN_LARGE_ALLOC = 10 << 20
TORCH_ROUND_LARGE = 2 << 20


def torch_segment_bytes(nbytes: int) -> int:
    """Device bytes the caching allocator reserves for one large tensor (>= 10 MiB): rounded up to
    2 MiB. Smaller tensors share 2 / 20 MiB segments and are returned unchanged here."""
    if nbytes < TORCH_MIN_LARGE_ALLOC:
        return nbytes
    return -(-nbytes // TORCH_ROUND_LARGE) * TORCH_ROUND_LARGE


def kv_buffers_reserved_bytes(tokens: int, page_size: int, per_token_bytes: int, num_buffers: int) -> int:
    """Reserved device bytes of ``num_buffers`` equal per-layer KV buffers (MHA: K and V per layer,
    MLA: one per layer), each ``(tokens + page) x per_token_bytes / num_buffers`` rounded by the
    allocator. The printed K/V sizes are the unrounded ``kv_buffer_bytes``; "Memory pool end. avail
    mem" drops by the rounded figure (about num_buffers x 1 MiB more)."""
    if num_buffers <= 0 or per_token_bytes % num_buffers:
        return kv_buffer_bytes(tokens, page_size, per_token_bytes)
    one = kv_buffer_bytes(tokens, page_size, per_token_bytes // num_buffers)
    return torch_segment_bytes(one) * num_buffers
