"""vLLM V1 KV cache planning: per-layer specs, page sizes, groups, ``num_gpu_blocks``, capacity.

Pure integer arithmetic mirroring, version by version:
- ``vllm/v1/kv_cache_interface.py`` (``AttentionSpec.page_size_bytes``, ``MLAAttentionSpec``,
  ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MambaSpec``, ``max_memory_usage_bytes``)
- ``vllm/v1/core/kv_cache_utils.py`` @ v0.11.0 … v0.30.0 and ``vllm/v1/core/kv_cache_planning.py``
  @ v0.33.0 (``get_kv_cache_groups``, ``_get_kv_cache_groups_uniform_page_size``,
  ``get_kv_cache_config_from_groups``, ``_max_memory_usage_bytes_from_groups``,
  ``_estimate_max_model_len_from_groups``, ``_check_enough_kv_cache_memory``,
  ``get_max_concurrency_for_kv_cache_config``, ``_report_kv_cache_config`` / ``get_kv_cache_capacity``)
- ``vllm/model_executor/layers/mamba/mamba_utils.py`` @ v0.19.0 (``MambaStateShapeCalculator``)
- ``vllm/model_executor/models/config.py::HybridAttentionMambaModelConfig`` @ v0.19.0 and
  ``vllm/platforms/interface.py::_align_hybrid_block_size`` @ v0.33.0 (attention block size for
  hybrid mamba models, mamba page padding).

Every function here is conformance-tested against the released wheels (v0.10.1.1 … v0.33.0,
``tests/conformance/test_vllm_kv_cache.py``); ``kv_cache_configs`` is the per-release order of
``get_kv_cache_configs`` (admission check, ``num_blocks``, capacity log) over one DP engine.

Nothing here knows about files, flags or GPUs; ``memory.py`` feeds it the available bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ...errors import FlagError
from ...model.spec import FULL, LINEAR, MAMBA, SLIDING, ModelSpec
from ...units import GiB
from .release import VersionTraits

FULL_ATTN = "full"
MLA_ATTN = "mla"
SLIDING_WINDOW = "sliding_window"
CHUNKED_LOCAL = "chunked_local"
MAMBA_STATE = "mamba"

# fp8_ds_mla: 512 fp8 latent + 4 float32 scales + 64 bf16 rope = 656 bytes per token
# (vllm/v1/kv_cache_interface.py MLAAttentionSpec @ v0.11.0 and v0.33.0).
FP8_DS_MLA_BYTES_PER_TOKEN = 656

KV_CACHE_DTYPE_BYTES = {
    # vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE: every fp8 flavour is stored as uint8.
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_ds_mla": 1, "fp8_inc": 1,
    "bfloat16": 2, "float16": 2, "half": 2, "float": 4, "float32": 4,
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVCacheSpec:
    """One layer's KV cache spec on one worker (equal specs share a group, as in vLLM)."""

    kind: str  # full | mla | sliding_window | chunked_local | mamba
    block_size: int
    page_size_bytes: int
    window: int | None = None  # sliding window / attention chunk size
    # (KV heads per rank, head size, element bytes): vLLM's specs compare every field, so two
    # attention layers of different shapes never share a group even when block size and page
    # agree after unification (e.g. a draft model's layers; kv_cache_interface.py @ v0.19.0+)
    geometry: tuple[int, ...] | None = None

    def max_memory_usage_blocks(self, cfg: "SchedulerView") -> int:
        """Blocks one request at ``max_model_len`` holds: ``max_memory_usage_bytes // page``.

        Full/MLA: ``cdiv(max_model_len, block_size)``.
        Sliding window: ``cdiv(min(W - 1 + in_flight, max_model_len), bs) + 1`` with in_flight =
        ``max_num_batched_tokens`` (v0.19.0) or ``max_in_flight_tokens`` (v0.26.0+ ``vllm/config/vllm.py``).
        Chunked local: ``cdiv(min(C + in_flight, max_model_len), bs)`` (no +1).
        Mamba: ``1 + spec_blocks`` (mode none), ``2 + spec_blocks`` (mode align), one per block_size
        tokens (mode all) -- ``MambaSpec.max_memory_usage_bytes`` @ v0.19.0.
        """
        if self.kind in (FULL_ATTN, MLA_ATTN):
            return cdiv(cfg.max_model_len, self.block_size)
        if self.kind == SLIDING_WINDOW:
            assert self.window is not None
            tokens = min(self.window - 1 + cfg.in_flight_tokens, cfg.max_model_len)
            return cdiv(tokens, self.block_size) + 1
        if self.kind == CHUNKED_LOCAL:
            assert self.window is not None
            return cdiv(min(self.window + cfg.in_flight_tokens, cfg.max_model_len), self.block_size)
        if self.kind == MAMBA_STATE:
            if cfg.mamba_cache_mode == "all":
                return cdiv(cfg.max_model_len, self.block_size)
            if cfg.mamba_cache_mode == "align":
                return 2 + cfg.num_speculative_blocks
            return 1 + cfg.num_speculative_blocks
        raise ValueError(f"unknown KV spec kind {self.kind!r}")


@dataclass(frozen=True)
class SchedulerView:
    """The parts of ``VllmConfig`` the KV arithmetic reads."""

    max_model_len: int
    max_num_batched_tokens: int
    in_flight_tokens: int  # max_num_batched_tokens (<0.26) or max_concurrent_batches x it (>=0.26)
    mamba_cache_mode: str = "none"  # none | align | all
    num_speculative_blocks: int = 0

    def with_max_model_len(self, n: int) -> "SchedulerView":
        return replace(self, max_model_len=n)


