"""SGLang's version-aware defaults: mem_fraction_static, chunked_prefill_size, CUDA-graph max bs.

Mirrors ``ServerArgs.__post_init__`` (<= 0.5.2), ``ServerArgs._handle_gpu_memory_settings``
(python/sglang/srt/server_args.py, 0.5.3-0.5.18) and ``arg_groups/memory_hook.py::handle_gpu_memory_settings``
(0.5.19+). Conformance-run (tests/conformance) against 0.4.6.post5, 0.4.8.post1, 0.4.10.post2, 0.5.3,
0.5.4, 0.5.5, 0.5.6, 0.5.7, 0.5.8.post1, 0.5.9, 0.5.10, 0.5.12, 0.5.13, 0.5.14, 0.5.15, 0.5.18,
0.5.20, 0.5.21, 0.5.22, 0.5.23; boundaries between them read from 0.4.7, 0.4.8, 0.4.9, 0.5.1, 0.5.2,
0.5.8, 0.5.11, 0.5.16, 0.5.17. Eras:

* ``< 0.4.8``    fixed table by tp*pp (0.79..0.88), large-GPU bump (server_args.py @ v0.4.6.post5, 0.4.7).
* ``0.4.8-0.5.2`` reserved GiB per GPU bucket, +2 GiB speculative, +4 GiB DP attention; chunk
  2048/8192/16384; multimodal x0.90 (0.4.9), ``adjust_mem_fraction_for_vlm`` (0.4.10+)
  (server_args.py @ v0.4.8, v0.4.10.post2, v0.5.2).
* ``0.5.3-0.5.9``  ``512 + chunk*1.5 + max_bs*2 + tp*pp/8*1024`` MiB, DP terms, 10 GiB floor above
  60 GiB, +2 GiB (EAGLE) / +6 GiB (STANDALONE); opt-in piecewise graph from 0.5.4 (reserve: none
  0.5.4-0.5.5, ``4096 // 4`` 0.5.6, ``chunk // 8`` 0.5.7, ``8 * len(tokens)`` 0.5.8+).
* ``0.5.10-0.5.13`` piecewise graph on by default (MLA: flat 1.5 GiB), speculative +4 GiB / +6 GiB.
* ``0.5.14-``     speculative reserve removed (the draft is budgeted in the profile); DeepEP +2 GiB
  from 0.5.15, prefill graph + DeepEP +1 GiB from 0.5.17.
* ``0.5.20-``     35 GiB bucket becomes 4096 / 48|160; fallback without a GPU size 0.95;
  defaulted max_bs clamped to ``--max-running-requests`` from 0.5.22; MLA prefill-graph max_bs
  ``min(8192, chunk)`` from 0.5.23.
"""

from __future__ import annotations

from dataclasses import dataclass

from .release import (DefaultsLadder, PiecewiseReserve, PrefillGraph, PrefillGraphMaxTokens, PrefillGraphSizes,
                      SGLangRelease, VlmFraction)


@dataclass(frozen=True)
class SGLangArgs:
    """The subset of ``ServerArgs`` that sizing depends on (user values; None = engine default)."""

    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    mem_fraction_static: float | None = None
    context_length: int | None = None
    kv_cache_dtype: str = "auto"
    page_size: int | None = None
    attention_backend: str | None = None  # --attention-backend (None: SGLang picks, see backend.py)
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    disable_piecewise_cuda_graph: bool = False  # 0.5.10+: --disable-piecewise-cuda-graph
    enable_piecewise_cuda_graph: bool = False  # 0.5.3-0.5.9: --enable-piecewise-cuda-graph
    speculative_algorithm: str | None = None  # EAGLE | EAGLE3 | NEXTN | STANDALONE | NGRAM
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    moe_a2a_backend: str = "none"  # "deepep" adds DeepEP reserve
    disable_radix_cache: bool = False
    language_only: bool = False

    @property
    def attn_dp_size(self) -> int:
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def attn_tp_size(self) -> int:
        return self.tp_size // self.attn_dp_size


