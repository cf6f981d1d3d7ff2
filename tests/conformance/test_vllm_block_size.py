"""vLLM >= 0.19 default KV block size and attention backend: the releases' own selection code
(``vllm_engine_backend.py``) against ``backend.default_block_size``.

Cases: GPU capability x MHA / MLA / sparse MLA x head size x KV dtype x ``--block-size`` x heads
per rank x sinks. Both the backend name and the block size must match; "no valid backend" must
match too (kvscope raises ConfigError)."""
from __future__ import annotations

import itertools
import random
from typing import List, Optional

import pytest

from kvscope.engines.vllm.backend import default_block_size, mla_cache_dtype
from kvscope.engines.vllm.release import version_traits
from kvscope.errors import ConfigError

from .conftest import count_cases, require_source
from .vllm_engine_backend import BackendCase, backend_members, engine
from .vllm_engine_mem import vtuple
from .wheels import VLLM_ALL, VLLM_DEFAULT

# every read release from 0.19 (wheels.VLLM_ALL: the pins plus the FULL-only boundary releases)
RELEASES = tuple(v for v in VLLM_ALL if vtuple(v) >= (0, 18))  # update_block_size_for_backend from 0.18.0
DEFAULT = tuple(v for v in RELEASES if v in VLLM_DEFAULT)
CAPS = {"sm80": (8, 0), "sm86": (8, 6), "sm89": (8, 9), "sm90": (9, 0), "sm100": (10, 0), "sm103": (10, 3),
        "sm120": (12, 0), "gfx942": (9, 4), "gfx950": (9, 5)}  # ROCm: DeviceCapability of the GCN arch
BLOCKS = (None, 8, 16, 32, 64, 128, 256)
# --attention-backend values in the cases (every backend kvscope's tables name)
CUDA_SELECTABLE = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER_MLA", "CUTLASS_MLA",
                   "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
CUDA_SELECTABLE_SINCE = {(0, 24): ("TOKENSPEED_MLA", "FLASHINFER_MLA_SPARSE_SM120"),
                         (0, 26): ("FLASH_ATTN_MLA_SPARSE",), (0, 30): ("FLASHINFER_MLA_SPARSE_SM90",),
                         (0, 33): ("FLASH_ATTN_MLA_SPARSE_FA4",)}
ROCM_SELECTABLE = ("ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN", "TRITON_MLA", "ROCM_AITER_MLA_SPARSE")


def _cases(n: int, seed: int, version: str = "0.19.1") -> List[tuple]:
    rng = random.Random(seed)
    v = tuple(int(x) for x in version.split(".")[:2])
    cuda_pool = CUDA_SELECTABLE + tuple(n for since, names in CUDA_SELECTABLE_SINCE.items() if v >= since
                                        for n in names)
    grid = []
    for sm in CAPS:
        for kind in ("mha", "mla", "sparse"):
            kvs = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2") + \
                (("fp8_ds_mla",) if kind != "mha" else ())
            heads = (20, 64, 80, 96, 128, 192, 256, 512) if kind == "mha" else (576,)
            for kv, hs, blk in itertools.product(kvs, heads, BLOCKS):
                grid.append((sm, kind, kv, hs, blk))
    rng.shuffle(grid)
    out = []
    for sm, kind, kv, hs, blk in grid[:n]:
        num_heads = rng.choice((8, 16, 32, 128))
        sink = kind == "mha" and rng.random() < 0.2
        qk_nope = rng.choice((128, 128, 192, 64)) if kind != "mha" else 128
        hybrid = kind != "sparse" and rng.random() < 0.2
        pool = ROCM_SELECTABLE if sm.startswith("gfx") else cuda_pool
        selected = rng.choice(pool) if rng.random() < 0.25 else None
        out.append((sm, kind, kv, hs, blk, num_heads, sink, qk_nope, hybrid, selected))
    return out


