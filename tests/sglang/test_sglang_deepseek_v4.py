"""DeepSeek-V4 pools in SGLang 0.5.23 (engines/sglang/deepseek_v4.py): ``DSV4PoolConfigurator``.

Exact figures from the configurator's arithmetic (model_executor/pool_configurator.py,
mem_cache/deepseek_v4_memory_pool.py, kernels/ops/attention/dsv4/kv_layout.py @ v0.5.23), and a
cross-check that runs the engine's own methods (compiled from the cached wheel, runtime stubbed).
"""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path

import pytest

from kvscope.engines.sglang import deepseek_v4 as d
from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.plan import plan_sglang
from kvscope.hardware.gpus import get_gpu
from kvscope.model.spec import ModelSpec

CONFIG = Path(__file__).resolve().parents[2] / "src/kvscope/catalog/data/deepseek-ai--DeepSeek-V4-Flash/config.json"
GiB = 1 << 30


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelSpec.from_hf_config(json.loads(CONFIG.read_text()), name="deepseek-ai/DeepSeek-V4-Flash")


def test_per_token_bytes(spec):
    # KVLayout.V4: 584 B slots, pages padded to 576 B
    assert d.v4_page_bytes(256) == 149_760 and d.paged_kv_bytes_per_token(256) == 585.0
    assert d.v4_page_bytes(64) == 37_440 and d.paged_kv_bytes_per_token(256, 4) == 585.0
    assert d.v4_page_bytes(2) == 1_728 and d.paged_kv_bytes_per_token(256, 128) == 864.0
    assert d.indexer_bytes_per_token(128) == 132
    # 585 x 43 + 8/256 x (8192 + 2048) x 21
    assert d.bytes_per_swa_token(spec, 256) == 31_875.0
    # 21 x (585/4 + 132/4) + 20 x 864/128
    assert d.compressed_bytes_per_full_token(spec, 256) == 3_899.25
    assert d.c128_state_fixed_bytes(spec, d.DSV4Inputs()) == 33_152 * 4_096 * 20  # 2,715,811,840 B


def test_cap_mode_default(spec):
    """max_running_requests defaults to 256 for V4, so the SWA pool is the request cap:
    (128 + 128 + 256 + 256) x 256 + 2 x 8192 + 256 = 213,248 slots + 1024 tails x 384."""
    x = d.DSV4Inputs()
    assert d.swa_request_cap(spec, x) == (213_248, True)
    p = d.pool_sizes(spec, 30 * GiB, x)
    assert p.mode == "cap" and p.bytes_per_full_token == 3_899.25
    assert (p.full_tokens, p.swa_tokens, p.c4_tokens, p.c128_tokens, p.c4_state_pool_size) == (
        2_606_848, 606_464, 651_712, 20_366, 18_952)
    assert p.fixed_bytes == 2_715_811_840 + 606_464 * 31_875


def test_ratio_mode(spec):
    p = d.pool_sizes(spec, 30 * GiB, d.DSV4Inputs(swa_full_tokens_ratio=0.1))
    assert p.mode == "ratio" and p.bytes_per_full_token == 7_086.75
    assert (p.full_tokens, p.swa_tokens, p.c4_tokens, p.c128_tokens, p.c4_state_pool_size) == (
        4_162_048, 416_000, 1_040_512, 32_516, 13_000)


def test_cap_leaves_no_full_pool(spec):
    p = d.pool_sizes(spec, 12 * GiB, d.DSV4Inputs())
    assert p.full_tokens == 0 and p.error is not None and "leaves no room for the full KV pool" in p.error


def test_speculation_is_flagged_estimated(spec):
    p = d.pool_sizes(spec, 61 * GiB, d.DSV4Inputs(speculative=True, num_draft_tokens=6))
    assert p.estimated and (p.full_tokens, p.swa_tokens) == (6_783_744, 835_840)


def test_plan_uses_the_configurator(spec):
    a = SGLangArgs(tp_size=4)
    t = plan_sglang(spec, get_gpu("h200"), a, "0.5.23")
    assert t.starts and t.max_running_requests <= 256
    assert any("DSV4PoolConfigurator" in w for w in t.warnings)
    assert t.kv_cell_bytes == 7_087  # ratio-mode coefficient, reported as the cell


def _engine_pools_or_skip():
    try:
        from tests.conformance import loader
        from tests.conformance.wheels import engine_source
        src = engine_source("sglang", "0.5.23")
        src.read(PC)
    except Exception as exc:  # no wheel / harness changed
        pytest.skip(f"SGLang 0.5.23 engine code unavailable: {exc}")
    return src, loader


