"""Exact integers: page sizes, groups, bytes per block and num_blocks (vLLM's own formulas)."""

from __future__ import annotations

from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm import memory as mem
from kvscope.engines.vllm.args import VllmFlags, resolve_args
from kvscope.engines.vllm.release import version_traits
from kvscope.hardware.gpus import get_gpu
from kvscope.units import GiB

from vllm_case_data import spec_of


def _args(spec, version="0.33.0", **kw):
    gpu = get_gpu("h200")
    return resolve_args(VllmFlags(**kw), traits=version_traits(version), model_max_len=spec.max_position_embeddings,
                        gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, is_mla=spec.is_mla,
                        is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                        num_attention_heads=spec.num_attention_heads)


def test_gqa_page_and_blocks():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    # 2 x 16 tokens x 8 heads x 128 x 2 B
    assert kvc.attention_page_size_bytes(16, 8, 128, 2) == 65_536
    a = _args(spec, max_model_len=131072)
    kv = mem.model_kv(spec, a, 131072)
    plan = kv.workers[0].plan
    assert plan.bytes_per_block == 32 * 65_536 == 2_097_152
    # spec §12 worked example: 59,700,045,415 B -> 28,467 blocks, 3.47x, 455,472 tokens
    cap = mem.capacity_from_available([59_700_045_415], kv, spec, a, 131072)
    assert cap.num_gpu_blocks == 28_467
    assert f"{cap.max_concurrency:.2f}" == "3.47" and cap.kv_cache_tokens == 455_472


def test_kv_heads_replicated_when_tp_exceeds_them():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")  # 8 KV heads
    assert kvc.num_kv_heads_per_rank(spec, 8) == 1 and kvc.num_kv_heads_per_rank(spec, 16) == 1
    assert kvc.num_kv_heads_per_rank(spec, 2) == 4


def test_mla_page_replicated_over_tp_and_fp8_ds_mla():
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    a = _args(spec, tensor_parallel_size=8, max_model_len=32768)
    plan = mem.model_kv(spec, a, 32768).workers[0].plan
    assert a.block_size == 64
    # 64 tokens x (512 + 64) x 2 B, one latent head on every TP rank
    assert plan.groups[0].spec.page_size_bytes == 73_728
    assert plan.bytes_per_block == 61 * 73_728 == 4_497_408
    a8 = _args(spec, tensor_parallel_size=8, max_model_len=32768, kv_cache_dtype="fp8_ds_mla")
    assert mem.model_kv(spec, a8, 32768).workers[0].plan.groups[0].spec.page_size_bytes == 64 * 656 == 41_984
    cap = mem.capacity_from_available([10 * GiB], mem.model_kv(spec, a8, 32768), spec, a8, 32768)
    assert cap.num_gpu_blocks == 10 * GiB // (61 * 41_984) == 4192