@dataclass(frozen=True)
class KVCacheGroup:
    """One KV cache group: its layers and their spec."""

    layer_ids: tuple[int, ...]  # decoder layer indices (model-global)
    spec: KVCacheSpec
    # UniformTypeKVCacheSpecs: one group of same-kind layers with different page sizes.
    per_layer_pages: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KVCachePlan:
    """One worker's grouping: what ``get_kv_cache_config_from_groups`` works from."""

    groups: tuple[KVCacheGroup, ...]
    bytes_per_block: int  # group_size x page (or sum of per-layer pages for UniformType)
    num_padding_layers: int = 0

    @property
    def is_attention_free(self) -> bool:
        return not self.groups

    @property
    def min_block_size(self) -> int:
        return min(g.spec.block_size for g in self.groups)

    @property
    def has_mamba_layers(self) -> bool:
        return any(g.spec.kind == MAMBA_STATE for g in self.groups)

    def blocks_per_request(self, cfg: SchedulerView) -> int:
        """``sum_g cdiv(max_memory_usage_bytes_g, page_g)`` (kv_cache_utils.py @ v0.19.0 and
        kv_cache_planning.py @ v0.33.0 agree for uniform page sizes)."""
        return sum(g.spec.max_memory_usage_blocks(cfg) for g in self.groups)

    def needed_memory_bytes(self, cfg: SchedulerView, per_layer: bool = False, first_group_only: bool = False) -> int:
        """``_max_memory_usage_bytes_from_groups``: bytes_per_block x blocks for one request
        (kv_cache_utils.py @ v0.19.0+, padding layers included).

        ``per_layer``: up to v0.13.0 the admission check summed ``max_memory_usage_bytes`` over the
        worker's layers instead (``max_memory_usage_bytes(vllm_config, kv_cache_spec.values())`` in
        ``check_enough_kv_cache_memory``, kv_cache_utils.py @ v0.10.1.1 / v0.11.0 / v0.12.0 /
        v0.13.0): no padding layers.

        ``first_group_only``: v0.14.1 … v0.18.0 take the blocks of the *first* group's spec only
        (``blocks_needed = cdiv(any_spec.max_memory_usage_bytes(vllm_config), page_size)`` with
        ``any_spec = kv_cache_groups[0].kv_cache_spec``, kv_cache_utils.py @ v0.14.1 l.1346 /
        v0.18.0); v0.19.0 sums over the groups.
        """
        if not self.groups:
            return 0
        if per_layer:
            return sum(g.spec.max_memory_usage_blocks(cfg) * (sum(g.per_layer_pages) if g.per_layer_pages
                                                              else len(g.layer_ids) * g.spec.page_size_bytes)
                       for g in self.groups)
        if first_group_only and not (len(self.groups) == 1 and self.groups[0].per_layer_pages is not None):
            return self.bytes_per_block * self.groups[0].spec.max_memory_usage_blocks(cfg)
        return self.bytes_per_block * self.blocks_per_request(cfg)


# ---------------------------------------------------------------------------------------------
# Page sizes


def attention_page_size_bytes(block_size: int, num_kv_heads: int, head_size: int, dtype_bytes: int) -> int:
    """``AttentionSpec.page_size_bytes`` (kv_cache_interface.py @ v0.11.0; same value @ v0.33.0)."""
    return (2  # key + value
            * block_size * num_kv_heads * head_size * dtype_bytes)


def mla_page_size_bytes(block_size: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype_bytes: int,
                        cache_dtype: str = "auto") -> int:
    """``MLAAttentionSpec.page_size_bytes``: one latent "head" of kv_lora_rank + rope dims, no V
    (kv_cache_interface.py @ v0.11.0); ``fp8_ds_mla`` packs 656 bytes per token."""
    if cache_dtype == "fp8_ds_mla":
        return block_size * FP8_DS_MLA_BYTES_PER_TOKEN
    return block_size * 1 * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes


def num_kv_heads_per_rank(spec: ModelSpec, tp: int) -> int:
    """``ModelConfig.get_num_kv_heads``: 1 for MLA, else ``max(1, total // tp)`` (KV heads are
    replicated when tp > total_num_kv_heads) -- vllm/config/model.py @ v0.11.0 / v0.33.0."""
    if spec.is_mla:
        return 1
    return max(1, spec.num_key_value_heads // tp)


def extra_groups_for_head_shards(ngroups: int, tp: int) -> int:
    """mamba_utils.py @ v0.19.0: groups replicated so each head shard has its group."""
    return 0 if ngroups % tp == 0 else tp - ngroups


def mamba_state_shapes(spec: ModelSpec, tp: int, num_spec: int = 0) -> tuple[tuple[int, ...], ...]:
    """``MambaStateShapeCalculator.mamba2_state_shape`` / ``gated_delta_net_state_shape``
    (vllm/model_executor/layers/mamba/mamba_utils.py @ v0.19.0): (conv state, ssm state)."""
    m = spec.mamba
    assert m is not None
    if m.kind == "gdn":
        kh, kd, vh, vd = m.n_groups, m.head_dim, m.num_heads, m.state_size
        conv_dim = kd * kh * 2 + vd * vh
        return ((m.conv_kernel - 1 + num_spec, _divide(conv_dim, tp, "linear_num_key_heads")),
                (_divide(vh, tp, "linear_num_value_heads"), vd, kd))
    n_groups = m.n_groups + extra_groups_for_head_shards(m.n_groups, tp)
    intermediate = m.num_heads * m.head_dim
    conv_dim = intermediate + 2 * n_groups * m.state_size
    return ((m.conv_kernel - 1 + num_spec, _divide(conv_dim, tp, "mamba n_groups")),
            (_divide(m.num_heads, tp, "mamba_num_heads"), m.head_dim, m.state_size))


def _divide(a: int, b: int, what: str) -> int:
    if a % b:
        raise FlagError(f"{what} dimension {a} is not divisible by tensor parallel size {b}",
                        field="--tensor-parallel-size", fix="use a TP size that divides it")
    return a // b


def mamba_page_size_bytes(spec: ModelSpec, tp: int, state_dtype_bytes: int, num_spec: int = 0) -> int:
    """``MambaSpec.page_size_bytes`` before padding: ``sum(prod(shape) * dtype_size)``
    (kv_cache_interface.py @ v0.19.0); conv and ssm states both in the model dtype under
    ``mamba_cache_dtype=auto`` / ``mamba_ssm_cache_dtype=auto`` (MambaStateDtypeCalculator)."""
    total = 0
    for shape in mamba_state_shapes(spec, tp, num_spec):
        n = 1
        for d in shape:
            n *= d
        total += n * state_dtype_bytes
    return total


def hybrid_attention_block_size(attn_page_1_token: int, mamba_page: int, block_size: int,
                                kernel_block_alignment: int, backend_block_alignment: int = 1) -> int:
    """Attention block size for hybrid attention+mamba models, mamba cache mode none/align:
    ``alignment * cdiv(mamba_page, alignment * attn_page_size_1_token)``, rounded up to the
    backends' common kernel block (``backend_block_alignment``, v0.33.0); kept if the
    configured block size is already larger (HybridAttentionMambaModelConfig @ v0.11.0/v0.19.1,
    ``Platform._align_hybrid_block_size`` @ v0.20.2 … v0.33.0). The alignment per release:
    :func:`hybrid_kernel_block_alignment`. The mamba page is then padded to
    ``block_size x attn_page_size_1_token`` when they differ."""
    attn_block = kernel_block_alignment * cdiv(mamba_page, kernel_block_alignment * attn_page_1_token)
    attn_block = backend_block_alignment * cdiv(attn_block, backend_block_alignment)
    return max(block_size, attn_block)


def hybrid_kernel_block_alignment(traits: VersionTraits, block_size: int, is_mla: bool,
                                  backend_min_kernel_block: int = 16) -> tuple[int, int]:
    """(kernel_block_alignment_size, backend_block_alignment) of the hybrid alignment:

    * up to v0.19 (``HybridAttentionMambaModelConfig``, models/config.py @ v0.11.0 / v0.19.1):
      16, and for MLA 64 (128 with CUTLASS MLA, not modelled) -- the MLA branch is absent in
      v0.10.2 / v0.11.0 and present from v0.12.0 (models/config.py @ v0.12.0);
    * v0.20.0+ (``Platform._align_hybrid_block_size``, platforms/interface.py @ v0.20.0 / v0.20.2):
      ``max(smallest kernel block of the backend, cache block size)`` -- FlashAttention
      advertises ``MultipleOf(16)`` -- so a user block size above 16 sets the alignment;
    * v0.33.0: MLA at least 128, and the result is rounded up to the non-mamba backends' common
      kernel block (16 for FlashAttention).
    """
    if not traits.hybrid_align_from_backend:
        return (64 if (is_mla and traits.hybrid_mla_align_64) else 16), 1
    align = max(backend_min_kernel_block, block_size)
    if not traits.hybrid_align_backend_common:
        return align, 1
    if is_mla:
        align = max(align, 128)
    return align, backend_min_kernel_block


# ---------------------------------------------------------------------------------------------
# Layer specs of one worker


@dataclass(frozen=True)
class CacheLayout:
    """Resolved cache settings shared by every layer of a worker."""

    block_size: int  # attention block size after backend / hybrid adjustments
    kv_dtype_bytes: int
    cache_dtype: str  # "auto", "fp8", "fp8_ds_mla", ...
    tp: int
    mamba_page_padded: int | None = None  # mamba page padded to the attention page
    mamba_block_size: int | None = None  # max_model_len (mode none) or block_size (align)
    num_speculative_tokens: int = 0
    is_chunked_local: bool = False  # Llama 4: SLIDING layers are chunked-local attention


def layer_specs(spec: ModelSpec, layout: CacheLayout) -> dict[int, KVCacheSpec]:
    """One KVCacheSpec per decoder layer that keeps a cache (``get_kv_cache_spec`` of the runner)."""
    out: dict[int, KVCacheSpec] = {}
    bs = layout.block_size
    if spec.is_mla:
        attn_page = mla_page_size_bytes(bs, spec.kv_lora_rank or 0, spec.qk_rope_head_dim or 0,
                                        layout.kv_dtype_bytes, layout.cache_dtype)
        attn_kind = MLA_ATTN
        geometry = (1, (spec.kv_lora_rank or 0) + (spec.qk_rope_head_dim or 0), layout.kv_dtype_bytes)
    else:
        heads = num_kv_heads_per_rank(spec, layout.tp)
        attn_page = attention_page_size_bytes(bs, heads, spec.head_dim, layout.kv_dtype_bytes)
        attn_kind = FULL_ATTN
        geometry = (heads, spec.head_dim, layout.kv_dtype_bytes)
    for i, kind in enumerate(spec.layer_types):
        if kind == FULL:
            out[i] = KVCacheSpec(attn_kind, bs, attn_page, geometry=geometry)
        elif kind == SLIDING:
            out[i] = KVCacheSpec(CHUNKED_LOCAL if layout.is_chunked_local else SLIDING_WINDOW, bs, attn_page,
                                 window=spec.sliding_window, geometry=geometry)
        elif kind in (LINEAR, MAMBA):
            page = layout.mamba_page_padded or mamba_page_size_bytes(
                spec, layout.tp, spec.dtype_bytes, layout.num_speculative_tokens)
            out[i] = KVCacheSpec(MAMBA_STATE, layout.mamba_block_size or bs, page)
    return out


# ---------------------------------------------------------------------------------------------
# Grouping (get_kv_cache_groups) and bytes per block


def get_kv_cache_groups(specs: dict[int, KVCacheSpec], traits: VersionTraits) -> tuple[tuple[KVCacheGroup, ...], int]:
    """Group the model's layers as ``get_kv_cache_groups`` does; returns (groups, padding layers).

    1. no cache layers -> no group; 2. all specs equal -> one group; 3. same kind and block size,
    different pages -> one UniformType group (``UniformTypeKVCacheSpecs``, first seen v0.11.0);
    4. hybrid -> unify page sizes by scaling block sizes (``unify_kv_cache_spec_page_size``,
    first seen v0.19.0; v0.10/v0.11 raise ``NotImplementedError``), bucket by spec,
    ``group_size = min(len)`` (or ``max(len)`` when ``max < 1.25 * min`` from v0.12.0, ``1.5 * min``
    from v0.18.0; kv_cache_utils.py @ v0.12.0 / v0.17.0 / v0.18.0; v0.11.0 has no such rule),
    each bucket split into ``cdiv(len, group_size)`` groups of ``layers[i::n]`` (v0.11.0+;
    v0.10.x takes consecutive slices ``layers[i:i + group_size]``,
    ``_get_kv_cache_config_uniform_page_size`` in kv_cache_utils.py @ v0.10.1.1), the last padded.
    """
    if not specs:
        return (), 0
    values = list(specs.values())
    ids = tuple(sorted(specs))
    if all(v == values[0] for v in values):
        return (KVCacheGroup(ids, values[0]),), 0
    kinds = {v.kind for v in values}
    if (traits.uniform_type_groups and len(kinds) == 1 and len({v.block_size for v in values}) == 1
            and len({v.window for v in values}) == 1 and values[0].kind != MAMBA_STATE):
        pages = tuple(specs[i].page_size_bytes for i in ids)
        return (KVCacheGroup(ids, values[0], per_layer_pages=pages),), 0
    if not traits.page_size_unification and len({s.page_size_bytes for s in values}) > 1:
        # get_kv_cache_groups / get_kv_cache_config end in a bare ``raise NotImplementedError``
        # (kv_cache_utils.py @ v0.10.1.1 / v0.11.0): no page-size unification yet
        raise FlagError(f"vLLM {traits.version} cannot group layers whose KV page sizes differ "
                        "(get_kv_cache_groups raises NotImplementedError)", field="--block-size",
                        fix="use vLLM >= 0.19 for this layer mix")
    specs = _unify_page_size(specs, traits)
    buckets: dict[KVCacheSpec, list[int]] = {}
    for i in ids:
        buckets.setdefault(specs[i], []).append(i)
    lens = [len(v) for v in buckets.values()]
    group_size = min(lens)
    if traits.group_size_max_heuristic and max(lens) < min(lens) * traits.group_size_max_ratio:
        group_size = max(lens)
    groups: list[KVCacheGroup] = []
    padding = 0
    strided = traits.strided_groups
    for s, layers in buckets.items():
        n = cdiv(len(layers), group_size)
        padding += n * group_size - len(layers)
        for k in range(n):
            chunk = layers[k::n] if strided else layers[k * group_size:(k + 1) * group_size]
            groups.append(KVCacheGroup(tuple(chunk), s))
    if not strided:
        # unify_kv_cache_configs sorts each worker's groups by (spec class name, astuple(spec))
        # (kv_cache_utils.py @ v0.10.1.1); the sort is stable and equal-class specs tie here
        groups.sort(key=lambda g: _V010_SPEC_CLASS[g.spec.kind])
    return tuple(groups), padding


# vLLM 0.10.x spec class of each kind (MLA is FullAttentionSpec(use_mla=True) there)
_V010_SPEC_CLASS = {FULL_ATTN: "FullAttentionSpec", MLA_ATTN: "FullAttentionSpec",
                    SLIDING_WINDOW: "SlidingWindowSpec", CHUNKED_LOCAL: "ChunkedLocalAttentionSpec",
                    MAMBA_STATE: "MambaSpec"}


def _unify_page_size(specs: dict[int, KVCacheSpec], traits: VersionTraits) -> dict[int, KVCacheSpec]:
    """``unify_kv_cache_spec_page_size``: every page grows to the largest one.

    * a smaller page that divides the largest: block size x ratio (v0.19.0+);
    * a smaller mamba page: padded to the largest, block size kept (v0.26.0+, absent in
      v0.20.2; before, scaling its block size trips ``assert new_spec.page_size_bytes ==
      max_page_size``);
    * a smaller non-MLA attention page that does not divide: padded (``page_size_padded``,
      kv_cache_utils.py @ v0.29.0 / v0.30.0, kv_cache_planning.py @ v0.33.0); v0.24 … v0.28 pad only when
      the backend sets ``indexes_kv_by_block_stride`` (spec default False, kv_cache_utils.py
      @ v0.24.0 / v0.26.0 / v0.28.0);
    * otherwise ``NotImplementedError``, whose text changed at v0.24 and v0.29 (read in the
      v0.22.1 / v0.24.0 and v0.28.0 / v0.29.0 wheels).
    """
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    out = {}
    for i, s in specs.items():
        if s.page_size_bytes == top:
            out[i] = s
        elif s.kind == MAMBA_STATE and traits.mamba_page_padding:
            out[i] = replace(s, page_size_bytes=top)
        elif top % s.page_size_bytes == 0:
            if s.kind == MAMBA_STATE:
                raise FlagError(f"vLLM {traits.version} cannot pad a mamba page ({s.page_size_bytes} B) to the "
                                f"attention page ({top} B) here (AssertionError in "
                                "unify_kv_cache_spec_page_size)", field="--block-size",
                                fix="let vLLM choose the attention block size for this hybrid model")
            out[i] = replace(s, block_size=s.block_size * (top // s.page_size_bytes), page_size_bytes=top)
        elif traits.attention_page_padding and s.kind in (FULL_ATTN, SLIDING_WINDOW, CHUNKED_LOCAL):
            out[i] = replace(s, page_size_bytes=top)
        else:
            raise FlagError(unify_page_size_error(i, traits), field="--block-size",
                            fix="vLLM raises NotImplementedError for this layer mix")
    return out


def unify_page_size_error(layer: int, traits: VersionTraits) -> str:
    """The ``NotImplementedError`` of ``unify_kv_cache_spec_page_size`` (kv_cache_utils.py
    @ v0.19.0 / v0.22.1; v0.24.0 … v0.28.0; v0.29.0 / v0.30.0, kv_cache_planning.py @ v0.33.0). vLLM names
    the layer by its module path (``model.layers.3.self_attn.attn``); kvscope gives the decoder
    layer index."""
    if not traits.unify_error_names_layer:
        return ("The page size of the layer is not divisible by the maximum page size. "
                "Cannot unify by adjusting block_size.")
    tail = ("non-MLA attention layers." if traits.attention_page_padding else
            "attention layers whose backend indexes KV pages by the block stride "
            "(indexes_kv_by_block_stride is True).")
    return (f"Layer {layer}: page size is not divisible by the maximum page size and cannot be "
            f"padded. Padding is only supported for {tail}")


def project_to_worker(groups: Sequence[KVCacheGroup], worker_layers: set[int]) -> tuple[KVCacheGroup, ...]:
    """``_project_kv_cache_groups_to_worker``: keep only the layers this PP stage owns."""
    out = []
    for g in groups:
        keep = tuple(i for i in g.layer_ids if i in worker_layers)
        pages = None
        if g.per_layer_pages is not None:
            pages = tuple(p for i, p in zip(g.layer_ids, g.per_layer_pages) if i in worker_layers)
        out.append(KVCacheGroup(keep, g.spec, pages))
    return tuple(out)


def bytes_per_block(groups: Sequence[KVCacheGroup]) -> int:
    """UniformType: ``sum(per-layer page)``; otherwise ``max(len(group)) x page`` -- the
    ``available // page // group_size`` of ``get_num_blocks`` (kv_cache_utils.py @ v0.19.0) and
    ``_get_kv_cache_bytes_per_block`` (kv_cache_planning.py @ v0.33.0, layer-outer layout)."""
    if not groups:
        return 0
    if len(groups) == 1 and groups[0].per_layer_pages is not None:
        return sum(groups[0].per_layer_pages)
    group_size = max(len(g.layer_ids) for g in groups)
    return group_size * groups[0].spec.page_size_bytes


def make_plan(groups: Sequence[KVCacheGroup], padding: int = 0) -> KVCachePlan:
    live = tuple(g for g in groups)
    return KVCachePlan(groups=live, bytes_per_block=bytes_per_block(live), num_padding_layers=padding)


# ---------------------------------------------------------------------------------------------
# Workers: one per PP stage


def get_pp_indices(num_layers: int, pp_rank: int, pp: int) -> tuple[int, int]:
    """``get_pp_indices`` (vllm/distributed/utils.py, identical v0.11.0 … v0.33.0): ``n // pp`` each,
    the remainder +1 to partitions [-2], [-3], … (the last stage gets no extra layer)."""
    sizes = [num_layers // pp] * pp
    rem = num_layers % pp
    for i in range(2, rem + 2):
        sizes[-i] += 1
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


@dataclass(frozen=True)
class WorkerKV:
    """One PP stage's layers and its KV cache plan."""

    pp_rank: int
    layers: tuple[int, int]
    plan: KVCachePlan


@dataclass(frozen=True)
class ModelKV:
    """The model's KV layout: global groups, padding layers and each stage's plan."""

    layout: CacheLayout
    global_groups: tuple[KVCacheGroup, ...]
    num_padding_layers: int
    workers: tuple[WorkerKV, ...]  # one per PP stage (TP ranks of a stage are identical)


# ---------------------------------------------------------------------------------------------
# Blocks, capacity, admission


def num_blocks_from_available(available_bytes: int, plan: KVCachePlan) -> int:
    """``get_num_blocks``: ``max(available // bytes_per_block, 0)``; 1 for attention-free models
    (the BlockPool still needs its null block)."""
    if plan.is_attention_free:
        return 1
    return max(int(available_bytes) // plan.bytes_per_block, 0)


def max_concurrency(num_blocks: int, plan: KVCachePlan, cfg: SchedulerView) -> float:
    """``get_max_concurrency_for_kv_cache_config``: ``num_blocks / blocks_per_request``."""
    return num_blocks / plan.blocks_per_request(cfg)


def kv_cache_size_tokens(num_blocks: int, plan: KVCachePlan, cfg: SchedulerView, traits: VersionTraits) -> int:
    """The "GPU KV cache size: N tokens" figure.

    <= v0.20.0: ``num_blocks // len(groups) * min_block_size`` (``_report_kv_cache_config`` @ v0.19.0);
    >= v0.20.2: ``int(max_concurrency * max_model_len)`` (``get_kv_cache_capacity``);
    V0: ``num_gpu_blocks * block_size``.
    """
    if traits.is_v0:
        return num_blocks * plan.min_block_size
    if traits.tokens_from_concurrency:
        return int(max_concurrency(num_blocks, plan, cfg) * cfg.max_model_len)
    return num_blocks // len(plan.groups) * plan.min_block_size


def estimate_max_model_len(available_bytes: int, plan: KVCachePlan, cfg: SchedulerView,
                           per_layer: bool = False, first_group_only: bool = False) -> int:
    """``_estimate_max_model_len_from_groups``: binary search over [1, max_model_len] for the
    largest length whose one-request need fits; 0 if even one token does not.
    ``per_layer``: the v0.10-v0.13 ``estimate_max_model_len`` (sum over layers);
    ``first_group_only``: v0.14-v0.18 (see :meth:`KVCachePlan.needed_memory_bytes`)."""
    def fits(n: int) -> bool:
        return plan.needed_memory_bytes(cfg.with_max_model_len(n), per_layer, first_group_only) <= available_bytes

    left, right = 1, cfg.max_model_len
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result = mid
            left = mid + 1
        else:
            right = mid - 1
    return result


def scheduler_view_for(cfg: SchedulerView, traits: VersionTraits) -> SchedulerView:
    """What the release's specs read from ``VllmConfig``: sliding-window / chunked-local specs
    use ``max_num_batched_tokens`` before v0.26 (``max_in_flight_tokens`` after,
    kv_cache_interface.py @ v0.26.0); ``MambaSpec.max_memory_usage_bytes`` is one page up to
    v0.11 (kv_cache_interface.py @ v0.11.0), ``cdiv(max_model_len, block_size)`` pages in
    v0.12.0 … v0.14.1 -- the ``mamba_cache_mode="all"`` formula, no speculative blocks
    (kv_cache_interface.py @ v0.12.0 / v0.13.0 / v0.14.1) -- and reads ``mamba_cache_mode`` and
    the speculative blocks from v0.15.1 (kv_cache_interface.py @ v0.15.1, as v0.19.0)."""
    if not traits.in_flight_batches:
        cfg = replace(cfg, in_flight_tokens=cfg.max_num_batched_tokens)
    if not traits.mamba_usage_per_length:
        cfg = replace(cfg, mamba_cache_mode="none", num_speculative_blocks=0)
    elif not traits.mamba_cache_mode_read:
        cfg = replace(cfg, mamba_cache_mode="all", num_speculative_blocks=0)
    return cfg


@dataclass(frozen=True)
class KVCacheConfigs:
    """``get_kv_cache_configs`` (+ the capacity log) for one DP engine."""

    num_blocks: int  # min over workers (after num_gpu_blocks_override)
    kv_cache_tokens: int  # "GPU KV cache size: N tokens" (first worker's line)
    max_concurrency: float  # "Maximum concurrency for L tokens per request: X.XXx"
    needed_memory_bytes: tuple[int, ...]  # per worker with layers, as the admission check computes it
    check_memory_bytes: tuple[int, ...]  # per worker with layers: available (- 1 null block from v0.30)
    error: str | None  # the admission check's (or auto-fit's) ValueError text
    estimated_max_model_len: int | None  # in the error (None when the check passed)
    max_model_len: int  # after auto-fit (``--max-model-len -1``, v0.14+)
    # per admission check (as needed_memory_bytes): the estimate the check's error would print
    estimated_max_model_lens: tuple[int, ...] = ()


def merged_plan(plans: Sequence[KVCachePlan]) -> KVCachePlan:
    """The global groups (every PP stage's layers) back from the per-worker projections: what
    v0.14.1 … v0.16.0 check (``global_kv_cache_groups`` in ``get_kv_cache_configs``)."""
    live = [p for p in plans if p.groups]
    if len(live) <= 1:
        return live[0] if live else plans[0]
    groups = []
    for k, g in enumerate(live[0].groups):
        ids = tuple(i for p in live for i in p.groups[k].layer_ids)
        pages = None
        if g.per_layer_pages is not None:
            pages = tuple(x for p in live for x in p.groups[k].per_layer_pages)
        groups.append(KVCacheGroup(ids, g.spec, pages))
    return make_plan(groups, live[0].num_padding_layers)


def check_rules(traits: VersionTraits) -> tuple[bool, bool, bool]:
    """(per_layer, first_group_only, global_check) of the release's admission check:

    * per_layer: v0.10 … v0.13 ``check_enough_kv_cache_memory`` per worker, summing
      ``max_memory_usage_bytes`` over its layers (kv_cache_utils.py @ v0.12.0 / v0.13.0);
    * first_group_only: v0.14.1 … v0.18.0 ``_max_memory_usage_bytes_from_groups`` counts the
      first group's blocks (kv_cache_utils.py @ v0.14.1 … v0.18.0; summed from v0.19.0);
    * global_check: v0.14.1 … v0.16.0 check (and auto-fit) *once*, on the global groups -- every
      PP stage's layers -- against ``min(available_memory)`` (``get_kv_cache_configs``,
      kv_cache_utils.py @ v0.14.1 l.1513 / v0.15.1 l.1515 / v0.16.0 l.1515). Under PP the need
      counts all layers (vLLM #34076: 24.0 GiB needed at PP2 where each stage holds 12.0). From
      v0.17.0 each worker checks its projected groups (``projected_groups_per_worker``).
    """
    return traits.admission_per_layer, traits.admission_first_group_only, traits.admission_global_once


def planner_available_bytes(plans: Sequence[KVCachePlan], available_bytes: Sequence[int], traits: VersionTraits,
                            num_gpu_blocks_override: int | None = None) -> list[int]:
    """Each worker's available bytes as ``get_kv_cache_configs`` plans with them: from v0.20.2
    ``num_gpu_blocks_override`` replaces the profiled figure by ``override x bytes_per_block``
    (kv_cache_utils.py @ v0.20.2, kv_cache_planning.py @ v0.33.0); before, it only overrides
    ``num_blocks`` after the min over workers."""
    avail = list(available_bytes)
    if num_gpu_blocks_override is not None and traits.override_folds_into_available:
        avail = [num_gpu_blocks_override * p.bytes_per_block if p.groups else m for p, m in zip(plans, avail)]
    return avail


AUTO_FIT_ERROR = ("Cannot auto-fit max_model_len: not enough GPU memory available "
                  "to serve even a single token. Try increasing `gpu_memory_utilization`.")


def kv_cache_configs(plans: Sequence[KVCachePlan], available_bytes: Sequence[int], cfg: SchedulerView,
                     traits: VersionTraits, num_gpu_blocks_override: int | None = None,
                     cache_block_size: int | None = None, auto_fit: bool = False) -> KVCacheConfigs:
    """``get_kv_cache_configs`` over one DP engine's workers (one plan per PP stage), in the
    release's order (kv_cache_utils.py @ v0.10.1.1 … v0.29.0, kv_cache_planning.py @ v0.33.0):
    the memory each admission check sees (:func:`admission_checks`), auto-fit
    (:func:`auto_fit_max_model_len`), the check itself (:func:`check_enough_kv_cache_memory`),
    ``num_blocks`` (:func:`num_blocks_per_worker`) and the capacity lines (:func:`report_capacity`).

    * v0.10.1.1 / v0.11.0: admission check per worker on the sum over its layers, then
      ``num_blocks = available // bytes_per_block`` per worker; the capacity lines are logged per
      worker *before* the min over workers, then ``num_blocks`` = min, then the override;
    * v0.12.0 / v0.13.0: the same per-worker check, but the capacity is logged after the min;
    * v0.14.1 … v0.16.0: one check (and auto-fit) on the global groups -- all PP stages' layers
      -- against the smallest worker's memory (:func:`check_rules`);
    * v0.17.0 … v0.28: override folded into the available memory (v0.20.2+), check per worker on
      the projected groups (padding included), min over workers, capacity from the min;
    * v0.14.1 … v0.18.0 count only the first group's blocks in the need (:func:`check_rules`);
    * v0.29+: the check runs on ``available - bytes_per_block`` (the BlockPool's null block).
    """
    cfg = scheduler_view_for(cfg, traits)
    avail = planner_available_bytes(plans, available_bytes, traits, num_gpu_blocks_override)
    checks = admission_checks(plans, avail, traits)
    if auto_fit and checks:
        fit = auto_fit_max_model_len(checks, cfg, traits)
        if fit <= 0:
            return KVCacheConfigs(num_blocks=0, kv_cache_tokens=0, max_concurrency=0.0, needed_memory_bytes=(),
                                  check_memory_bytes=tuple(m for _, m in checks),
                                  error=AUTO_FIT_ERROR, estimated_max_model_len=None,
                                  max_model_len=cfg.max_model_len)
        cfg = cfg.with_max_model_len(fit)
    admission = check_enough_kv_cache_memory(checks, cfg, traits)
    own, blocks = num_blocks_per_worker(plans, avail, traits, num_gpu_blocks_override)
    tokens, conc = report_capacity(plans[0], own[0] if traits.capacity_log_per_worker else blocks, cfg, traits,
                                   cache_block_size)
    return KVCacheConfigs(num_blocks=blocks, kv_cache_tokens=tokens, max_concurrency=conc,
                          needed_memory_bytes=admission.needed_memory_bytes,
                          check_memory_bytes=admission.check_memory_bytes,
                          error=admission.error, estimated_max_model_len=admission.estimated_max_model_len,
                          max_model_len=cfg.max_model_len,
                          estimated_max_model_lens=admission.estimated_max_model_lens)


def admission_checks(plans: Sequence[KVCachePlan], avail: Sequence[int],
                     traits: VersionTraits) -> list[tuple[KVCachePlan, int]]:
    """The (plan, memory) pairs the admission check runs on: each worker with layers on its own
    memory, or v0.14.1 … v0.16.0 once on the global groups against the smallest worker's memory
    (:func:`check_rules`); from v0.29 less one block, the BlockPool's null block
    (kv_cache_utils.py @ v0.29.0, kv_cache_planning.py @ v0.33.0)."""
    check = [m - p.bytes_per_block if (traits.null_block_reserved and p.groups) else m
             for p, m in zip(plans, avail)]
    _, _, global_check = check_rules(traits)
    if global_check and any(p.groups for p in plans):
        return [(merged_plan(plans), min(check))]
    return [(p, m) for p, m in zip(plans, check) if p.groups]


def auto_fit_max_model_len(checks: Sequence[tuple[KVCachePlan, int]], cfg: SchedulerView,
                           traits: VersionTraits) -> int:
    """``_auto_fit_max_model_len`` (``--max-model-len -1``, v0.14+; kv_cache_utils.py @ v0.14.1):
    ``max_model_len`` lowered to the smallest ``estimate_max_model_len`` over the checks (on the
    memory the check uses); <= 0 when not one token fits (:data:`AUTO_FIT_ERROR`)."""
    _, first_only, _ = check_rules(traits)
    return min([cfg.max_model_len] + [estimate_max_model_len(m, p, cfg, first_group_only=first_only)
                                      for p, m in checks])


@dataclass(frozen=True)
class Admission:
    """The admission check over every (plan, memory) pair; the first failure's error."""

    needed_memory_bytes: tuple[int, ...]
    check_memory_bytes: tuple[int, ...]
    estimated_max_model_lens: tuple[int, ...]
    error: str | None
    estimated_max_model_len: int | None  # in the error (None when the check passed)


def check_enough_kv_cache_memory(checks: Sequence[tuple[KVCachePlan, int]], cfg: SchedulerView,
                                 traits: VersionTraits) -> Admission:
    """``check_enough_kv_cache_memory`` (kv_cache_utils.py @ v0.10.1.1 … v0.29.0,
    kv_cache_planning.py @ v0.33.0): no memory at all, or a one-request need above the memory,
    raises; the need per layer or per group as :func:`check_rules` says."""
    legacy, first_only, _ = check_rules(traits)
    needed: list[int] = []
    estimates: list[int] = []
    error, estimated = None, None
    for p, m in checks:
        need = p.needed_memory_bytes(cfg, per_layer=legacy, first_group_only=first_only)
        needed.append(need)
        estimates.append(estimate_max_model_len(m, p, cfg, per_layer=legacy, first_group_only=first_only))
        if error is not None:
            continue  # the first failing worker's error is the one raised
        if m <= 0:
            error = no_available_memory_error(traits)
        elif need > m:
            estimated = estimates[-1]
            error = insufficient_memory_error(cfg.max_model_len, need, m, estimated, traits)
    return Admission(tuple(needed), tuple(m for _, m in checks), tuple(estimates), error, estimated)


def num_blocks_per_worker(plans: Sequence[KVCachePlan], avail: Sequence[int], traits: VersionTraits,
                          num_gpu_blocks_override: int | None) -> tuple[list[int], int]:
    """(each worker's own block count, ``num_blocks`` = the min over workers). The override replaces
    the counts where it is not already in the available memory (before v0.20.2), and where the
    capacity is logged per worker (v0.10 / v0.11, kv_cache_utils.py @ v0.11.0)."""
    own = [num_blocks_from_available(m, p) for p, m in zip(plans, avail)]
    if num_gpu_blocks_override is not None and (traits.capacity_log_per_worker
                                                or not traits.override_folds_into_available):
        own = [num_gpu_blocks_override if p.groups else b for p, b in zip(plans, own)]
    return own, min(own)


def report_capacity(plan0: KVCachePlan, num_blocks: int, cfg: SchedulerView, traits: VersionTraits,
                    cache_block_size: int | None) -> tuple[int, float]:
    """(tokens, concurrency) of ``_report_kv_cache_config``, from the first worker's plan and the block
    count it logs: v0.10/v0.11 log each worker's own count before the min over workers; v0.12.0
    moved the report after it (kv_cache_utils.py @ v0.12.0 ``get_kv_cache_configs``). v0.10.x logs
    a single-group model's tokens as ``num_blocks * cache_config.block_size`` (``cache_block_size``:
    the attention block size, not the spec's for a pure mamba model;
    ``_get_kv_cache_config_uniform_type`` @ v0.10.1.1)."""
    if plan0.is_attention_free:
        return 0, 0.0
    if (traits.capacity_tokens_from_cache_block and len(plan0.groups) == 1 and cache_block_size is not None
            and not traits.is_v0):
        return num_blocks * cache_block_size, max_concurrency(num_blocks, plan0, cfg)
    return kv_cache_size_tokens(num_blocks, plan0, cfg, traits), max_concurrency(num_blocks, plan0, cfg)


def format_gib(n: int | float) -> str:
    """``format_gib`` (vllm/utils/mem_utils.py): ``f"{round(b / GiB, 2)}"`` -- prints 55.6, not 55.60."""
    return f"{round(n / GiB, 2)}"


def no_available_memory_error(traits: VersionTraits) -> str:
    """``_check_enough_kv_cache_memory`` when available <= 0 (kv_cache_utils.py @ v0.11.0 / v0.16.0 /
    v0.24.0; kv_cache_planning.py @ v0.33.0)."""
    msg = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    if traits.error_cpu_hint:
        msg += ("initializing the engine (this flag also controls CPU memory reservation on the CPU "
                "backend, despite its name). ")
    elif traits.error_docs_link:
        msg += "initializing the engine. "
    else:
        return msg + "initializing the engine."
    return msg + ("See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                  "for more details.")


def insufficient_memory_error(max_model_len: int, needed_bytes: int, available_bytes: int,
                              estimated_max_len: int, traits: VersionTraits) -> str:
    """The "To serve at least one request with the model's max seq len" error, per version:
    v0.11.0 (``:.2f`` GiB, "models's"), v0.13.0 (the same + docs link), v0.14–v0.21 (format_gib,
    docs link, "models's"),
    v0.24.0+ ("model's", CPU-backend hint) -- kv_cache_utils.py / kv_cache_planning.py."""
    if not traits.error_format_gib:
        est = ("Based on the available memory, "
               f"the estimated maximum model length is {estimated_max_len}.") if estimated_max_len > 0 else ""
        # v0.13.0 keeps the ``:.2f`` figures and appends the docs link (kv_cache_utils.py @ v0.13.0 l.710)
        link = (" See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
                if traits.error_docs_link else "")
        return (f"To serve at least one request with the models's max seq len "
                f"({max_model_len}), ({needed_bytes / GiB:.2f} GiB KV "
                f"cache is needed, which is larger than the available KV cache "
                f"memory ({available_bytes / GiB:.2f} GiB). "
                f"{est} "
                f"Try increasing `gpu_memory_utilization` or decreasing "
                f"`max_model_len` when initializing the engine.{link}")
    est = ("Based on the available memory, "
           f"the estimated maximum model length is {estimated_max_len}. ") if estimated_max_len > 0 else ""
    if not traits.error_cpu_hint:
        return (f"To serve at least one request with the models's max seq len "
                f"({max_model_len}), ({format_gib(needed_bytes)} GiB KV "
                f"cache is needed, which is larger than the available KV cache "
                f"memory ({format_gib(available_bytes)} GiB). {est}"
                f"Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                f"when initializing the engine. "
                f"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                f"for more details.")
    return (f"To serve at least one request with the model's max seq len "
            f"({max_model_len}), ({format_gib(needed_bytes)} GiB KV "
            f"cache is needed, which is larger than the available KV cache "
            f"memory ({format_gib(available_bytes)} GiB). {est}"
            f"Try increasing `gpu_memory_utilization` (which also controls "
            f"CPU memory on the CPU backend) or decreasing `max_model_len` "
            f"when initializing the engine. "
            f"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
            f"for more details.")


def v0_cache_size_error(max_model_len: int, num_gpu_blocks: int, block_size: int) -> str:
    """V0 ``raise_if_cache_size_invalid`` (vllm/worker/worker.py @ v0.6.6.post1, spec §11)."""
    return (f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({block_size * num_gpu_blocks}). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def mamba_max_num_seqs_error(max_num_seqs: int, num_blocks: int) -> str:
    """``CompilationConfig`` check for FULL decode CUDA graphs on mamba models
    (vllm/config/compilation.py @ v0.20.2 … v0.33.0)."""
    return (f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache "
            f"blocks ({num_blocks}). Each decode sequence "
            "requires one Mamba cache block, so CUDA graph capture cannot "
            "proceed. Please lower max_num_seqs to at most "
            f"{num_blocks} or increase "
            "gpu_memory_utilization.")
