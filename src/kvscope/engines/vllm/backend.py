"""vLLM attention-backend and block-size selection (the stage SGLang's ``backend.py`` covers).

* 0.10 … 0.17: ``CudaPlatformBase.check_and_update_config`` sets the block size
  (:func:`block_size_classic`);
* 0.18+: the attention-backend registry picks a backend per GPU, model and KV dtype, and the block
  size follows it (:func:`default_block_size`, ``Platform.update_block_size_for_backend``);
* :func:`select_block_size` is the stage ``resolve_args`` runs: one of the above, DeepSeek-V4's own
  backends, or the estimated default when the GPU architecture is unknown.

Version-dependent rules read ``VersionTraits`` (release.py). Conformance:
tests/conformance/test_vllm_block_size.py (the releases' own selection code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, FlagError
from .release import VersionTraits

def block_size_classic(user: int | None, *, is_mla: bool, gpu_sm: str, is_sparse_mla: bool,
                       traits: VersionTraits, qk_nope_head_dim: int | None = 128) -> tuple[int, str]:
    """``CudaPlatformBase.check_and_update_config`` (vllm/platforms/cuda.py @ v0.10.1.1 / v0.11.0,
    no ``VLLM_ATTENTION_BACKEND``): unset -> 16; MLA on compute capability 10.0 -> CUTLASS_MLA,
    forced 128; MLA on 9.x -> FlashMLA, forced 64; from v0.11.0 a sparse (``index_topk``) MLA model
    is forced to 64 last. The forced sizes override ``--block-size``. v0.16.0 / v0.17.0 (no
    ``--attention-backend``): see the ``mla_block_rule_16`` branch (multiples are kept)."""
    block, source = (user, "flag") if user is not None else (16, "CacheConfig default (platforms/cuda.py)")
    if is_mla and traits.mla_block_rule_16:
        # v0.15.1 … v0.17.0: Blackwell family (10.x) dense MLA -> FlashInfer-MLA when qk_nope_head_dim
        # is 128 (block kept if 32 or a multiple of 64, else 64), else CUTLASS-MLA (multiple of 128,
        # else 128); otherwise FlashMLA where dense FlashMLA runs (Hopper: multiple of 64, else 64);
        # sparse (index_topk) forced to 64 (FlashMLA sparse) last. v0.13.0 / v0.14.1: no FlashInfer
        # branch (CUTLASS on the Blackwell family, sparse excluded); v0.12.0: CUTLASS on
        # ``is_device_capability(100)`` only, sparse included (platforms/cuda.py).
        cap = _cap(gpu_sm)
        family = traits.cutlass_mla_blackwell_family
        blackwell = cap is not None and (cap[0] == 10 if family else cap == (10, 0))
        if blackwell and not is_sparse_mla and qk_nope_head_dim == 128 and traits.flashinfer_mla_block_rule:
            if block != 32 and block % 64:
                block, source = 64, "forced 64 for FlashInfer-MLA (Blackwell)"
        elif blackwell and (not is_sparse_mla or not family):
            if block % 128:
                block, source = 128, "forced 128 for CUTLASS_MLA (Blackwell)"
        elif cap is not None and cap[0] == 9 and block % 64:
            block, source = 64, "forced 64 for FlashMLA (Hopper)"
        if is_sparse_mla and block != 64:
            block, source = 64, "forced 64 for FlashMLASparse"
        return block, source
    if is_mla:
        if gpu_sm == "sm100":
            block, source = 128, "forced 128 for CUTLASS_MLA (Blackwell sm100)"
        elif gpu_sm.startswith("sm9") and block != 64:
            block, source = 64, "forced 64 for FlashMLA (Hopper)"
        if is_sparse_mla and traits.sparse_mla_block_64:
            block, source = 64, "forced 64 for FlashMLASparse"
    return block, source



# --- vLLM >= 0.18: the attention-backend registry picks the block size (update_block_size_for_backend @ v0.18.0) ---

_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")


def _cap(gpu_sm: str) -> tuple[int, int] | None:
    """"sm90" -> (9, 0), "sm103" -> (10, 3), "sm120" -> (12, 0); None for non-CUDA names."""
    if not gpu_sm.startswith("sm") or not gpu_sm[2:].isdigit():
        return None
    n = int(gpu_sm[2:])
    return (n // 10, n % 10)


def _multiple(block: int | None, sizes: tuple[int, ...]) -> bool:
    """``AttentionBackend.supports_block_size`` (vllm/v1/attention/backend.py @ v0.19.1+): no
    ``--block-size`` passes; otherwise a multiple of one of the kernel block sizes."""
    return block is None or any(block % s == 0 for s in sizes)


def _flash_attn_valid(traits: VersionTraits, cap: tuple[int, int], head_size: int, kv: str, has_sink: bool) -> bool:
    """``FlashAttentionBackend.validate_configuration`` (flash_attn.py + fa_utils.py @ v0.19.1 …
    v0.33.0, FA2/FA3/FA4 kernels installed): FA3 on SM9x, FA4 on SM10x (FA2 for heads > 128 except
    192 there), FA2 elsewhere; heads up to 256 (v0.20.0+: 512 where FA4 runs: SM9x/10x/11x); sinks
    need FA3 (v0.20.0+: FA3/FA4) and SM90+; fp8 KV: FA3 on SM9x (v0.19-v0.20 any fp8 name; v0.26
    fp8/fp8_e4m3), v0.27+ also FA4 on SM10x for heads <= 128 or 192 (not fp8_e5m2; read in 0.27.1)."""
    t = traits
    major = cap[0]
    fa4_device = major in (9, 10, 11)
    if cap < (8, 0) or head_size % 8:
        return False
    if head_size > 256 and not (t.fa_head_512_fa4 and fa4_device and head_size <= 512):
        return False

    def fa_version(head: int | None) -> int:
        if major == 9:
            return 4 if (t.fa4_large_head_upgrade and head is not None and head > 256) else 3
        if major == 10:
            if head is not None and head > 128 and not (head == 192 and not t.fa4_head_192_v_head) \
                    and not (t.fa4_hd256_kernel and head == 256):
                return 2
            return 4
        return 2

    if has_sink:
        if cap < (9, 0) or fa_version(None) not in ((3, 4) if t.fa_sinks_fa4 else (3,)):
            return False
    if kv in ("auto", "float16", "bfloat16"):
        return True
    if not t.fa_fp8_e4m3_only:
        return kv.startswith("fp8") and major == 9
    if not t.fa4_fp8_kv:
        return kv in ("fp8", "fp8_e4m3") and major == 9
    if kv not in ("fp8", "fp8_e4m3"):
        return False
    ver = fa_version(head_size)
    if t.fa4_hd256_kernel and major == 10 and head_size == 256:
        return False  # FA4's head-256 kernel does not take a quantized KV cache: FA2
    if major == 9:
        return ver == 3 or (t.fa4_sm90_fp8_head_512 and ver == 4 and head_size == 512)
    return ver == 4 and major == 10


# (backend, kernel block sizes, passes its validate_configuration)
_Candidate = tuple[str, tuple[int, ...], bool]
# (backend, kernel block sizes, valid, in the GPU's priority list)
_Ranked = tuple[str, tuple[int, ...], bool, bool]


def _backend_candidates(traits: VersionTraits, cap: tuple[int, int], *, is_mla: bool, is_sparse_mla: bool,
                        kv_cache_dtype: str, head_size: int, num_heads: int, qk_nope_head_dim: int | None,
                        has_sink: bool, block: int | None) -> list[_Ranked]:
    """(backend, kernel block sizes, valid, in the priority list) in ``_get_backend_priorities`` order
    (vllm/platforms/cuda.py @ v0.19.1 … v0.33.0) with each backend's ``validate_configuration``; a
    ``--block-size`` must be a multiple of a kernel block. Backends outside the GPU's list that
    ``--attention-backend`` can still select come last, marked not listed."""
    if is_mla:
        order, out_of_list = _mla_candidates(traits, cap, is_sparse_mla=is_sparse_mla, kv=kv_cache_dtype,
                                             head_size=head_size, num_heads=num_heads,
                                             qk_nope_head_dim=qk_nope_head_dim)
    else:
        order, out_of_list = _mha_candidates(traits, cap, kv_cache_dtype, head_size, has_sink), []
    out = [(n, sizes, ok and _multiple(block, sizes), True) for n, sizes, ok in order]
    listed = {c[0] for c in out}
    out += [(n, sizes, ok and _multiple(block, sizes), False) for n, sizes, ok in out_of_list if n not in listed]
    return out


def _mha_candidates(t: VersionTraits, cap: tuple[int, int], kv: str, head_size: int,
                    has_sink: bool) -> list[_Candidate]:
    """MHA: SM10x FlashInfer first, elsewhere FlashAttention first; then Triton, Flex."""
    major = cap[0]
    quant = kv in _FP8 or kv == "fp8_ds_mla"
    fa_ok = _flash_attn_valid(t, cap, head_size, kv, has_sink)
    fi_heads = (64, 128, 256, 512) if t.flashinfer_head_512 else (64, 128, 256)
    fi_sink = not has_sink or major == 10 or (t.flashinfer_sinks_sm12x and major == 12) \
        or (t.flashinfer_sinks_sm90 and cap == (9, 0))
    fi_ok = (8, 0) <= cap <= (12, 1) and head_size in fi_heads and kv in ("auto", "float16", "bfloat16") + _FP8 \
        and fi_sink
    tr_ok = head_size >= 32 and kv in ("auto", "float16", "bfloat16") + _FP8
    fx_ok = kv in ("auto", "float16", "bfloat16") and not has_sink
    # v0.33: FA4's SM90 fp8-KV head-512 kernel uses 64-token pages (flash_attn.py
    # _get_sm90_fa4_fp8_kv_block_size): kernel block [64], preferred max(16, 64)
    # v0.30+: FA4's Blackwell head-256 kernel (uses_fa4_hd256_kernel, FA4_HD256_PAGE_SIZE) pages
    # by 128 tokens unless the KV cache is quantized (_fa4_hd256_fallback_reason; sinks are not
    # passed there): kernel block [128], preferred 128
    fa_sizes = (64,) if (t.fa4_sm90_fp8_head_512 and major == 9 and kv in ("fp8", "fp8_e4m3")
                         and head_size == 512) else \
        (128,) if (t.fa4_hd256_kernel and major in (10, 11) and head_size == 256 and not quant) else (16,)
    fa = ("FLASH_ATTN", fa_sizes, fa_ok)
    fi = ("FLASHINFER", (16, 32, 64), fi_ok)
    order = [fi, fa] if major == 10 else [fa, fi]
    return order + [("TRITON_ATTN", (16,), tr_ok), ("FLEX_ATTENTION", (16,) if t.flex_kernel_block_16 else (1,), fx_ok)]


def _mla_candidates(t: VersionTraits, cap: tuple[int, int], *, is_sparse_mla: bool, kv: str, head_size: int,
                    num_heads: int, qk_nope_head_dim: int | None) -> tuple[list[_Candidate], list[_Candidate]]:
    """MLA (dense and sparse): (the GPU's priority list, backends reached only by name)."""
    major = cap[0]
    quant = kv in _FP8 or kv == "fp8_ds_mla"
    plain_kv = kv in ("auto", "float16", "bfloat16")
    mla_kv = plain_kv or kv in ("fp8", "fp8_e4m3")
    dense = not is_sparse_mla
    fi_mla = ("FLASHINFER_MLA", (32, 64), dense and major == 10 and mla_kv
              and qk_nope_head_dim in ((64, 128, 192) if t.mla_qk_nope_192 else (64, 128)))
    cutlass = ("CUTLASS_MLA", (128,), dense and major == 10 and mla_kv)
    fa_mla = ("FLASH_ATTN_MLA", (16,), dense and major == 9 and plain_kv)
    flashmla = ("FLASHMLA", (64,), dense and major == 9 and mla_kv)  # is_flashmla_dense_supported: Hopper
    triton = ("TRITON_MLA", (16,), dense and mla_kv)
    sp = is_sparse_mla and head_size == 576
    fi_sparse = ("FLASHINFER_MLA_SPARSE", (32, 64), sp and major == 10 and mla_kv
                 and qk_nope_head_dim in ((128, 192) if t.mla_qk_nope_192 else (128,)))
    fm_sparse = ("FLASHMLA_SPARSE", (64,), sp and major in (9, 10) and kv in ("auto", "bfloat16", "fp8_ds_mla", "fp8"))
    fa4_sparse = ("FLASH_ATTN_MLA_SPARSE_FA4", (64,), sp and major == 10 and kv in ("auto", "bfloat16")
                  and num_heads in (8, 16, 32, 64, 128) and qk_nope_head_dim in (128, 192))
    out_of_list = [fa4_sparse] if t.fa4_mla_sparse else []
    if major == 10:
        if quant and t.sparse_mla_order_by_kv_dtype:
            sparse = [fi_sparse, fm_sparse]
        elif num_heads <= 16:
            sparse = ([fa4_sparse] if t.fa4_mla_sparse else []) + [fi_sparse, fm_sparse]
        else:
            sparse = [fm_sparse, fi_sparse]
        # R1 dims (qk_nope 128, rope 64; v_head 128 assumed) + fp8 KV only: FLASHINFER_MLA before it
        # takes all of these, so it is reached only through --attention-backend
        tokenspeed = [("TOKENSPEED_MLA", (32, 64), dense and kv in ("fp8", "fp8_e4m3") and qk_nope_head_dim == 128
                       and head_size == 576)] if t.tokenspeed_mla else []
        return [fi_mla] + tokenspeed + [cutlass, fa_mla, flashmla, triton] + sparse, out_of_list
    if major == 12 and t.sm120_mla_backends:
        return [triton, ("FLASHINFER_MLA_SPARSE_SM120", (64,) if t.sm120_sparse_block_64_only else (64, 256),
                         sp and kv in ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla"))], out_of_list
    order = [fa_mla, flashmla, fi_mla, triton]
    if t.flash_attn_mla_sparse:
        order += [("FLASH_ATTN_MLA_SPARSE", (64,), sp and major == 9 and plain_kv)]
    order += [fm_sparse]
    if t.flashinfer_mla_sparse_sm90:  # first for head 512, last otherwise
        fi90 = ("FLASHINFER_MLA_SPARSE_SM90", (64,), is_sparse_mla and head_size in (512, 576)
                and major == 9 and kv in ("auto", "bfloat16", "fp8", "fp8_e4m3"))
        order = order[:4] + ([fi90] if head_size == 512 else []) + order[4:] + ([fi90] if head_size != 512 else [])
    return order, out_of_list


def _rocm_candidates(traits: VersionTraits, gcn_arch: str, *, is_mla: bool, is_sparse_mla: bool, kv_cache_dtype: str,
                     head_size: int, has_sink: bool, block: int | None
                     ) -> list[_Ranked]:
    """``RocmPlatform`` ``_get_backend_priorities`` + each backend's ``validate_configuration``
    (vllm/platforms/rocm.py @ v0.19.1 … v0.33.0) with vLLM's env defaults (``VLLM_ROCM_USE_AITER``
    off, so no AITER MLA / AITER FA) and aiter installed (``is_aiter_found_and_supported``: MI300 /
    MI350, gfx942 / gfx950). Sparse MLA: ROCM_AITER_MLA_SPARSE only; MLA: TRITON_MLA; MHA:
    ROCM_ATTN (heads 32-256 listed, no sinks), ROCM_AITER_UNIFIED_ATTN (heads >= 32, sinks; prefers
    64), TRITON_ATTN."""
    kv = kv_cache_dtype
    t = traits
    if not t.rocm_selector_block_size:
        block = None
    out: list[tuple[str, tuple[int, ...], bool]] = []

    def add(name: str, sizes: tuple[int, ...], ok: bool) -> None:
        out.append((name, sizes, ok and _multiple(block, sizes)))

    plain = kv in ("auto", "float16", "bfloat16")
    if is_sparse_mla:
        fp8_ok = t.rocm_aiter_sparse_fp8 and kv in ("fp8", "fp8_e4m3")
        add("ROCM_AITER_MLA_SPARSE", (1,), is_mla and (plain or fp8_ok))
        return [c + (True,) for c in out]
    if is_mla:
        add("TRITON_MLA", (16,), plain or kv in ("fp8", "fp8_e4m3"))
        return [c + (True,) for c in out]
    mha_kv = plain or kv in _FP8
    add("ROCM_ATTN", (16,), mha_kv and (not has_sink or t.rocm_attn_sinks)
        and head_size in (32, 64, 80, 96, 128, 160, 192, 224, 256))
    if any(a in gcn_arch for a in ("gfx942", "gfx950")):
        add("ROCM_AITER_UNIFIED_ATTN", (16,), mha_kv and head_size >= 32)
    add("TRITON_ATTN", (16,), mha_kv and head_size >= 32)
    if not t.rocm_full_priorities:
        # v0.18.0 _get_backend_priorities (rocm.py): ROCM_ATTN only with use_prefill_decode_attention,
        # AITER unified only with VLLM_ROCM_USE_AITER*: by default TRITON_ATTN alone; the others are
        # reached through --attention-backend
        return [c + (c[0] == "TRITON_ATTN",) for c in out]
    return [c + (True,) for c in out]


def mla_cache_dtype(traits: VersionTraits, backend: str | None, kv_cache_dtype: str) -> str:
    """The MLA cache dtype after backend selection (``MLAAttention.__init__``,
    vllm/model_executor/layers/attention/mla_attention.py @ v0.19.1 / v0.20.2: FLASHMLA_SPARSE turns
    any fp8 KV into DeepSeek's ``fp8_ds_mla`` (656 B/token); v0.24.0 / v0.26.0+
    ``_canonicalize_sparse_mla_kv_cache_dtype``: the same, and FLASHINFER_MLA_SPARSE_SM120 turns
    auto / fp8 / fp8_e4m3 into ``fp8_ds_mla``)."""
    quantized = kv_cache_dtype.startswith("fp8")
    if backend == "FLASHMLA_SPARSE" and quantized:
        return "fp8_ds_mla"
    if backend == "FLASHINFER_MLA_SPARSE_SM120" and traits.sm120_sparse_fp8_ds_mla and \
            kv_cache_dtype in ("auto", "fp8", "fp8_e4m3"):
        return "fp8_ds_mla"
    return kv_cache_dtype


# every backend the priority tables above name (``--attention-backend`` outside a GPU's own list:
# rejected for compute capability or MLA kind, as vLLM's validate_configuration does)
_CUDA_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER_MLA", "TOKENSPEED_MLA",
                  "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA", "FLASHINFER_MLA_SPARSE",
                  "FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4",
                  "FLASHINFER_MLA_SPARSE_SM90", "FLASHINFER_MLA_SPARSE_SM120")
_ROCM_BACKENDS = ("ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN", "TRITON_MLA", "ROCM_AITER_MLA_SPARSE")


@dataclass(frozen=True)
class _SelectorQuery:
    """What each backend's ``validate_configuration`` is asked (vllm/v1/attention/backend.py @ v0.19.1
    … v0.33.0), on CUDA (``cap``) or ROCm (``gpu_sm`` = GCN arch)."""

    traits: VersionTraits
    gpu_sm: str
    rocm: bool
    cap: tuple[int, int] | None  # compute capability (CUDA only)
    is_mla: bool
    is_sparse_mla: bool
    kv_cache_dtype: str
    head_size: int
    num_heads: int  # attention heads per rank
    qk_nope_head_dim: int | None
    has_sink: bool
    block_size: int | None  # --block-size (None: unset)

    def describe(self) -> str:
        """The configuration vLLM's "not valid" / "No valid attention backend" errors print."""
        return (f"(vLLM {self.traits.version}, {self.gpu_sm}, head_size={self.head_size}, kv_cache_dtype="
                f"{self.kv_cache_dtype}, block_size={self.block_size}, use_mla={self.is_mla}, "
                f"use_sparse={self.is_sparse_mla}).")


def default_block_size(traits: VersionTraits, *, gpu_sm: str, vendor: str = "nvidia", is_mla: bool = False,
                       is_sparse_mla: bool = False, kv_cache_dtype: str = "auto", head_size: int = 128,
                       num_heads: int = 32, qk_nope_head_dim: int | None = 128, has_sink: bool = False,
                       user_block_size: int | None = None, is_hybrid: bool = False,
                       selected_backend: str | None = None) -> tuple[int, str | None, str]:
    """(block_size, backend, source) of vLLM >= 0.18 on CUDA and ROCm (the backend registry;
    the 0.18.0 differences are inline): the GPU's backend candidates (:func:`_backend_candidates`,
    :func:`_rocm_candidates`), the one backend ``--attention-backend`` names
    (:func:`_validate_selected`) or the first valid one (:func:`_first_valid_backend`), then its
    block size (:func:`_preferred_block_size`).

    Not modelled: other platforms (XPU/CPU/TPU: 16, estimated), ``VLLM_ROCM_USE_AITER=1``,
    per-model backend overrides (Gemma 4), models mixing backends beyond DSA indexer + MLA,
    ``--attention-config`` options, 0.10/0.11's ``VLLM_ATTENTION_BACKEND``. Conformance:
    tests/conformance/test_vllm_block_size.py (the releases' own selection code).
    """
    rocm = vendor == "amd" and gpu_sm.startswith("gfx")
    cap = _cap(gpu_sm) if vendor == "nvidia" else None
    if cap is None and not rocm:
        if user_block_size is not None:
            return user_block_size, None, "flag"
        return 16, None, "CacheConfig.DEFAULT_BLOCK_SIZE (backend registry of this platform not modelled) [estimated]"
    q = _SelectorQuery(traits=traits, gpu_sm=gpu_sm, rocm=rocm, cap=cap, is_mla=is_mla,
                       is_sparse_mla=is_sparse_mla, kv_cache_dtype=kv_cache_dtype, head_size=head_size,
                       num_heads=num_heads, qk_nope_head_dim=qk_nope_head_dim, has_sink=has_sink,
                       block_size=user_block_size)
    cands = _platform_candidates(q)
    if selected_backend is not None:
        name, sizes = _validate_selected(q, cands, selected_backend)
    else:
        name, sizes = _first_valid_backend(q, cands)
    return _preferred_block_size(q, name, sizes, is_hybrid)


def _platform_candidates(q: _SelectorQuery) -> list[_Ranked]:
    """The platform's (backend, kernel block sizes, valid, listed) table: ROCm (``vendor="amd"``)
    ``RocmPlatform`` priorities with aiter found and ``VLLM_ROCM_USE_AITER`` off
    (:func:`_rocm_candidates`); CUDA ``_get_backend_priorities`` (:func:`_backend_candidates`)."""
    if q.rocm:
        return _rocm_candidates(q.traits, q.gpu_sm, is_mla=q.is_mla, is_sparse_mla=q.is_sparse_mla,
                                kv_cache_dtype=q.kv_cache_dtype, head_size=q.head_size, has_sink=q.has_sink,
                                block=q.block_size)
    assert q.cap is not None
    return _backend_candidates(q.traits, q.cap, is_mla=q.is_mla, is_sparse_mla=q.is_sparse_mla,
                               kv_cache_dtype=q.kv_cache_dtype, head_size=q.head_size, num_heads=q.num_heads,
                               qk_nope_head_dim=q.qk_nope_head_dim, has_sink=q.has_sink, block=q.block_size)


def _validate_selected(q: _SelectorQuery, cands: list[_Ranked], selected_backend: str) -> tuple[str, tuple[int, ...]]:
    """``--attention-backend``: ``get_attn_backend_cls`` (vllm/platforms/cuda.py @ v0.19.1 … v0.33.0)
    validates the selected backend alone; invalid, or not in this GPU's priority list (wrong compute
    capability / MLA kind for it), raises like vLLM's "Selected backend ... is not valid"."""
    sel = selected_backend.upper()
    hit = next(((n, sz, ok) for n, sz, ok, _listed in cands if n == sel), None)
    if hit is None and sel not in (_ROCM_BACKENDS if q.rocm else _CUDA_BACKENDS):
        raise ConfigError(f"--attention-backend {selected_backend}: not modelled by kvscope for "
                          f"{'ROCm' if q.rocm else 'CUDA'}", field="--attention-backend",
                          fix="drop it (kvscope then follows vLLM's priority order)")
    if hit is None or not hit[2]:
        raise ConfigError(f"Selected backend AttentionBackendEnum.{sel} is not valid for this configuration "
                          f"{q.describe()}", field="--attention-backend",
                          fix="drop --attention-backend or pick a backend this GPU and model support")
    return hit[0], hit[1]


def _first_valid_backend(q: _SelectorQuery, cands: list[_Ranked]) -> tuple[str, tuple[int, ...]]:
    """``CudaPlatformBase.get_attn_backend_cls`` walks ``_get_backend_priorities``
    (vllm/platforms/cuda.py @ v0.19.1, v0.20.2, v0.26.0, v0.28.0, v0.33.0) and takes the first
    backend whose ``validate_configuration`` passes (head size, KV dtype, block size when
    ``--block-size`` is given, MLA / sparse, capability, sinks; vllm/v1/attention/backend.py).
    MHA: SM10x FlashInfer, FlashAttention, Triton, Flex; other GPUs FlashAttention first.
    MLA: SM10x FlashInfer-MLA, CUTLASS-MLA, FA-MLA, FlashMLA, Triton-MLA; SM9x FA-MLA (bf16 KV),
    FlashMLA (fp8 KV), Triton-MLA; SM8x / SM12x Triton-MLA. Sparse MLA (DSA): SM10x FlashInfer
    sparse for fp8 KV or <= 16 heads per rank, else FlashMLA sparse; SM9x FlashMLA sparse
    (0.26+: FlashAttention-MLA sparse first for bf16 KV). FlashAttention pages: FA4 head 256 on
    SM10x 128 (v0.30+), SM90 fp8 head 512 64 (v0.33)."""
    chosen = next(((n, sz) for n, sz, ok, listed in cands if ok and listed), None)
    if chosen is None:
        raise ConfigError(f"No valid attention backend found for {'rocm' if q.rocm else 'cuda'} {q.describe()}",
                          field="--block-size" if q.block_size is not None else "--kv-cache-dtype",
                          fix="drop --block-size, or use another --kv-cache-dtype")
    return chosen


def _preferred_block_size(q: _SelectorQuery, name: str, sizes: tuple[int, ...],
                          is_hybrid: bool) -> tuple[int, str, str]:
    """The block size once the backend is chosen.

    * ``--block-size`` is kept (``user_specified_block_size``). Otherwise
      ``Platform.update_block_size_for_backend`` (vllm/platforms/interface.py @ v0.19.1 … v0.33.0)
      takes the first attention layer's ``get_preferred_block_size(16)``: 16 if the backend accepts
      it, else its smallest kernel block (FlashInfer-MLA 32, FlashMLA 64, CUTLASS-MLA 128);
      ROCM_AITER_UNIFIED_ATTN prefers 64.
    * Sparse MLA: the first layer is the DSA indexer K cache (``DeepseekV32IndexerBackend``, kernel
      block 64 on CUDA; vllm/v1/attention/backends/mla/indexer.py), so 64; 0.33 takes the smallest
      size every backend accepts (``_preferred_block_size_for_backends``), also 64.
    * Hybrid (mamba) models: v0.19 keeps 16 (``update_block_size_for_backend`` skips them;
      ``HybridAttentionMambaModelConfig`` aligns later); from v0.20.2 phase 1 applies to them too.
      The mamba alignment itself is ``kv_cache.hybrid_kernel_block_alignment``.
    """
    if q.block_size is not None:
        return q.block_size, name, "flag"
    if is_hybrid and not q.traits.hybrid_block_from_backend:
        return 16, name, "CacheConfig.DEFAULT_BLOCK_SIZE (hybrid model: update_block_size_for_backend skips it)"
    if q.is_sparse_mla and q.is_mla:
        if q.rocm:  # DeepseekV32IndexerBackend: kernel block 1 on ROCm (v0.33: [1, MultipleOf(16)])
            return 16, name, f"CacheConfig.DEFAULT_BLOCK_SIZE: DSA indexer (first layer) and {name} accept 16"
        return 64, name, f"64: first layer is the DSA indexer (kernel block 64), backend {name}"
    if name == "ROCM_AITER_UNIFIED_ATTN" and q.traits.aiter_unified_prefers_64:
        return 64, name, f"{name} preferred block size 64"
    if _multiple(16, sizes):
        return 16, name, f"CacheConfig.DEFAULT_BLOCK_SIZE, accepted by {name}"
    block = min(sizes)
    return block, name, f"{name} preferred block size (smallest kernel block {block})"


def backend_inputs(spec: Any) -> dict[str, Any]:
    """The model facts ``default_block_size`` needs, from a ``ModelSpec`` (duck-typed): attention
    head size (MLA: ``kv_lora_rank + qk_rope_head_dim``, the size MLAAttention passes the selector),
    ``qk_nope_head_dim``, attention sinks (gpt-oss: ``GptOssForCausalLM`` layers carry ``sinks``),
    DeepSeek-V4 (own backends)."""
    is_mla = bool(getattr(spec, "is_mla", False))
    head = spec.mla_kv_dim if is_mla else getattr(spec, "head_dim", None)
    return {"head_size": head, "qk_nope_head_dim": getattr(spec, "qk_nope_head_dim", None),
            "has_sink": getattr(spec, "model_type", "") == "gpt_oss",
            "is_deepseek_v4": getattr(spec, "dsv4", None) is not None}


@dataclass(frozen=True)
class BlockChoice:
    """The attention block size vLLM settles on, with the backend and the cache dtype it implies."""

    block_size: int
    source: str  # why this size (the engine rule or "flag")
    attention_backend: str | None  # vLLM's backend name (>= 0.18, CUDA / ROCm); None = not modelled
    kv_cache_dtype: str  # after the MLA backend's canonicalisation (fp8 -> fp8_ds_mla for sparse MLA)


def select_block_size(traits: VersionTraits, *, user_block_size: int | None, attention_backend: str | None,
                      kv_cache_dtype: str, gpu_sm: str | None, gpu_vendor: str, is_mla: bool,
                      is_sparse_mla: bool, is_deepseek_v4: bool, head_size: int | None, num_heads: int,
                      qk_nope_head_dim: int | None, has_sink: bool, is_hybrid: bool) -> BlockChoice:
    """The block-size stage of ``resolve_args``: 0.10-0.17 :func:`block_size_classic`; DeepSeek-V4's
    own backends (deepseek_v4.py: DeepseekSparseSWABackend prefers 256); from 0.18 the backend
    registry (:func:`default_block_size`, then :func:`mla_cache_dtype` for MLA). Without ``gpu_sm``
    the backend is unknown: the flag, else 16 (MLA: FlashMLA's 64) [estimated]. ``num_heads`` is
    the attention heads per rank."""
    if attention_backend is not None and traits.classic_block_rule:
        raise FlagError(f"--attention-backend is modelled from vLLM 0.18 (got {traits.version}; the "
                        "check_and_update_config era is not modelled)", field="--attention-backend",
                        fix="drop it, or use --engine-version 0.18 or later")
    if traits.classic_block_rule and gpu_sm is not None:
        block, source = block_size_classic(user_block_size, is_mla=is_mla, gpu_sm=gpu_sm,
                                           is_sparse_mla=is_sparse_mla, traits=traits,
                                           qk_nope_head_dim=qk_nope_head_dim)
        return BlockChoice(block, source, None, kv_cache_dtype)
    if is_deepseek_v4:
        block, source = (user_block_size, "flag") if user_block_size is not None else \
            (256, "DeepseekSparseSWABackend.get_preferred_block_size (v0.33.0)")
        return BlockChoice(block, source, "DEEPSEEK_V4 sparse MLA", kv_cache_dtype)
    if gpu_sm is not None and not traits.is_v0 and not traits.classic_block_rule:
        block, backend, source = default_block_size(
            traits, gpu_sm=gpu_sm, vendor=gpu_vendor, is_mla=is_mla, is_sparse_mla=is_sparse_mla and is_mla,
            kv_cache_dtype=kv_cache_dtype, head_size=head_size or (576 if is_mla else 128),
            num_heads=num_heads, qk_nope_head_dim=qk_nope_head_dim, has_sink=has_sink,
            user_block_size=user_block_size, is_hybrid=is_hybrid, selected_backend=attention_backend)
        kv = mla_cache_dtype(traits, backend, kv_cache_dtype) if is_mla else kv_cache_dtype
        return BlockChoice(block, source, backend, kv)
    if user_block_size is not None:
        return BlockChoice(user_block_size, "flag", None, kv_cache_dtype)
    if is_mla:
        # no GPU arch: MLA backend taken as FlashMLA (64-token kernel blocks) [estimated]
        return BlockChoice(64, "MLA backend default (64) [estimated: GPU arch unknown]", None, kv_cache_dtype)
    return BlockChoice(16, "CacheConfig.DEFAULT_BLOCK_SIZE", None, kv_cache_dtype)


def mxfp4_moe_backend(traits: VersionTraits, capability: tuple[int, int] | None = None,
                      vendor: str = "nvidia") -> str:
    """The MXFP4 MoE backend vLLM picks by default (no env overrides, no LoRA); its weight layout is
    ``model/weights.py::vllm_mxfp4_moe_layer_bytes``.

    v0.10.x: Marlin on Hopper unless torch >= 2.8.0 and triton_kernels are installed
    (``Mxfp4MoEMethod._should_use_marlin``, quantization/mxfp4.py @ v0.10.1.1; the v0.10.1 wheel
    pins torch 2.7.1) -- and the wheels up to v0.11.0 do not bundle ``triton_kernels``: Marlin below
    v0.12 [the exact release that bundled it is not checked]. Later: Triton (``matmul_ogs``) on SM90,
    FlashInfer TRT-LLM on SM100 (``_get_priority_backends``, fused_moe/oracle/mxfp4.py @ v0.19.0)."""
    if vendor == "amd":
        return "rocm"
    major = (capability or (9, 0))[0]
    if major >= 10:
        return "flashinfer_trtllm"
    if major == 9:
        if traits.mxfp4_marlin_on_hopper:
            return "marlin"
        return "triton_hopper" if traits.mxfp4_hopper_swizzle_prepad else "triton_hopper_noprepad"
    return "marlin"