@dataclass(frozen=True)
class ResolvedDefaults:
    """The defaults SGLang resolves for the layout: chunk, decode max bs, the fraction and its source."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    mem_fraction_static: float
    mem_fraction_static_source: str  # "user" | "default"
    reserved_mem_mib: float | None  # the default formula's reserve (None when the user set the fraction)
    prefill_graph_tokens: int  # entries in the prefill / piecewise graph capture list (0: disabled)
    vlm_factor: float | None  # multiplier applied for multimodal models (None: not applied)


def gpu_bucket_defaults(rel: SGLangRelease, gpu_mem_mib: float | None, tp_size: int) -> tuple[int, int | None]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU capacity (MiB) — the if/elif ladder of
    ``_handle_gpu_memory_settings`` (server_args.py @ v0.5.9) / ``memory_hook.py @ v0.5.23``.
    Before 0.4.10 (server_args.py @ v0.4.6.post5 l.271-305): chunk 2048 below 25,000 MiB else 8192;
    max_bs 8 (tp<4) / 80 below 25,000 MiB, else left None (the graph runner's own default)."""
    small = tp_size < 4
    if rel.defaults_ladder == DefaultsLadder.FIXED_TABLE:
        low = gpu_mem_mib is not None and gpu_mem_mib < 25_000
        return (2048 if low else 8192), ((8 if small else 80) if low else None)
    if rel.defaults_ladder == DefaultsLadder.RESERVED_BUCKETS:
        # server_args.py @ v0.4.8 l.318-338 (same in 0.4.8.post1, 0.4.9, 0.4.10.post2 l.362-380):
        # chunk 2048 / 8192 / 16384 at 35 and 160 GiB (4096 unknown GPU); max_bs 8|80 below 35 GiB only.
        if gpu_mem_mib is None:
            return 4096, None
        if gpu_mem_mib < 35 * 1024:
            return 2048, 8 if small else 80
        return (8192 if gpu_mem_mib < 160 * 1024 else 16384), None
    if gpu_mem_mib is None:
        return 4096, 160
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        if rel.bucket_35gib_4096:  # 32 GB Blackwell holds bs 48
            return 4096, 48 if small else 160
        return 2048, (24 if rel.small_gpu_max_bs_24 else 16) if small else 80
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if small else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if small else 512
    return 16384, 512


