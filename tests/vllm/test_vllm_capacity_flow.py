"""One vLLM KV-capacity flow: ``plan_vllm`` (and the doctor, through ``memory.capacity_from_available``)
gives exactly what the conformance-tested ``kv_cache.kv_cache_configs`` gives for the same layer specs
(``memory.model_kv``) and available bytes -- blocks, "GPU KV cache size" tokens, "Maximum concurrency",
the admission-check error and its estimated length -- over a spread of layer mixes and releases.

The scheduler view passed to ``kv_cache_configs`` is written here by hand (vLLM's
``max_in_flight_tokens``), not taken from ``memory.scheduler_view``; three cases are also checked
against numbers worked out below from the page sizes (``kv_cache_interface.py``) and
``kv_cache_utils.py`` / ``kv_cache_planning.py`` formulas, so the comparison is not circular.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm import memory as mem
from kvscope.engines.vllm.args import VllmFlags, resolve_args
from kvscope.engines.vllm.release import version_traits
from kvscope.engines.vllm.plan import VllmMeasured, plan_vllm
from kvscope.errors import FlagError
from kvscope.hardware.gpus import get_gpu
from kvscope.units import GiB, gib_to_bytes

from vllm_case_data import spec_of

VERSIONS = ("0.10.1.1", "0.11.0", "0.19.1", "0.20.2", "0.26.0", "0.28.0", "0.33.0")
# (kind, model, flags): one of each layer mix the KV planner distinguishes
MODELS = (
    ("dense GQA", "meta-llama/Llama-3.1-8B-Instruct", dict(max_model_len=32768)),
    ("MLA", "deepseek-ai/DeepSeek-V2-Lite", dict(max_model_len=32768)),
    ("SWA", "openai/gpt-oss-20b", dict(max_model_len=32768, max_num_batched_tokens=2048)),
    ("chunked local", "meta-llama/Llama-4-Scout-17B-16E-Instruct", dict(max_model_len=32768)),
    ("GDN hybrid", "Qwen/Qwen3-Next-80B-A3B-Thinking", dict(max_model_len=32768)),
    ("mamba hybrid", "nvidia/Nemotron-H-56B-Base-8K", dict(max_model_len=8192)),
    # align mode + speculative blocks per mamba state from v0.19; one page before (kv_cache_interface.py @ v0.11.0)
    ("GDN prefix+MTP", "Qwen/Qwen3-Next-80B-A3B-Thinking", dict(
        max_model_len=32768, enable_prefix_caching=True, num_speculative_tokens=2, speculative_method="mtp")),
    ("dense GQA PP2", "meta-llama/Llama-3.1-8B-Instruct", dict(max_model_len=32768, pipeline_parallel_size=2)),
    ("SWA PP2", "openai/gpt-oss-20b", dict(max_model_len=32768, pipeline_parallel_size=2)),
)
AVAILABLE_GIB = (0.3, 7.5, 40.25)  # a failing admission check, a tight fit, plenty
GPU = get_gpu("h200")


def _args(spec, version: str, flags: VllmFlags):
    """The arguments plan_vllm resolves (same inputs as engines/vllm/plan.py ``plan_vllm``)."""
    return resolve_args(flags, traits=version_traits(version), model_max_len=spec.max_position_embeddings,
                        gpu_memory_bytes=GPU.memory_bytes, gpu_name=GPU.name, is_mla=spec.is_mla,
                        is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                        num_attention_heads=spec.num_attention_heads, gpu_sm=GPU.sm,
                        is_sparse_mla=spec.has_dsa_indexer)


def _view(spec, a) -> kvc.SchedulerView:
    """What VllmConfig hands the specs, spelled out: ``max_in_flight_tokens =
    max_concurrent_batches x max_num_batched_tokens`` with 2 async batches at PP 1, PP batches
    otherwise (vllm/config/vllm.py @ v0.26.0); mamba ``align`` mode with prefix caching; one
    speculative block per draft token in each mamba state.
    kv_cache_configs applies the pre-0.26 / pre-0.19 reading itself."""
    batches = 2 if a.pp == 1 else a.pp
    mode = "align" if spec.mamba is not None and a.enable_prefix_caching else "none"
    # MambaSpec(num_speculative_blocks=speculative_config.num_speculative_tokens) (gpu_model_runner.py @ v0.19.0)
    spec_blocks = a.num_speculative_tokens if spec.mamba is not None and a.speculative_method else 0
    return kvc.SchedulerView(max_model_len=a.max_model_len, max_num_batched_tokens=a.max_num_batched_tokens,
                             in_flight_tokens=batches * a.max_num_batched_tokens, mamba_cache_mode=mode,
                             num_speculative_blocks=spec_blocks)


def _plan(spec, version, flags, avail_gib):
    return plan_vllm(spec, GPU, flags, version, VllmMeasured(available_kv_cache_gib=avail_gib))


CASES = [pytest.param(model, flags, version, id=f"{kind}-{version}")
         for kind, model, flags in MODELS for version in VERSIONS]


@pytest.mark.parametrize("model,flag_kw,version", CASES)
def test_plan_equals_kv_cache_configs(model, flag_kw, version):
    spec = spec_of(model)
    flags = VllmFlags(**flag_kw)
    try:
        a = _args(spec, version, flags)
        kv = mem.model_kv(spec, a, a.max_model_len)
    except FlagError as exc:  # e.g. hybrid page sizes before v0.19: plan must refuse the same way
        with pytest.raises(FlagError) as got:
            _plan(spec, version, flags, AVAILABLE_GIB[0])
        assert str(got.value) == str(exc)
        return
    plans = [w.plan for w in kv.workers]
    for gib in AVAILABLE_GIB:
        t = _plan(spec, version, flags, gib)
        # the plan resolved the same arguments and the same groups
        assert t.extra.block_size == kv.layout.block_size
        assert t.extra.max_num_batched_tokens == a.max_num_batched_tokens
        assert t.extra.bytes_per_block == plans[0].bytes_per_block
        assert [(g.kind, g.num_layers, g.page_size_bytes) for g in t.extra.kv_cache_groups] == [
            (g.spec.kind, len(g.layer_ids), g.spec.page_size_bytes) for g in plans[0].groups]
        # the printed figure is PP stage 0's; the other stages' budgets differ by the estimated stage
        # difference (plan.stage_budgets_from_printed): the engine arithmetic runs on those budgets
        budgets = [t.ranks[r * a.tp].decision.available_kv_cache_bytes for r in range(a.pp)]
        assert budgets[0] == gib_to_bytes(gib)
        res = kvc.kv_cache_configs(plans, budgets, _view(spec, a), a.traits,
                                   num_gpu_blocks_override=a.num_gpu_blocks_override,
                                   cache_block_size=kv.layout.block_size)
        assert t.extra.num_gpu_blocks == res.num_blocks
        assert t.kv_cache_tokens == res.kv_cache_tokens
        assert t.extra.max_concurrency == round(res.max_concurrency, 4)
        assert t.extra.max_model_len == res.max_model_len
        assert t.ranks[0].decision.needed_memory_bytes == max(res.needed_memory_bytes)
        if res.error is not None:
            assert t.error == res.error and not t.starts
            assert t.extra.estimated_max_model_len == res.estimated_max_model_len
        elif t.error is not None:  # only the mamba-blocks check may fail after a passing admission check
            assert t.error == kvc.mamba_max_num_seqs_error(a.max_num_seqs, res.num_blocks)


@pytest.mark.parametrize("version", VERSIONS)
def test_doctor_capacity_is_the_same_flow(version):
    """doctor/vllm_rules.vllm_model_checks calls memory.capacity_from_available: same numbers, PP 2 with
    different available bytes per stage (the min over workers is what the doctor compares)."""
    spec = spec_of("openai/gpt-oss-20b")
    a = _args(spec, version, VllmFlags(max_model_len=32768, pipeline_parallel_size=2))
    kv = mem.model_kv(spec, a, a.max_model_len)
    avail = [9 * GiB + 12_345, 7 * GiB + 678]
    cap = mem.capacity_from_available(avail, kv, spec, a, a.max_model_len)
    res = kvc.kv_cache_configs([w.plan for w in kv.workers], avail, _view(spec, a), a.traits,
                               cache_block_size=kv.layout.block_size)
    assert (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency, cap.error) == (
        res.num_blocks, res.kv_cache_tokens, res.max_concurrency, res.error)
    assert cap.needed_memory_bytes == max(res.needed_memory_bytes)


# ---------------------------------------------------------------------------------------------
# Worked by hand


def test_hand_llama_dense():
    """Llama-3.1-8B, 32 layers x 8 KV heads x 128, bf16, block 16:
    page = 2 x 16 x 8 x 128 x 2 = 65,536 B; one group of 32 -> 2,097,152 B per block.
    40.25 GiB = 43,218,108,416 B // 2,097,152 = 20,608 blocks.
    One 32,768-token request: 32768 / 16 = 2048 blocks -> concurrency 20,608 / 2048 = 10.0625.
    Tokens: 0.19.1 ``num_blocks // 1 group x 16`` = 329,728; 0.33.0 ``int(10.0625 x 32768)`` = 329,728."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    for version in ("0.19.1", "0.33.0"):
        t = _plan(spec, version, VllmFlags(max_model_len=32768), 40.25)
        assert t.extra.bytes_per_block == 32 * 2 * 16 * 8 * 128 * 2 == 2_097_152
        assert t.extra.num_gpu_blocks == 43_218_108_416 // 2_097_152 == 20_608
        assert t.extra.max_concurrency == 20_608 / 2048 == 10.0625
        assert t.kv_cache_tokens == 329_728