PC = "sglang/srt/model_executor/pool_configurator.py"
KVL = "sglang/kernels/ops/attention/dsv4/kv_layout.py"
MP = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"


def _engine_pools(SRC, loader, compress_ratios, available_bytes, *, page=256, mrr=256, chunked=8192, spec_tokens=0,
                 swa_ratio=None, radix=True, window=128, head=512, rope=64, index_head=128, context_len=1048576):
    """DSV4PoolConfigurator's methods compiled from the wheel; runtime getters stubbed with the
    default NVIDIA path (flashmla, KVLayout.V4, fp32 compress state, no online c128). Note:
    ``get_alloc_len_per_decode`` is stubbed as one page, so with speculation this checks the rest of
    the arithmetic around kvscope's estimated decode allocation, not that allocation itself."""
    text = SRC.read(PC)
    kvl = loader.exec_module(SRC.read(KVL), f"sglang-0.5.23/{KVL}", {}, stub_prefixes=(), module_name="kvl")
    KVLayout = kvl.KVLayout
    class Env:
        def __init__(self, v): self.v = v
        def get(self): return self.v
    envs = types.SimpleNamespace(SGLANG_OPT_USE_ONLINE_COMPRESS=Env(False), SGLANG_DSV4_COMPRESS_STATE_DTYPE=Env("float32"),
                                 SGLANG_SWA_EVICTION_INTERVAL=Env(128), SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=Env(False))
    spec_ns = types.SimpleNamespace(speculative_algorithm="DSPARK" if spec_tokens else None,
                                    speculative_num_draft_tokens=spec_tokens or None)
    sched = types.SimpleNamespace(max_running_requests=mrr, chunked_prefill_size=chunked, swa_prefix_tails=None,
                                  disable_overlap_schedule=False, swa_full_tokens_ratio=swa_ratio or 0.1,
                                  _swa_full_tokens_ratio_explicitly_set=swa_ratio is not None)
    mem_ns = types.SimpleNamespace(disable_radix_cache=not radix, enable_hisparse=False)
    disagg = types.SimpleNamespace(disaggregation_mode="null", disaggregation_decode_extra_slots=0)
    exec_ns = types.SimpleNamespace(kernel=types.SimpleNamespace(dsv4_attn_backend="flashmla"))
    mp_defs = loader.compile_defs(SRC.read(MP), f"sglang-0.5.23/{MP}",
        ["get_dsv4_indexer_bytes_per_token", "get_compress_state_ring_size", "collect_sources_by_ratio"],
        {"ONLINE_C128": False, "envs": envs})
    mp_mod = loader.StubModule("sglang.srt.mem_cache.deepseek_v4_memory_pool", {
        "select_dsv4_kv_layout": lambda: (KVLayout.V4, None),
        "resolve_compressed_kv_layout": lambda layout, ratio, opt=None: layout})
    ceil_div = lambda a, b: -(-a // b)
    ceil_align = lambda a, b: -(-a // b) * b
    logger = types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None)
    stand = {"envs": envs, "get_spec": lambda: spec_ns, "get_schedule": lambda: sched, "get_disagg": lambda: disagg,
             "get_exec": lambda: exec_ns, "get_memory": lambda: mem_ns, "_is_npu": False, "_is_hip": False,
             "logger": logger, "ceil_div": ceil_div, "ceil_align": ceil_align, "torch": loader.AutoStub("torch"),
             "get_dsv4_indexer_bytes_per_token": mp_defs["get_dsv4_indexer_bytes_per_token"],
             "spec_decode_alloc_len_per_request": None, "get_alloc_len_per_decode": lambda: page,
             "MemoryPoolConfig": lambda **kw: types.SimpleNamespace(**kw),
             "_DSV4PoolSizes": lambda **kw: types.SimpleNamespace(**kw), "Optional": object}
    names = ["compute_swa_request_cap", "_get_dsv4_compress_state_dtype_sizes",
             *[f"DSV4PoolConfigurator.{m}" for m in (
                 "num_layers", "_resolve_swa_prefix_tails", "_resolve_swa_cap_tokens", "_get_paged_kv_bytes_per_token",
                 "_get_bytes_per_swa_token", "_compressed_bytes_per_full_token", "_get_low_ratio_kv_padding_bytes",
                 "_get_bytes_per_full_token", "_get_swa_fixed_bytes", "_get_swa_tokens", "_compute_dsv4_sizes",
                 "_get_num_req_slots", "_get_c128_state_fixed_bytes", "_get_c2_state_fixed_bytes",
                 "_resolve_max_running_requests_per_worker", "_fixed_swa_bytes", "_fixed_c4_state_bytes",
                 "_to_config", "calculate_pool_sizes")]]
    fns = loader.compile_defs(text, f"sglang-0.5.23/{PC}", names, stand, modules={MP.replace('/', '.')[:-3]: mp_mod})
    C = type("DSV4PoolConfigurator", (), {k: v for k, v in fns.items() if k not in ("compute_swa_request_cap", "_get_dsv4_compress_state_dtype_sizes")})
    C.validate_swa_pool_size = lambda self, *a: None
    self = C()
    self._unified = False; self._unified_fp8 = False; self._dspark_draft_on_bf16 = False; self._unified_row_bytes = 0
    self.qk_nope_head_dim = head - rope; self.qk_rope_head_dim = rope; self.attn_head_dim = head; self.indexer_head_dim = index_head
    self.kv_bytes = self.qk_nope_head_dim + rope * 2 + 8
    self.indexer_bytes_per_token = fns["get_dsv4_indexer_bytes_per_token"](index_head, False) if "get_dsv4_indexer_bytes_per_token" in fns else 132
    self.context_len = context_len
    self.stage_compress_ratios = compress_ratios
    self.stage_owner_layers = mp_defs["collect_sources_by_ratio"](compress_ratios, [], range(len(compress_ratios)))
    self.operator_swa_ratio = swa_ratio
    self.swa_ratio = swa_ratio if swa_ratio is not None else 0.1
    self.sliding_window_size = window; self.page_size = page
    self.is_speculative = bool(spec_tokens); self.online_c128_mtp_max_draft_tokens = 0
    self.attn_dp_size = 1; self.requested_max_running_requests_per_worker = mrr
    self.disaggregation_mode = "null"; self.disaggregation_decode_extra_slots = 0; self.c4_shrink_factor = 1
    self.ring_sizes = {r: mp_defs["get_compress_state_ring_size"](r, spec_tokens) for r in self.stage_owner_layers if r != 1}
    self.num_layers_total = len(compress_ratios); self.low_ratio_index_bytes = 0
    self._swa_ring_size = window; self._spec_infl = 1.0; self.encoder_replay = False
    self.paged_draft_layers = 0; self.request_window_bytes = 0
    self.swa_prefix_tails = self._resolve_swa_prefix_tails()
    self.swa_cap_tokens = self._resolve_swa_cap_tokens()
    self.bytes_per_swa_token = self._get_bytes_per_swa_token()
    self.bytes_per_full_token = self._get_bytes_per_full_token()
    if self.is_speculative:
        self._spec_infl = (self.num_layers_total + 1) / self.num_layers_total
        self.bytes_per_full_token *= self._spec_infl; self.bytes_per_swa_token *= self._spec_infl
    cfg = self.calculate_pool_sizes(available_bytes, page)
    return cfg, self



@pytest.mark.parametrize("avail_gib", [12, 30, 61])
@pytest.mark.parametrize("kw,inputs", [
    ({}, {}),
    ({"swa_ratio": 0.1}, {"swa_full_tokens_ratio": 0.1}),
    ({"spec_tokens": 6}, {"speculative": True, "num_draft_tokens": 6}),
    ({"radix": False, "mrr": 64}, {"disable_radix_cache": True, "max_running_requests": 64}),
    ({"chunked": 4096, "mrr": 128}, {"chunked_prefill_size": 4096, "max_running_requests": 128}),
])
def test_matches_engine_configurator(spec, avail_gib, kw, inputs):
    src, loader = _engine_pools_or_skip()
    avail = avail_gib * GiB
    try:
        cfg, _ = _engine_pools(src, loader, list(spec.dsv4.compress_ratios), avail, **kw)
        engine = (cfg.full_max_total_num_tokens, cfg.swa_max_total_num_tokens, cfg.c4_max_total_num_tokens,
                  cfg.c128_max_total_num_tokens, cfg.c4_state_pool_size)
    except RuntimeError:
        engine = "RuntimeError"
    p = d.pool_sizes(spec, avail, d.DSV4Inputs(**inputs))
    mine = "RuntimeError" if p.error else (p.full_tokens, p.swa_tokens, p.c4_tokens, p.c128_tokens,
                                           p.c4_state_pool_size)
    assert mine == engine