def capture_token_sizes(max_tokens: int, start_576: bool = True) -> list[int]:
    """``_generate_piecewise_cuda_graph_tokens`` (server_args.py @ v0.5.9) =
    ``generate_prefill_cuda_graph_batch_sizes`` (arg_groups/cuda_graph_hook.py @ v0.5.23).
    ``start_576=False``: server_args.py @ v0.5.8 / 0.5.8.post1, whose 64-step run starts at 640."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576 if start_576 else 640, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def _prefill_graph_tokens(rel: SGLangRelease, a: SGLangArgs, chunk: int, is_mla: bool, is_multimodal: bool,
                          is_amd: bool) -> int:
    """Entries of the prefill (piecewise) graph capture list; 0 when that graph is off.

    Eras (server_args.py / memory_hook.py of each release, conformance-pinned):
    * ``< 0.5.4``  no piecewise graph (v0.5.3 has no ``piecewise_cuda_graph_tokens``).
    * ``0.5.4-0.5.6``  opt-in, max tokens 4096 (field default), generator 640..4096/128, 4352../256.
    * ``0.5.7``  max tokens = chunked_prefill_size, same generator.
    * ``0.5.8-``  MLA 2048 else chunk, generator of :func:`capture_token_sizes`.
    * ``0.5.10-``  on by default; ``--max-total-tokens`` clamp; ``0.5.13-0.5.17`` context clamp.
    * ``0.5.23``  MLA ``min(8192, chunk)`` (memory_hook.py @ v0.5.23 l.238; 2048 in 0.5.22).
    """
    if not _prefill_graph_enabled(rel, a, is_multimodal, is_amd):
        return 0
    era = rel.prefill_graph_max_tokens
    if era == PrefillGraphMaxTokens.FIELD_4096:
        max_tokens = 4096
    elif era == PrefillGraphMaxTokens.CHUNK or not is_mla:
        max_tokens = chunk
    else:
        max_tokens = min(8192, chunk) if era == PrefillGraphMaxTokens.MLA_8192 else 2048
    if rel.prefill_graph_sizes == PrefillGraphSizes.STEP_128:
        # _generate_piecewise_cuda_graph_tokens @ v0.5.6 / v0.5.7
        sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                 + list(range(640, 4096 + 1, 128)) + list(range(4352, max_tokens + 1, 256)))
        return len([s for s in sizes if s <= max_tokens])
    if a.max_total_tokens is not None and rel.prefill_graph_total_tokens_clamp:
        max_tokens = min(max_tokens, a.max_total_tokens)
    if a.context_length is not None and rel.prefill_graph_context_clamp:
        max_tokens = min(max_tokens, a.context_length)
    return len(capture_token_sizes(max_tokens, start_576=rel.prefill_graph_sizes == PrefillGraphSizes.START_576))


def _prefill_graph_enabled(rel: SGLangRelease, a: SGLangArgs, is_multimodal: bool, is_amd: bool) -> bool:
    """Whether the prefill (piecewise) CUDA graph is captured (see ``release.PrefillGraph``)."""
    if rel.prefill_graph == PrefillGraph.NONE:
        return False
    if rel.prefill_graph == PrefillGraph.BREAKABLE:  # CUDA only, not with PP
        return not a.disable_piecewise_cuda_graph and not is_amd and a.pp_size == 1
    if rel.prefill_graph == PrefillGraph.AUTO:  # _handle_piecewise_cuda_graph: on unless auto-disabled
        return not (a.disable_piecewise_cuda_graph or a.enable_dp_attention or a.pp_size > 1 or is_amd
                    or a.moe_a2a_backend != "none" or is_multimodal)
    return a.enable_piecewise_cuda_graph


def vlm_factor(vit_num_layers: int, vit_hidden_size: int) -> float:
    """``adjust_mem_fraction_for_vlm`` (server_args.py @ v0.5.9, memory_hook.py @ v0.5.23):
    0.95 x clip(1 - 0.1 (L h^2 / (24 * 1024^2) - 1), 0.8, 1.05)."""
    ratio = vit_num_layers * vit_hidden_size ** 2 / (24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def _legacy_fraction(rel: SGLangRelease, gpu_mem_mib: float | None, parallel_size: int, speculative: bool,
                     dp_attention: bool) -> float:
    """Before 0.4.8: fixed table (server_args.py @ v0.4.6.post5 l.246-268, unchanged in 0.4.7).
    0.4.8 up to the 0.5 formula: reserved MiB per GPU bucket, +2 GiB with any speculative algorithm,
    +4 GiB with DP attention, one rounding (server_args.py @ v0.4.8 l.285-315, 0.4.10.post2 l.310-351)."""
    if rel.defaults_ladder == DefaultsLadder.FIXED_TABLE:
        if gpu_mem_mib is None:
            return 0.88  # server_args.py @ v0.4.6.post5 l.247-261: unknown GPU -> 0.88 whatever tp*pp
        if gpu_mem_mib > 81920:
            mfs = 0.88
            if gpu_mem_mib > 96 * 1024:
                mfs = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mem_mib, (gpu_mem_mib - 18 * 1024) / gpu_mem_mib)
            return mfs
        for threshold, mfs in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
            if parallel_size >= threshold:
                return mfs
        return 0.88
    if gpu_mem_mib is None:
        return 0.88
    if gpu_mem_mib < 35 * 1024:
        reserved_mem = (2.8 + parallel_size / 10) * 1024
    elif gpu_mem_mib < 90 * 1024:
        reserved_mem = (9.5 + parallel_size / 2) * 1024
    elif gpu_mem_mib < 160 * 1024:
        reserved_mem = (12 + parallel_size / 2) * 1024
    else:
        reserved_mem = 32 * 1024
    if speculative:
        reserved_mem += 2 * 1024
    if dp_attention:
        reserved_mem += 4 * 1024
    return round((gpu_mem_mib - reserved_mem) / gpu_mem_mib, 3)


def resolve_defaults(rel: SGLangRelease, a: SGLangArgs, gpu_mem_mib: float | None, *,
                     is_mla: bool = False, is_multimodal: bool = False, vit_num_layers: int = 24,
                     vit_hidden_size: int = 1024, is_amd: bool = False) -> ResolvedDefaults:
    """chunked_prefill_size, decode cuda_graph_max_bs and mem_fraction_static as SGLang resolves them."""
    chunk_d, bs_d = gpu_bucket_defaults(rel, gpu_mem_mib, a.tp_size)
    chunk = a.chunked_prefill_size if a.chunked_prefill_size is not None else chunk_d
    max_bs_default = a.cuda_graph_max_bs is None
    max_bs = a.cuda_graph_max_bs if a.cuda_graph_max_bs is not None else bs_d
    if (rel.max_bs_clamped_to_running and max_bs_default and a.max_running_requests is not None
            and max_bs > a.max_running_requests):
        max_bs = a.max_running_requests  # clamp a defaulted max_bs
    prefill_tokens = _prefill_graph_tokens(rel, a, chunk, is_mla, is_multimodal, is_amd)
    if a.mem_fraction_static is not None:
        return ResolvedDefaults(chunk, max_bs, a.mem_fraction_static, "user", None, prefill_tokens, None)
    spec = (a.speculative_algorithm or "").upper() or None
    if rel.defaults_ladder != DefaultsLadder.RESERVE_FORMULA:
        mfs = _legacy_fraction(rel, gpu_mem_mib, a.tp_size * a.pp_size, spec is not None, a.enable_dp_attention)
        factor = None
        if is_multimodal and rel.vlm_fraction == VlmFraction.ADJUST:
            factor = vlm_factor(vit_num_layers, vit_hidden_size)
            mfs = mfs * factor
        elif is_multimodal and rel.vlm_fraction == VlmFraction.FLAT_090:
            factor = 0.90
            mfs = mfs * factor
        return ResolvedDefaults(chunk, max_bs, mfs, "default", None, prefill_tokens, factor)
    reserved = _reserve_mib(rel, a, chunk, max_bs, prefill_tokens, gpu_mem_mib, is_mla, spec)
    fallback = 0.95 if rel.fallback_fraction_095 else 0.88
    mfs = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3) if gpu_mem_mib is not None else fallback
    factor = None
    if is_multimodal and not a.language_only:
        factor = vlm_factor(vit_num_layers, vit_hidden_size)
        mfs = mfs * factor  # not re-rounded
    return ResolvedDefaults(chunk, max_bs, mfs, "default", reserved, prefill_tokens, factor)


def _reserve_mib(rel: SGLangRelease, a: SGLangArgs, chunk: int, max_bs: int, prefill_tokens: int,
                 gpu_mem_mib: float | None, is_mla: bool, spec: str | None) -> float:
    """The default formula's reserve (MiB), 0.5.3+: ``512 + activation*1.5 + tp*pp/8*1024 + max_bs*2``
    [+ DP terms] [+ prefill graph] → 10 GiB floor above 60 GiB → DeepEP, speculative and the
    0.5.6/0.5.7 piecewise terms after the floor."""
    activation_tokens = max(chunk, 2048) if chunk > 0 else max(a.max_prefill_tokens, 2048)
    reserved = 512 + activation_tokens * 1.5
    reserved += a.tp_size * a.pp_size / 8 * 1024
    if not a.disable_cuda_graph:
        reserved += max_bs * 2
    if a.enable_dp_attention:
        reserved += max_bs * a.dp_size * 3
        if max_bs > 300:
            reserved += max_bs * a.dp_size * 1.5
    piecewise = rel.piecewise_reserve
    if prefill_tokens and piecewise == PiecewiseReserve.PER_ENTRY_8:
        if is_mla and rel.mla_prefill_graph_flat_reserve:
            reserved += 1.5 * 1024
        else:
            reserved += prefill_tokens * 8
        if rel.deepep_prefill_graph_reserve and a.moe_a2a_backend == "deepep":
            reserved += 1024  # reserve_for_graph_mb: breakable prefill graph + DeepEP
    if gpu_mem_mib is not None and gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if rel.deepep_reserve and a.moe_a2a_backend == "deepep" and not a.disable_cuda_graph:
        reserved += 2 * 1024
    if spec and not rel.draft_in_budget:
        if spec == "STANDALONE":
            reserved += 6 * 1024
        elif spec != "NGRAM":
            reserved += (4 if rel.speculative_reserve_4gib else 2) * 1024
    if prefill_tokens and piecewise == PiecewiseReserve.CHUNK_EIGHTH:
        reserved += chunk // 8  # piecewise_cuda_graph_max_tokens (= chunk) // 8
    elif prefill_tokens and piecewise == PiecewiseReserve.QUARTER_4096:
        reserved += 4096 // 4  # piecewise_cuda_graph_max_tokens // 4
    return reserved