def _engine_case(sm: str, kind: str, kv: str, hs: int, blk: Optional[int], heads: int, sink: bool,
                 qk_nope: int, hybrid: bool = False, selected: Optional[str] = None) -> BackendCase:
    return BackendCase(CAPS[sm], use_mla=kind != "mha", use_sparse=kind == "sparse", head_size=hs,
                       kv_cache_dtype=kv, user_block_size=blk, num_heads=heads, has_sink=sink,
                       qk_nope_head_dim=qk_nope, index_topk=kind == "sparse", is_hybrid=hybrid,
                       rocm_arch=sm if sm.startswith("gfx") else None, selected=selected)


def _kvscope(version: str, sm: str, kind: str, kv: str, hs: int, blk: Optional[int], heads: int, sink: bool,
             qk_nope: int, hybrid: bool = False, selected: Optional[str] = None):
    try:
        block, backend, _ = default_block_size(
            version_traits(version), gpu_sm=sm, vendor="amd" if sm.startswith("gfx") else "nvidia",
            is_mla=kind != "mha", is_sparse_mla=kind == "sparse",
            kv_cache_dtype=kv, head_size=hs, num_heads=heads, qk_nope_head_dim=qk_nope, has_sink=sink,
            user_block_size=blk, is_hybrid=hybrid, selected_backend=selected)
        kv_out = mla_cache_dtype(version_traits(version), backend, kv) if kind != "mha" else kv
        return backend, block, kv_out
    except ConfigError:
        return None, None, None


def _run(version: str, n: int, seed: int) -> List[str]:
    require_source("vllm", version, backend_members(version))
    eng = engine(version)
    bad = []
    cases = _cases(n, seed, version)
    for case in cases:
        want = eng.select(_engine_case(*case))
        got = _kvscope(version, *case)
        if (want.backend, want.block_size, want.kv_cache_dtype if want.backend else None) != got:
            bad.append(f"{case}: engine {want.backend}/{want.block_size}/{want.kv_cache_dtype} "
                       f"{(want.error or '')[:80]} kvscope {got[0]}/{got[1]}/{got[2]}")
    count_cases("vllm", version, "get_attn_backend_cls + update_block_size_for_backend", len(cases))
    return bad


@pytest.mark.parametrize("version", DEFAULT)
def test_block_size_default_releases(version: str, multiplier: int) -> None:
    bad = _run(version, 150 * multiplier, seed=19)
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:20])


@pytest.mark.conformance_full
@pytest.mark.parametrize("version", tuple(v for v in RELEASES if v not in DEFAULT))
def test_block_size_other_releases(version: str, multiplier: int) -> None:
    bad = _run(version, 150 * multiplier, seed=19)
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad[:20])


KNOWN = {  # (arch, kind, kv) -> (backend, block size, MLA cache dtype), DeepSeek-V3-like MLA (16 heads/rank)
    ("sm90", "mla", "auto"): ("FLASH_ATTN_MLA", 16, "auto"),
    ("sm90", "mla", "fp8"): ("FLASHMLA", 64, "fp8"),
    ("sm100", "mla", "auto"): ("FLASHINFER_MLA", 32, "auto"),
    ("sm120", "mla", "auto"): ("TRITON_MLA", 16, "auto"),
    ("sm90", "sparse", "auto"): ("FLASHMLA_SPARSE", 64, "auto"),  # 0.26+: FLASH_ATTN_MLA_SPARSE
    ("sm90", "sparse", "fp8"): ("FLASHMLA_SPARSE", 64, "fp8_ds_mla"),
    ("sm100", "sparse", "fp8"): ("FLASHINFER_MLA_SPARSE", 64, "fp8"),
    ("gfx942", "mha", "auto"): ("ROCM_ATTN", 16, "auto"),
    ("sm100", "mha", "auto"): ("FLASHINFER", 16, "auto"),
    ("sm90", "mha", "fp8"): ("FLASH_ATTN", 16, "fp8"),
}


