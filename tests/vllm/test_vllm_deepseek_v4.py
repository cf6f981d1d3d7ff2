"""DeepSeek-V4 KV layout in vLLM 0.33.0 (engines/vllm/deepseek_v4.py).

Page sizes, the 5-group packed layout and bytes per block are the arithmetic of
vllm/v1/kv_cache_interface.py, vllm/models/deepseek_v4/{attention,compressor}.py,
vllm/v1/attention/backends/mla/sparse_swa.py and vllm/v1/core/kv_cache_planning.py @ v0.33.0.
The real case is vllm-dsv4-flash-rtxpro5000-tp4-mtp (shared/logs/cases.jsonl; vllm#51041 /
PR #52495): "Available KV cache memory: 12.39 GiB", "GPU KV cache size: 63,859 tokens,
Maximum concurrency for 33,792 tokens per request: 1.89x", 13,270 blocks x 978.8 KiB.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvscope.engines.vllm import deepseek_v4 as d
from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm.plan import VllmFlags, VllmMeasured, plan_vllm
from kvscope.hardware.gpus import get_gpu
from kvscope.model.spec import ModelSpec
from kvscope.units import GiB

CONFIG = Path(__file__).resolve().parents[2] / "src/kvscope/catalog/data/deepseek-ai--DeepSeek-V4-Flash/config.json"


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelSpec.from_hf_config(json.loads(CONFIG.read_text()), name="deepseek-ai/DeepSeek-V4-Flash")


def _by_role(layers):
    out = {}
    for x in layers:
        out.setdefault((x.role, x.tokens_per_state if x.role == "compressed_kv" else x.window), set()).add(
            (x.block_size, x.page_size_bytes))
    return out


def test_page_sizes_fp8_ds_mla(spec):
    layers = d.cache_layers(spec, "fp8_ds_mla", 256, num_draft_layers=3)
    roles = _by_role(layers)
    # SWA ring: 64 tokens x 584 B = 37,376 -> 576-aligned 37,440
    assert roles[("swa", 128)] == {(64, 37_440)}
    # C4 latent: 256/4 = 64 rows x 584 = 37,376 -> 37,440; C128: 2 rows = 1,168 -> 1,728
    assert roles[("compressed_kv", 4)] == {(256, 37_440)}
    assert roles[("compressed_kv", 128)] == {(256, 1_728)}
    # indexer K: 64 rows x (128 + 4) = 8,448 -> 8,640
    assert roles[("indexer", None)] == {(256, 8_640)}
    # compressor states (fp32): C4 4 x 2*2*512*4 = 32,768 -> 32,832; C128 8 x 2*1*512*4 = 32,768 -> 32,832;
    # indexer compressor 4 x 2*2*128*4 = 8,192 -> 8,640
    assert roles[("compressor_state", 8)] == {(4, 32_832)}
    assert roles[("compressor_state", 128)] == {(8, 32_832)}
    assert roles[("indexer_state", 8)] == {(4, 8_640)}
    counts = {r: sum(1 for x in layers if x.role == r) for r in
              ("swa", "compressed_kv", "indexer", "compressor_state", "indexer_state")}
    assert counts == {"swa": 46, "compressed_kv": 41, "indexer": 21, "compressor_state": 41, "indexer_state": 21}
    assert sum(x.is_draft for x in layers) == 3


def test_five_group_packed_layout(spec):
    groups = d.packed_groups(d.cache_layers(spec, "fp8_ds_mla", 256, num_draft_layers=3))
    shape = [(len(g.layers), g.kind, g.block_size, g.window, g.page_size_bytes) for g in groups]
    assert shape == [
        (23, kvc.SLIDING_WINDOW, 64, 128, 861_120),  # SWA rings, split by repeats_per_group = 23
        (23, kvc.SLIDING_WINDOW, 64, 128, 861_120),
        (62, kvc.MLA_ATTN, 256, None, 1_002_240),  # 21 C4 + 20 C128 latents + 21 indexer K (47,808 B/tuple)
        (42, kvc.SLIDING_WINDOW, 4, 8, 870_912),  # C4 compressor + indexer compressor states
        (20, kvc.SLIDING_WINDOW, 8, 128, 656_640),  # C128 compressor states
    ]
    assert d.bytes_per_block(groups) == 1_002_240  # "978.8 KiB/block"
    assert d.approximate_gcd([46, 21, 20], lower_bound=21) == 23


def test_layout_without_speculation_still_five_groups(spec):
    groups = d.packed_groups(d.cache_layers(spec, "fp8_ds_mla", 256))
    assert [len(g.layers) for g in groups] == [22, 21, 62, 42, 20]  # 43 SWA rings -> 22 + 21
    assert d.bytes_per_block(groups) == 1_002_240


def test_bf16_plain_rows(spec):
    roles = _by_role(d.cache_layers(spec, "bfloat16", 256))
    assert roles[("swa", 128)] == {(64, 65_536)}  # 64 x 512 x 2
    assert roles[("compressed_kv", 4)] == {(256, 65_536)}
    assert roles[("compressed_kv", 128)] == {(256, 2_048)}
    assert roles[("indexer", None)] == {(256, 8_704)}  # 8,448 -> 512-aligned


def _blocks_per_request(plan, max_model_len, in_flight):
    cfg = kvc.SchedulerView(max_model_len=max_model_len, max_num_batched_tokens=in_flight // 2,
                            in_flight_tokens=in_flight)
    return [g.spec.max_memory_usage_blocks(cfg) for g in plan.groups]


def test_blocks_per_request(spec):
    plan = d.to_plan(d.packed_groups(d.cache_layers(spec, "fp8_ds_mla", 256, 3)))
    # vLLM default on a >= 70 GiB GPU: 8192 batched tokens x 2 async batches (PR #52495: 4099 / 2065 pages)
    assert _blocks_per_request(plan, 33_792, 16_384) == [259, 259, 132, 4_099, 2_065]
    # the real log's 4,227 / 2,129 pages (PR #52495 comment) pin 16,894..16,897 in-flight tokens
    assert _blocks_per_request(plan, 33_792, 16_896) == [267, 267, 132, 4_227, 2_129]
    assert sum(_blocks_per_request(plan, 33_792, 16_896)) == 7_022


def _plan(spec, available_gib, mnbt=8448, version="0.33.0"):
    gpu = get_gpu("rtx-pro-6000")
    flags = VllmFlags(tensor_parallel_size=4, kv_cache_dtype="fp8_ds_mla", block_size=256, max_model_len=33_792,
                      max_num_batched_tokens=mnbt, speculative_method="dspark", num_speculative_tokens=5)
    return plan_vllm(spec, gpu, flags, version, VllmMeasured(available_kv_cache_gib=available_gib))


def test_real_case_rtx_pro_5000_tp4_dspark(spec):
    t = _plan(spec, 12.387)
    assert t.extra.num_gpu_blocks == 13_270
    assert t.extra.bytes_per_block == 1_002_240
    assert t.kv_cache_tokens == 63_859
    assert f"{t.extra.max_concurrency:.2f}" == "1.89"
    assert len(t.extra.kv_cache_groups) == 5
    assert t.starts and t.error is None


def test_real_case_availability_range(spec):
    """63,859 tokens <=> exactly 13,270 blocks of 1,002,240 B: available in
    [13,299,724,800, 13,300,727,040) B = [12.3865, 12.3875) GiB, inside the log's 12.39 +- 0.005."""
    lo, hi = 13_270 * 1_002_240, 13_271 * 1_002_240
    assert 12.385 * GiB <= lo and hi <= 12.395 * GiB
    assert round(lo / GiB, 2) == round((hi - 1) / GiB, 2) == 12.39
    for gib, tokens in ((lo / GiB, 63_859), ((hi - 1) / GiB, 63_859), ((hi + 1) / GiB, 63_864),
                        ((lo - 1) / GiB, 63_854)):
        assert _plan(spec, gib).kv_cache_tokens == tokens
    # 12.39 GiB taken literally is 13,273 blocks -> 63,873 tokens: the log's figure is rounded
    assert _plan(spec, 12.39).kv_cache_tokens == 63_873