def test_hand_gpt_oss_in_flight_rule():
    """gpt-oss-20b TP1: 24 layers alternating sliding(128) / full, 8 KV heads x 64, bf16, block 16:
    page = 2 x 16 x 8 x 64 x 2 = 32,768 B; 12 + 12 layers -> 2 groups, 12 x 32,768 = 393,216 B/block.
    7.5 GiB = 8,053,063,680 B // 393,216 = 20,480 blocks.
    Per 32,768-token request: full cdiv(32768, 16) = 2048; sliding ``cdiv(min(127 + in_flight, 32768), 16) + 1``
    (kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes):
      0.19.1 in_flight = max_num_batched_tokens 2048 -> cdiv(2175, 16) + 1 = 137 -> 2185 blocks;
      0.26.0 in_flight = 2 x 2048 (vllm/config/vllm.py max_in_flight_tokens) -> cdiv(4223, 16) + 1 = 265 -> 2313.
    0.19.1 tokens ``20480 // 2 groups x 16`` = 163,840, concurrency 20480 / 2185 = 9.3730;
    0.26.0 tokens ``int(20480 / 2313 x 32768)`` = 290,137, concurrency 8.8543."""
    spec = spec_of("openai/gpt-oss-20b")
    flags = VllmFlags(max_model_len=32768, max_num_batched_tokens=2048)
    t19 = _plan(spec, "0.19.1", flags, 7.5)
    t26 = _plan(spec, "0.26.0", flags, 7.5)
    for t in (t19, t26):
        assert t.extra.bytes_per_block == 12 * 2 * 16 * 8 * 64 * 2 == 393_216
        assert t.extra.num_gpu_blocks == 8_053_063_680 // 393_216 == 20_480
    assert t19.kv_cache_tokens == 20_480 // 2 * 16 == 163_840
    assert t19.extra.max_concurrency == round(20_480 / (2048 + 137), 4) == 9.373
    assert t26.kv_cache_tokens == int(20_480 / (2048 + 265) * 32768) == 290_137
    assert t26.extra.max_concurrency == round(20_480 / 2313, 4) == 8.8543