@pytest.mark.parametrize("version", DEFAULT)
def test_block_size_known_configs(version: str) -> None:
    """DeepSeek-V3 / V3.2 (MLA 576, 128 heads / TP8 = 16 per rank) and Llama (MHA 128) on H100 / B200 /
    RTX PRO 6000 / MI300X: the engine and kvscope agree, on the values written here."""
    require_source("vllm", version, backend_members(version))
    eng = engine(version)
    for (sm, kind, kv), want_kvscope in KNOWN.items():
        if (sm, kind, kv) == ("sm90", "sparse", "auto") and vtuple(version) >= (0, 26):
            want_kvscope = ("FLASH_ATTN_MLA_SPARSE", 64, "auto")
        case = (sm, kind, kv, 576 if kind != "mha" else 128, None, 16, False, 128, False, None)
        want = eng.select(_engine_case(*case))
        assert (want.backend, want.block_size, want.kv_cache_dtype) == want_kvscope, case
        assert _kvscope(version, *case) == want_kvscope, case


@pytest.mark.parametrize("version", DEFAULT)
def test_block_size_flash_attn_hd256_blackwell(version: str) -> None:
    """``--attention-backend FLASH_ATTN`` with head 256 on B200: 0.30+'s FA4 head-256 kernel pages by
    128 tokens (flash_attn.py ``_get_fa4_hd256_block_size``); a 64-token ``--block-size`` is then
    refused; fp8 KV falls back to FA2, which takes no fp8 on SM10x."""
    require_source("vllm", version, backend_members(version))
    eng = engine(version)
    new = vtuple(version) >= (0, 30)
    for kv, blk, sink, want in (("auto", None, False, ("FLASH_ATTN", 128 if new else 16, "auto")),
                                ("auto", None, True, ("FLASH_ATTN", 128 if new else 16, "auto")),
                                ("auto", 64, False, (None, None, None) if new else ("FLASH_ATTN", 64, "auto")),
                                ("fp8", None, False, (None, None, None))):
        case = ("sm100", "mha", kv, 256, blk, 32, sink, 128, False, "FLASH_ATTN")
        got = eng.select(_engine_case(*case))
        assert (got.backend, got.block_size, got.kv_cache_dtype if got.backend else None) == want, case
        assert _kvscope(version, *case) == want, case


# MLA block rule of check_and_update_config between 0.11 and 0.19: every read release 0.12-0.18
CLASSIC_16 = tuple(v for v in VLLM_ALL if (0, 12) <= vtuple(v) < (0, 18))


@pytest.mark.conformance_full
@pytest.mark.parametrize("version", CLASSIC_16)
def test_block_size_check_and_update_config_016(version: str) -> None:
    """0.16/0.17 still force the MLA block size in ``CudaPlatformBase.check_and_update_config``
    (Blackwell FlashInfer-MLA 64 unless 32 or a multiple of 64, CUTLASS-MLA 128, Hopper FlashMLA
    64, sparse 64), run from the release against ``backend.block_size_classic``."""
    from kvscope.engines.vllm.backend import block_size_classic

    from .vllm_engine_backend import check_and_update_block_size
    require_source("vllm", version, backend_members(version))
    traits = version_traits(version)
    n = 0
    for sm, (kind, qk, blk) in itertools.product(
            ("sm80", "sm89", "sm90", "sm100", "sm103", "sm120"),
            itertools.product(("mha", "mla", "sparse"), (64, 128, 192), BLOCKS[1:] + (None,))):
        c = _engine_case(sm, kind, "auto", 576 if kind != "mha" else 128, blk, 16, False, qk)
        want = check_and_update_block_size(version, c)
        got, _ = block_size_classic(blk, is_mla=kind != "mha", gpu_sm=sm, is_sparse_mla=kind == "sparse",
                                    traits=traits, qk_nope_head_dim=qk)
        assert got == want, (sm, kind, qk, blk)
        n += 1
    count_cases("vllm", version, "check_and_update_config (block size, 0.12-0.17 MLA rule)", n)