def test_default_batched_tokens_give_more_tokens(spec):
    """With vLLM's default 8,192 batched tokens the same memory reports 65,808 tokens / 1.95x:
    the case's 63,859 needs 16,896 in-flight tokens (e.g. --max-num-batched-tokens 8448)."""
    t = _plan(spec, 12.387, mnbt=8192)
    assert t.extra.num_gpu_blocks == 13_270 and t.kv_cache_tokens == 65_808
    assert f"{t.extra.max_concurrency:.2f}" == "1.95"


def test_other_version_is_flagged(spec):
    t = _plan(spec, 12.387, version="0.28.0")
    assert any("modelled from vLLM 0.33.0" in w for w in t.warnings)


def test_matches_engine_code_when_wheel_present(spec):
    """Cross-check against vLLM 0.33.0's own kv_cache_interface.py / kv_cache_planning.py, executed
    without torch by tests/conformance/vllm_engine_kv.py (skipped without the cached wheel)."""
    try:
        from tests.conformance.vllm_engine_kv import DTYPES, _Strict, kv_engine
        eng = kv_engine("0.33.0")
    except Exception as exc:  # no wheel / harness changed
        pytest.skip(f"vLLM 0.33.0 engine code unavailable: {exc}")
    iface, planning = eng.iface, eng.planning
    layout = eng._mods["vllm.v1.kv_cache_layout"].KVCacheLayout.BLHNC
    u8, f32 = DTYPES[1], DTYPES[4]
    specs = {}
    for x in d.cache_layers(spec, "fp8_ds_mla", 256, 3):
        common = dict(block_size=x.block_size, num_kv_heads=1, max_tp_shards=1, alignment=576)
        if x.role == "indexer":
            s = iface.MLAAttentionSpec(**common, head_size=132, dtype=u8, tokens_per_state=4)
        elif x.role == "compressed_kv":
            s = iface.MLAAttentionSpec(**common, head_size=512, dtype=u8, tokens_per_state=x.tokens_per_state,
                                       cache_dtype_str="fp8_ds_mla", model_version="deepseek_v4",
                                       state_content_bytes=584)
        elif x.role == "swa":
            s = iface.SlidingWindowMLASpec(**common, head_size=512, dtype=u8, sliding_window=128,
                                           cache_dtype_str="fp8_ds_mla", state_content_bytes=584,
                                           model_version="deepseek_v4", is_draft=x.is_draft)
        else:
            s = iface.SlidingWindowMLASpec(**common, head_size=x.state_bytes // 4, dtype=f32, sliding_window=x.window)
        assert s.page_size_bytes == x.page_size_bytes, x.name
        specs[x.name] = s
    model = _Strict(max_model_len=33_792, original_max_model_len=33_792, use_mla=True,
                    supports_kv_cache_grouping=False)
    sched = _Strict(max_num_batched_tokens=8448, disable_hybrid_kv_cache_manager=False,
                    max_num_encoder_input_tokens=0)
    cache = _Strict(num_gpu_blocks_override=None, mamba_cache_mode="none", block_size=256,
                    enable_prefix_caching=True, prefix_cache_retention_interval=None,
                    kv_cache_size_tokens=None, kv_cache_max_concurrency=None)
    cache.get_resolved_kv_cache_layout = lambda *a, **k: layout
    par = _Strict(decode_context_parallel_size=1, prefill_context_parallel_size=1, tensor_parallel_size=4,
                  pipeline_parallel_size=1)
    cfg = _Strict(model_config=model, scheduler_config=sched, cache_config=cache, parallel_config=par,
                  speculative_config=None, kv_transfer_config=None, max_in_flight_tokens=16_896,
                  num_prefill_lookahead_tokens=1, device_config=_Strict(device_type="cuda"),
                  attention_config=_Strict(hisparse_config=None))
    glob = planning.get_global_kv_cache_groups(cfg, [specs])
    mine = d.packed_groups(d.cache_layers(spec, "fp8_ds_mla", 256, 3))
    assert [list(g.layer_names) for g in glob] == [[x.name for x in g.layers] for g in mine]
    assert [g.kv_cache_spec.page_size_bytes for g in glob] == [g.page_size_bytes for g in mine]
    confs = planning.get_kv_cache_configs(cfg, [specs], [13_270 * 1_002_240], glob)
    assert confs[0].num_blocks == 13_270
    eng.logger.messages = []
    eng.utils.update_kv_cache_capacity(cfg, eng.utils.generate_scheduler_kv_cache_config(confs))
    assert "GPU KV cache size: 63,859 tokens" in eng.logger.messages[-1][1]
    assert "33,792 tokens per request: 1.89x" in eng.logger.messages[-1][1]