def test_hand_pp2_capacity_log_before_the_min_0_11():
    """Llama-3.1-8B PP 2 (16 + 16 layers): 16 x 65,536 = 1,048,576 B per block on each stage.
    vLLM 0.11.0 (kv_cache_utils.py ``get_kv_cache_configs``) logs each worker's own capacity before
    ``num_blocks`` becomes the min over workers: worker 0 with 9 GiB + 12,345 B -> 9216 blocks is the
    first "GPU KV cache size" line (9216 x 16 = 147,456 tokens, 9216 / 2048 = 4.5x) while the engine
    runs with min(9216, 7168) = 7168 blocks. From 0.14 the log uses the min: 7168 x 16 = 114,688 tokens.
    The admission check at 0.11 sums ``max_memory_usage_bytes`` over the worker's 16 layers:
    16 x 2048 x 65,536 = 2 GiB per stage."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    avail = [9 * GiB + 12_345, 7 * GiB + 678]
    for version, tokens, conc in (("0.11.0", 147_456, 4.5), ("0.19.1", 114_688, 3.5)):
        a = _args(spec, version, VllmFlags(max_model_len=32768, pipeline_parallel_size=2))
        kv = mem.model_kv(spec, a, a.max_model_len)
        assert [w.plan.bytes_per_block for w in kv.workers] == [1_048_576, 1_048_576]
        cap = mem.capacity_from_available(avail, kv, spec, a, a.max_model_len)
        assert cap.num_gpu_blocks == 7168
        assert (cap.kv_cache_tokens, cap.max_concurrency) == (tokens, conc)
        assert cap.needed_memory_bytes == 16 * 2048 * 65_536 == 2 * GiB and cap.error is None


def test_hand_versions_cover_the_flow_gates():
    """The releases above straddle every gate of kv_cache_configs (a guard on the spread itself)."""
    v = [Version(x) for x in VERSIONS]
    for gate in ("0.11", "0.14", "0.19", "0.20.2", "0.26", "0.30"):
        assert any(x < Version(gate) for x in v) and any(x >= Version(gate) for x in v)
