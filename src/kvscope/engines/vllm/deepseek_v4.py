"""DeepSeek-V4 (``DeepseekV4ForCausalLM``) KV cache layout in vLLM 0.33.0.

A V4 decoder layer registers up to five cache "layers", each with its own ``get_kv_cache_spec``
(vllm/models/deepseek_v4/attention.py, compressor.py and vllm/v1/attention/backends/mla/sparse_swa.py
@ v0.33.0), in this construction order:

* C4 layers (``compress_ratio == 4``): ``indexer.k_cache`` (``DeepseekV4IndexerCache``:
  ``MLAAttentionSpec``, 128 fp8 + 4 fp32-scale bytes per compressed row, ``tokens_per_state=4``),
  ``indexer.compressor.state_cache`` (``CompressorStateCache``: ``SlidingWindowMLASpec``, fp32
  state of ``2*coff*index_head_dim`` values, block 4, window ``coff*ratio`` = 8);
* every layer: ``swa_cache`` (``DeepseekV4SWACache``: ``SlidingWindowMLASpec``, block 64,
  window ``sliding_window``, 584 bytes per token with ``fp8_ds_mla``);
* C4 / C128 layers: ``attn`` (``DeepseekV4Attention``: ``MLAAttentionSpec``, 584 bytes per
  compressed row, ``tokens_per_state = ratio``) and ``compressor.state_cache`` (block 4 for C4,
  8 for C128; window 8 / 128; ``2*coff*head_dim`` fp32 values per state);
* MTP / DSpark draft layers (layer id >= ``num_hidden_layers``): the SWA cache only.

Every page is ``num_states * state_bytes`` rounded up to the spec's ``alignment`` (576 B with the
``fp8_ds_mla`` layout, 512 B for plain rows; ``_apply_alignment_padding`` in
vllm/v1/kv_cache_interface.py @ v0.33.0). The indexer backend declares block-outermost KV layouts
only (``DeepseekV4IndexerBackend.supported_kv_cache_layouts`` = BLHNC, BLNHC in
vllm/v1/attention/backends/mla/indexer.py), so ``resolve_kv_cache_layout`` picks BLHNC and
``get_kv_cache_groups`` takes ``_get_packed_kv_cache_groups`` (vllm/v1/core/kv_cache_planning.py
@ v0.33.0): layers are bucketed by uniform type (same block size and window), balanced buckets are
split into groups of ``repeats_per_group`` pattern repeats (``_approximate_gcd``), and one block
packs every group's pages side by side: ``bytes_per_block = max(sum of a group's pages)`` rounded
to the block-stride alignments (``_get_kv_cache_bytes_per_block``). For the bundled
DeepSeek-V4-Flash (43 layers: 2 SWA-only, 21 C4, 20 C128) this is the "5-group hybrid" layout:
two SWA groups (block 64), one compressed-MLA + indexer group (block 256), the C4 compressor-state
group (block 4) and the C128 compressor-state group (block 8).

Capacity then follows the generic planner unchanged: ``num_blocks = available // bytes_per_block``,
``blocks per request = sum over groups of cdiv(max_memory_usage, page)`` (compressed MLA:
``cdiv(max_model_len, block_size)``; sliding groups: ``cdiv(min(W - 1 + max_in_flight_tokens,
max_model_len), block) + 1``), ``tokens = int(num_blocks / blocks_per_request * max_model_len)``.

Not modelled here: DCP, HiSparse, the MXFP4 indexer cache (``indexer_kv_dtype=mxfp4``), the
``nvfp4_ds_mla`` format, DeepSeek-V4.1, and backends with other per-kernel block alignments than
the NVIDIA FlashMLA / FlashInfer sparse ones read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ...errors import FlagError
from ...model.spec import ModelSpec
from . import kv_cache as kvc

# the release whose code this module reads (kv_cache_planning.py, deepseek_v4 backends @ v0.33.0)
MODELLED_RELEASE = "0.33.0"
# DeepseekV4SWACache defaults (sparse_swa.py @ v0.33.0): block 64, 584 packed bytes per token
# (448 NoPE fp8 + 128 RoPE bf16 + 8 ue8m0 scales), page aligned to 576 B.
SWA_BLOCK_SIZE = 64
FP8_DS_MLA_STATE_BYTES = 584
FP8_DS_MLA_ALIGNMENT = 576
PLAIN_ROW_ALIGNMENT = 512  # "512B for FlashInfer sparse (#44577)"
# CompressorStateCache block sizes (compressor.py @ v0.33.0): C4 -> 4, C128 -> 8.
COMPRESSOR_BLOCK_SIZE = {4: 4, 128: 8}
# DeepseekV4IndexerBackend / DeepseekV4SparseMLABackend get_supported_kernel_block_sizes: [256]
# (fixed), so customize_attention_spec sets block_stride_alignment=MultipleOf(256)
# (vllm/v1/worker/utils.py @ v0.33.0).
MLA_KERNEL_BLOCK = 256
# DeepseekSparseSWABackend.get_preferred_block_size: "Setting kv cache block size to 256".
DEFAULT_BLOCK_SIZE = 256
# fp8 indexer K row: index_head_dim fp8 + one fp32 scale per 128 values (attention.py @ v0.33.0).
INDEXER_QUANT_BLOCK = 128

PACKED_DTYPES = ("fp8_ds_mla", "fp8", "fp8_e4m3", "auto")
PLAIN_DTYPES = {"bfloat16": 2}


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class V4CacheLayer:
    """One spec-bearing module of a V4 decoder layer (a "layer" to vLLM's KV planner)."""

    name: str  # vLLM's layer name, e.g. model.layers.2.attn.indexer.k_cache
    layer: int  # decoder layer index (>= num_hidden_layers: MTP / DSpark draft)
    role: str  # swa | compressed_kv | indexer | compressor_state | indexer_state
    kind: str  # kvc.MLA_ATTN (MLAAttentionSpec) or kvc.SLIDING_WINDOW (SlidingWindowMLASpec)
    block_size: int
    page_size_bytes: int
    window: int | None = None
    tokens_per_state: int = 1
    state_bytes: int = 0  # bytes per stored state before padding
    alignment: int = 1  # page alignment (576 / 512)
    block_stride_alignment: int = 1  # get_block_stride_alignment()
    is_draft: bool = False

    @property
    def bucket_key(self) -> tuple:
        """``UniformTypeKVCacheSpecs.is_uniform_type``: same block size, same spec family and (for
        sliding windows) same window."""
        return (self.kind, self.block_size, self.window)


def page_size_bytes(block_size: int, tokens_per_state: int, state_bytes: int, alignment: int) -> int:
    """``AttentionSpec.page_size_bytes`` with ``_apply_alignment_padding`` (kv_cache_interface.py
    @ v0.33.0): ``num_heads (1) * num_states * state_content_size``, ``num_states = block //
    tokens_per_state`` (at least 1), rounded up to ``alignment``."""
    states = block_size // tokens_per_state if tokens_per_state > 0 else 1
    return round_up(max(states, 1) * state_bytes, alignment)


def _mla_stride_alignment(block_size: int, tokens_per_state: int, state_bytes: int, alignment: int) -> int:
    """``KVCacheSpec.get_block_stride_alignment`` for ``MultipleOf(256)``: 1 when the kernel block
    ``gcd(256, block_size)`` is the whole block, else the page at the kernel block size."""
    kernel = math.gcd(MLA_KERNEL_BLOCK, block_size)
    if kernel == block_size:
        return 1
    return page_size_bytes(kernel, tokens_per_state, state_bytes, alignment)


@dataclass(frozen=True)
class V4CacheFormat:
    """DeepSeek-V4's KV cache row format (packed fp8_ds_mla or plain rows)."""

    packed: bool  # fp8_ds_mla UE8M0 layout (uint8) vs plain element rows
    cache_dtype: str  # as the layers record it ("fp8_ds_mla" or "bfloat16")
    latent_state_bytes: int  # per stored latent row (SWA and compressed KV)
    alignment: int


def cache_format(kv_cache_dtype: str) -> V4CacheFormat:
    """``_resolve_dsv4_kv_cache_dtype`` (attention.py @ v0.33.0) on the fp8_ds_mla layout backends:
    ``auto`` / ``fp8`` become ``fp8_ds_mla`` (584 B rows, 576 B alignment); ``bfloat16`` is the
    plain-row FlashInfer format (512 x 2 B rows, 512 B alignment)."""
    if kv_cache_dtype in PACKED_DTYPES:
        return V4CacheFormat(True, "fp8_ds_mla", FP8_DS_MLA_STATE_BYTES, FP8_DS_MLA_ALIGNMENT)
    if kv_cache_dtype in PLAIN_DTYPES:
        return V4CacheFormat(False, kv_cache_dtype, 0, PLAIN_ROW_ALIGNMENT)
    raise FlagError(f"--kv-cache-dtype {kv_cache_dtype} is not modelled for DeepSeek-V4",
                    field="--kv-cache-dtype", fix="use fp8_ds_mla (or fp8 / auto) or bfloat16")


def cache_layers(spec: ModelSpec, kv_cache_dtype: str, block_size: int, num_draft_layers: int = 0
                 ) -> tuple[V4CacheLayer, ...]:
    """Every cache layer of the model in ``static_forward_context`` order (one worker, no PP)."""
    v4 = spec.dsv4
    assert v4 is not None
    fmt = cache_format(kv_cache_dtype)
    head = v4.head_dim
    if fmt.packed:
        latent = FP8_DS_MLA_STATE_BYTES
    else:
        latent = head * PLAIN_DTYPES[fmt.cache_dtype]  # MLA head_size_v = 0: K only
    align = fmt.alignment
    indexer_row = v4.index_head_dim + v4.index_head_dim // INDEXER_QUANT_BLOCK * 4
    out: list[V4CacheLayer] = []
    ratios = list(v4.compress_ratios) + [0] * num_draft_layers
    for i, r in enumerate(ratios):
        p = f"model.layers.{i}.attn"
        draft = i >= spec.num_hidden_layers
        if r == 4:
            out.append(V4CacheLayer(
                f"{p}.indexer.k_cache", i, "indexer", kvc.MLA_ATTN, block_size,
                page_size_bytes(block_size, 4, indexer_row, align), tokens_per_state=4, state_bytes=indexer_row,
                alignment=align, block_stride_alignment=_mla_stride_alignment(block_size, 4, indexer_row, align)))
            st = 2 * 2 * v4.index_head_dim * 4  # kv + score state, coff 2, fp32
            out.append(V4CacheLayer(
                f"{p}.indexer.compressor.state_cache", i, "indexer_state", kvc.SLIDING_WINDOW,
                COMPRESSOR_BLOCK_SIZE[4], page_size_bytes(COMPRESSOR_BLOCK_SIZE[4], 1, st, align),
                window=8, state_bytes=st, alignment=align))
        out.append(V4CacheLayer(
            f"{p}.swa_cache", i, "swa", kvc.SLIDING_WINDOW, SWA_BLOCK_SIZE,
            page_size_bytes(SWA_BLOCK_SIZE, 1, latent, align), window=v4.sliding_window, state_bytes=latent,
            alignment=align, is_draft=draft))
        if r > 1:
            out.append(V4CacheLayer(
                p, i, "compressed_kv", kvc.MLA_ATTN, block_size, page_size_bytes(block_size, r, latent, align),
                tokens_per_state=r, state_bytes=latent, alignment=align,
                block_stride_alignment=_mla_stride_alignment(block_size, r, latent, align)))
            coff = 2 if r == 4 else 1
            st = 2 * coff * head * 4
            bs = COMPRESSOR_BLOCK_SIZE[r]
            out.append(V4CacheLayer(
                f"{p}.compressor.state_cache", i, "compressor_state", kvc.SLIDING_WINDOW, bs,
                page_size_bytes(bs, 1, st, align), window=coff * r, state_bytes=st, alignment=align))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# _get_packed_kv_cache_groups (vllm/v1/core/kv_cache_planning.py @ v0.33.0)


def approximate_gcd(values: Sequence[int], lower_bound: int | None = None) -> int:
    """``_approximate_gcd``: the chunk ``d`` in [lower_bound, max] minimising the total upward
    padding ``sum(ceil(x/d)*d - x)``; ties prefer the larger ``d``."""
    min_d = max(1, lower_bound if lower_bound is not None else 1)
    max_d = max(values)
    if min_d > max_d:
        return min_d
    best_d, best_pad = min_d, None
    for d in range(min_d, max_d + 1):
        pad = sum((d - (x % d)) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_pad, best_d = pad, d
    return best_d


@dataclass(frozen=True)
class V4Group:
    """One DeepSeek-V4 KV cache group: its layers."""

    layers: tuple[V4CacheLayer, ...]

    @property
    def kind(self) -> str:
        return self.layers[0].kind

    @property
    def block_size(self) -> int:
        return self.layers[0].block_size

    @property
    def window(self) -> int | None:
        return self.layers[0].window

    @property
    def page_size_bytes(self) -> int:
        """``UniformTypeKVCacheSpecs.page_size_bytes``: the sum of the layers' pages."""
        return sum(x.page_size_bytes for x in self.layers)


def packed_groups(layers: Sequence[V4CacheLayer]) -> tuple[V4Group, ...]:
    """``_get_packed_kv_cache_groups``: greedy uniform-type buckets, balanced buckets split into
    groups of ``repeats_per_group`` pattern repeats, state buckets capped at what a block holds."""
    buckets: list[list[V4CacheLayer]] = []
    for x in layers:
        for b in buckets:
            if b[0].bucket_key == x.bucket_key:
                b.append(x)
                break
        else:
            buckets.append([x])
    info = []
    for b in buckets:
        by_page: dict[int, list[V4CacheLayer]] = {}
        for x in b:
            by_page.setdefault(x.page_size_bytes, []).append(x)
        balanced = len({len(v) for v in by_page.values()}) == 1
        max_per_page = max(len(v) for v in by_page.values())  # get_max_layers_per_page_size
        info.append((b, by_page, balanced, max_per_page))
    min_repeats = max((m for _, pages, bal, m in info if bal and len(pages) > 1), default=0)
    repeats = (approximate_gcd([m for _, _, bal, m in info if bal], lower_bound=min_repeats)
               if min_repeats else None)

    def num_groups_for(balanced: bool, m: int) -> int:
        return -(-m // repeats) if balanced and repeats is not None else 1

    def widest(by_page: dict[int, list[V4CacheLayer]], n: int) -> int:
        return sum(-(-len(v) // n) * page for page, v in by_page.items())

    def is_state_bucket(b: list[V4CacheLayer]) -> bool:
        return repeats is None and b[0].kind == kvc.SLIDING_WINDOW

    anchor = max((widest(pages, len(b) if is_state_bucket(b) else num_groups_for(bal, m))
                  for b, pages, bal, m in info), default=0)
    groups: list[V4Group] = []
    for b, pages, bal, m in info:
        n = num_groups_for(bal, m)
        if anchor and is_state_bucket(b):
            per_block = max(anchor // b[0].page_size_bytes, 1)
            n = max(n, -(-len(b) // per_block))
        if n == 1:
            groups.append(V4Group(tuple(b)))
            continue
        pattern = list(zip(*pages.values()))
        for i in range(n):
            groups.append(V4Group(tuple(x for rep in pattern[i::n] for x in rep)))
    return tuple(groups)


def bytes_per_block(groups: Sequence[V4Group]) -> int:
    """``_get_kv_cache_bytes_per_block`` (block-outermost): the widest group's page bytes, rounded
    up to the lcm of every layer's block-stride alignment."""
    widest = max(g.page_size_bytes for g in groups)
    align = math.lcm(*(x.block_stride_alignment for g in groups for x in g.layers))
    return round_up(widest, align)


def num_draft_layers(spec: ModelSpec, method: str | None) -> int:
    """Draft cache layers: MTP = ``num_nextn_predict_layers`` DeepSeekV4MTP layers; DSpark =
    ``n_mtp_layers or 3`` (``DSparkDeepseekV4Model``, vllm/models/deepseek_v4/nvidia/dspark.py
    @ v0.33.0). Each is SWA-only (layer id >= num_hidden_layers)."""
    if method == "mtp":
        return spec.num_nextn_predict_layers
    if method == "dspark":
        assert spec.dsv4 is not None
        return spec.dsv4.n_mtp_layers or 3
    return 0


def block_size_for(a) -> int:
    """``--block-size`` if given, else the SWA backend's preferred 256."""
    return a.block_size if getattr(a, "block_size_source", "") == "flag" else DEFAULT_BLOCK_SIZE


def to_plan(groups: Sequence[V4Group]) -> kvc.KVCachePlan:
    """The generic planner's view: one ``KVCacheGroup`` per packed group (its spec's page = the
    group's page sum) and the packed ``bytes_per_block``."""
    out = []
    for g in groups:
        spec = kvc.KVCacheSpec(g.kind, g.block_size, g.page_size_bytes, window=g.window)
        out.append(kvc.KVCacheGroup(tuple(x.layer for x in g.layers), spec,
                                    tuple(x.page_size_bytes for x in g.layers)))
    live = tuple(g for g in out if g.layer_ids)
    return kvc.KVCachePlan(groups=live, bytes_per_block=bytes_per_block(
        [g for g in groups if g.layers]) if live else 0)


def model_kv(spec: ModelSpec, a, max_model_len: int):
    """``kv_cache.ModelKV`` for DeepSeek-V4: global packed groups, each PP stage's projection
    (``_project_kv_cache_groups_to_worker``; draft layers live on the last stage)."""
    block = block_size_for(a)
    fmt = cache_format(a.kv_cache_dtype)
    layers = cache_layers(spec, a.kv_cache_dtype, block, num_draft_layers(spec, a.speculative_method))
    groups = packed_groups(layers)
    layout = kvc.CacheLayout(block_size=block, kv_dtype_bytes=1 if fmt.packed else PLAIN_DTYPES[fmt.cache_dtype],
                             cache_dtype=fmt.cache_dtype, tp=a.tp)
    global_plan = to_plan(groups)
    workers = []
    for r in range(a.pp):
        lo, hi = kvc.get_pp_indices(spec.num_hidden_layers, r, a.pp)
        own = [V4Group(tuple(x for x in g.layers if lo <= x.layer < hi
                             or (x.layer >= spec.num_hidden_layers and r == a.pp - 1))) for g in groups]
        workers.append(kvc.WorkerKV(r, (lo, hi), to_plan(own)))
    return kvc.ModelKV(layout, global_plan.groups, 0, tuple(workers))


def notes(spec: ModelSpec, a) -> list[str]:
    """What the plan should say about the V4 layout (warnings)."""
    out = []
    if a.traits.version != MODELLED_RELEASE:
        out.append(f"DeepSeek-V4 KV layout modelled from vLLM {MODELLED_RELEASE}; vLLM {a.traits.version} may group "
                   "its caches differently (estimated)")
    if a.kv_cache_dtype in ("auto", "fp8", "fp8_e4m3"):
        out.append(f"--kv-cache-dtype {a.kv_cache_dtype}: modelled as fp8_ds_mla (FlashMLA-layout backends); "
                   "the SM120 FlashInfer plain-row path stores bf16 / per-tensor fp8 rows instead")
    n = num_draft_layers(spec, a.speculative_method)
    if n:
        out.append(f"DeepSeek-V4 {a.speculative_method}: the draft's {n} SWA-only layer(s) are in the KV layout; "
                   "the draft weights follow the speculative warning")
    return out


__all__ = ["V4CacheLayer", "V4Group", "approximate_gcd", "bytes_per_block", "cache_layers", "model_kv",
           "num_draft_layers", "packed_groups", "page_size_bytes", "to_plan"]