def test_swa_hybrid_groups_gpt_oss():
    """gpt-oss-20b: 12 sliding(128) + 12 full layers, TP2 -> 4 KV heads x 64: two groups of 12."""
    spec = spec_of("openai/gpt-oss-20b")
    a = _args(spec, version="0.19.0", tensor_parallel_size=2, max_model_len=8192, max_num_batched_tokens=8192)
    kv = mem.model_kv(spec, a, 8192)
    plan = kv.workers[0].plan
    kinds = sorted((g.spec.kind, len(g.layer_ids), g.spec.page_size_bytes) for g in plan.groups)
    assert kinds == [("full", 12, 16_384), ("sliding_window", 12, 16_384)]
    cfg = mem.scheduler_view(spec, a, 8192)
    # full: 8192/16 = 512 blocks; sliding: cdiv(min(127 + 8192, 8192), 16) + 1 = 513
    assert plan.blocks_per_request(cfg) == 1025
    assert plan.needed_memory_bytes(cfg) == 12 * 16_384 * 1025
    # v0.26+: max_in_flight_tokens = 2 x 8192 with async scheduling; window still capped at max_model_len
    a33 = _args(spec, version="0.33.0", tensor_parallel_size=2, max_model_len=65536, max_num_batched_tokens=8192)
    cfg33 = mem.scheduler_view(spec, a33, 65536)
    sw = next(g for g in mem.model_kv(spec, a33, 65536).workers[0].plan.groups if g.spec.kind == "sliding_window")
    assert sw.spec.max_memory_usage_blocks(cfg33) == -(-(127 + 16384) // 16) + 1 == 1033


def test_mamba_hybrid_block_alignment_and_padding_qwen35():
    """Qwen3.5-27B, TP2: GDN state (3 x 5120 + 24 x 128 x 128) x 2 B = 817,152 B; attention 2 KV heads x
    256 x 2 x 2 B = 2048 B/token -> block 16 x cdiv(817152, 16 x 2048) = 400 tokens, mamba page padded to
    819,200 B; 16 full + 48 GDN layers -> 1 full group + 3 mamba groups of 16."""
    spec = spec_of("Qwen/Qwen3.5-27B")
    assert kvc.mamba_page_size_bytes(spec, 2, 2) == 817_152
    a = _args(spec, version="0.19.0", tensor_parallel_size=2, max_model_len=32768)
    kv = mem.model_kv(spec, a, 32768)
    plan = kv.workers[0].plan
    assert kv.layout.block_size == 400
    assert sorted((g.spec.kind, len(g.layer_ids), g.spec.page_size_bytes) for g in plan.groups) == [
        ("full", 16, 819_200), ("mamba", 16, 819_200), ("mamba", 16, 819_200), ("mamba", 16, 819_200)]
    assert plan.bytes_per_block == 16 * 819_200
    cap = mem.capacity_from_available([10 * GiB], kv, spec, a, 32768)
    assert cap.num_gpu_blocks == 10 * GiB // (16 * 819_200) == 819
    # v0.19: mamba mode none -> 1 block per group; full: cdiv(32768, 400) = 82 -> 85 blocks per request
    assert plan.blocks_per_request(mem.scheduler_view(spec, a, 32768)) == 85
    assert cap.kv_cache_tokens == 819 // 4 * 400
    # v0.33 (prefix caching on by default for hybrids -> align mode: 2 blocks per mamba group)
    a33 = _args(spec, version="0.33.0", tensor_parallel_size=2, max_model_len=32768)
    kv33 = mem.model_kv(spec, a33, 32768)
    cap33 = mem.capacity_from_available([10 * GiB], kv33, spec, a33, 32768)
    assert kv33.workers[0].plan.blocks_per_request(mem.scheduler_view(spec, a33, 32768)) == 88
    assert cap33.kv_cache_tokens == int(819 / 88 * 32768)


def test_pipeline_parallel_stages_and_min_blocks():
    """get_pp_indices: 61 layers over 4 stages = 15, 15, 16, 15 (remainder to [-2], [-3] ...); min over stages."""
    assert [mem.get_pp_indices(61, r, 4) for r in range(4)] == [(0, 15), (15, 30), (30, 46), (46, 61)]
    assert [mem.get_pp_indices(32, r, 3) for r in range(3)] == [(0, 11), (11, 22), (22, 32)]
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    a = _args(spec, pipeline_parallel_size=3, max_model_len=8192)
    kv = mem.model_kv(spec, a, 8192)
    assert [w.plan.bytes_per_block for w in kv.workers] == [11 * 65_536, 11 * 65_536, 10 * 65_536]
    cap = mem.capacity_from_available([GiB, GiB, GiB], kv, spec, a, 8192)
    assert cap.num_gpu_blocks == GiB // (11 * 65_536)


def test_null_block_reservation_from_0_30():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    bpb = 2_097_152
    need = bpb * 512  # 8192 tokens
    for version, starts in (("0.28.0", True), ("0.30.0", False)):
        a = _args(spec, version=version, max_model_len=8192)
        cap = mem.capacity_from_available([need], mem.model_kv(spec, a, 8192), spec, a, 8192)
        assert (cap.error is None) is starts
        assert cap.num_gpu_blocks == 512


def test_mla_hybrid_alignment_per_release():
    """kv_cache.hybrid_kernel_block_alignment for MLA (what memory.cache_layout uses for MLA + mamba):
    models/config.py ``HybridAttentionMambaModelConfig`` has no MLA branch @ v0.11.0 (16 for every
    model) and ``kernel_block_alignment_size = 128 if use_cutlass_mla else 64`` @ v0.16.0 / v0.19.1;
    platforms/interface.py ``_align_hybrid_block_size`` @ v0.20.2: max(FlashMLA's [64], block_size);
    @ v0.33.0: at least 128 for MLA, rounded to the backends' common kernel block (FlashMLA 64)."""
    got = {v: kvc.hybrid_kernel_block_alignment(version_traits(v), 64, True, backend_min_kernel_block=64)
           for v in ("0.11.0", "0.16.0", "0.19.1", "0.20.2", "0.33.0")}
    assert got == {"0.11.0": (16, 1), "0.16.0": (64, 1), "0.19.1": (64, 1), "0.20.2": (64, 1), "0.33.0": (128, 64)}


def test_kv_cache_configs_steps_under_pipeline_parallel():
    """The named steps of ``get_kv_cache_configs`` on PP3 Llama-3.1-8B (11, 11, 10 layers): v0.16.0
    checks once on the global groups against the smallest memory, v0.28.0 per worker; the first
    failing worker's error is the one raised; ``num_blocks`` is the min over workers."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    bpb = 65_536  # one layer's page
    for version, pairs in (("0.16.0", [(32 * bpb, GiB // 2)]),
                           ("0.28.0", [(11 * bpb, GiB), (11 * bpb, GiB // 2), (10 * bpb, GiB)])):
        a = _args(spec, version=version, pipeline_parallel_size=3, max_model_len=8192)
        plans = [w.plan for w in mem.model_kv(spec, a, 8192).workers]
        checks = kvc.admission_checks(plans, [GiB, GiB // 2, GiB], a.traits)
        assert [(p.bytes_per_block, m) for p, m in checks] == pairs
        own, blocks = kvc.num_blocks_per_worker(plans, [GiB, GiB // 2, GiB], a.traits, None)
        assert own == [GiB // (11 * bpb), GiB // 2 // (11 * bpb), GiB // (10 * bpb)] and blocks == own[1]
    cfg = mem.scheduler_view(spec, a, 8192)
    need = [8192 // 16 * p.bytes_per_block for p in plans]  # 512 blocks a worker for 8192 tokens
    checks = [(plans[0], GiB), (plans[1], need[1] - 1), (plans[2], need[2] // 2)]
    res = kvc.check_enough_kv_cache_memory(checks, cfg, a.traits)
    assert res.needed_memory_bytes == tuple(need) and res.check_memory_bytes == (GiB, need[1] - 1, need[2] // 2)
    assert res.estimated_max_model_lens == (8192, 8176, 4096)
    assert res.estimated_max_model_len == 8176 and "estimated maximum model length is 8176" in res.error
