"""The SGLang release-traits table: each trait flips exactly at its boundary (packaging style).

``BOUNDARIES`` restates, independently of ``release.TRAITS``, the releases at which each trait
changes value. Walking every SGLang release in order, a trait's value must change exactly there.
"""

from __future__ import annotations

import dataclasses

import pytest
from packaging.version import Version

from kvscope.engines.sglang import release as r
from kvscope.errors import FlagError

# Every SGLang release kvscope distinguishes, in order (the patch releases between the read wheels).
RELEASES = ("0.4.6.post5", "0.4.7", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.10", "0.4.10.post2", "0.5.0",
            "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9",
            "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
            "0.5.20", "0.5.21", "0.5.22", "0.5.23")

BOUNDARIES = {
    "defaults_ladder": ("0.4.8", "0.5.3"),
    "vlm_fraction": ("0.4.9", "0.4.10"),
    "small_gpu_max_bs_24": ("0.5.5",),
    "bucket_35gib_4096": ("0.5.20",),
    "fallback_fraction_095": ("0.5.20",),
    "max_bs_clamped_to_running": ("0.5.22",),
    "prefill_graph": ("0.5.4", "0.5.10", "0.5.14"),
    "prefill_graph_max_tokens": ("0.5.7", "0.5.8", "0.5.23"),
    "prefill_graph_sizes": ("0.5.8", "0.5.9"),
    "prefill_graph_total_tokens_clamp": ("0.5.10",),
    "prefill_graph_context_clamp": ("0.5.13", "0.5.18"),
    "piecewise_reserve": ("0.5.6", "0.5.7", "0.5.8"),
    "mla_prefill_graph_flat_reserve": ("0.5.10",),
    "deepep_prefill_graph_reserve": ("0.5.17",),
    "deepep_reserve": ("0.5.15",),
    "speculative_reserve_4gib": ("0.5.10",),
    "draft_in_budget": ("0.5.14",),
    "llama4_vision_opt_in": ("0.4.10",),
    "llama4_backend_override": ("0.5.3",),
    "dsa_dp_attention_forced": ("0.5.3", "0.5.6"),
    "dsa_indexer_in_profile": ("0.5.4",),
    "dsa_mem_fraction_08": ("0.5.3", "0.5.4"),
    "dsa_forced_page": ("0.5.3",),
    "dsa_kv_fp8_default": ("0.5.3",),
    "dsa_kv_fp8_forced": ("0.5.5",),
    "hybrid_gdn_sm100_backend": ("0.5.13",),
    "deepseek_v3_sm100_trtllm_mla": ("0.5.4",),
    "rocm_mla_aiter": ("0.4.7",),
    "rocm_mla_aiter_with_speculative": ("0.5.0",),
    "fa3_default_all_mha": ("0.5.9",),
    "sm100_trtllm_mha_default": ("0.5.7",),
    "trtllm_mla_page_constraint": ("0.4.10",),
    "trtllm_mha_page_128": ("0.5.23",),
    "aiter_fraction_factor": ("0.4.7",),
    "server_args_dump_after_aiter_factor": ("0.5.4",),
    "mha_cell_v_head_dim": ("0.5.7",),
    "dsa_fp8_scaled_buffer": ("0.5.7",),
    "dsa_fp8_scaled_cell": ("0.5.18",),
    "fp4_dequant_workspace": ("0.5.18",),
    "mxfp8_scales": ("0.5.18",),
    "fp4_recipe_cell": ("0.5.21",),
    "draft_cell_dsa_indexer_split": ("0.5.18",),
    "draft_cell_share": ("0.5.22",),
    "mamba_carve": ("0.5.9", "0.5.13", "0.5.18"),
    "mamba_pp_stage_share": ("0.5.18",),
    "running_per_dp_at_least_one": ("0.5.23",),
    "mm_reservation": ("0.5.18",),
    "no_kv_value_error": ("0.5.14",),
    "oom_error_text": ("0.5.0", "0.5.10"),
    "swa_split": ("0.5.9", "0.5.10", "0.5.11"),
    "swa_split_in_profile": ("0.5.14",),
    "swa_request_cap": ("0.5.14",),
    "swa_request_cap_needs_chunk": ("0.5.22",),
    "swa_draft_share": ("0.5.18",),
    "validate_swa_pool_size": ("0.5.18",),
    "mamba_request_cap": ("0.5.0",),
    "mamba_cap_running_per_dp": ("0.5.9", "0.5.10"),
    "mamba_state_too_small_error": ("0.5.13",),
    "reqs_from_final_tokens": ("0.5.10",),
    "user_reqs_capped_by_half_tokens": ("0.5.14",),
    "req_pool_size_plus_one": ("0.4.7",),
    "classic_draft_headroom": ("0.5.9",),
    "ngram_has_no_draft_kv": ("0.5.14",),
    "req_row_extra": ("0.5.0", "0.5.13", "0.5.18"),
    "req_to_token_padding_row": ("0.5.12",),
    "attn_dp_size_flag": ("0.5.23",),
    # code layout (the probe's hook tables)
    "profile_code": ("0.5.7", "0.5.14", "0.5.18"),
    "pool_init_code": ("0.5.7", "0.5.18"),
    "pool_configurator_code": ("0.5.14",),
    "graph_init_code": ("0.5.14",),
    "baseline_code": ("0.5.23",),
    # log line formats (the doctor's version range): ">X" flips at the release after X
    "log_init_end_no_elapsed": ("0.5.9",),
    "log_init_end_elapsed": ("0.5.7",),
    "log_init_parallel": ("0.5.21",),
    "log_baseline_taken": ("0.5.21",),
    "log_load_end_no_elapsed": ("0.5.9",),
    "log_load_end_elapsed_dtype": ("0.5.7", "0.5.10"),
    "log_load_end_no_dtype": ("0.5.10",),
    "log_load_end_committed": ("0.5.16",),
    "log_kv_alloc_dtype": ("0.5.10",),
    "log_kv_alloc_no_dtype": ("0.5.14",),
    "log_capture_legacy": ("0.5.14",),
    "log_capture_backend": ("0.5.14",),
    "log_no_kv_mem_error": ("0.5.14",),
    "log_mm_reserve": ("0.5.16",),
    "log_summary_no_avail": ("0.5.3",),
    "log_summary_avail": ("0.5.0",),
    "log_unbalanced_min_per_gpu": ("0.5.10",),
    "log_unbalanced_pre_model_load": ("0.5.10",),
    "disable_cuda_graph_all_phases": ("0.5.23",),
}


def test_every_trait_has_expected_boundaries():
    assert set(BOUNDARIES) == set(r.TRAITS)


@pytest.mark.parametrize("name", sorted(r.TRAITS))
def test_trait_flips_exactly_at_its_boundary(name):
    values = [getattr(r.release(v), name) for v in RELEASES]
    flips = tuple(RELEASES[i] for i in range(1, len(RELEASES)) if values[i] != values[i - 1])
    assert flips == BOUNDARIES[name]


@pytest.mark.parametrize("name", sorted(n for n, t in r.TRAITS.items() if isinstance(t, r.Era)))
def test_eras_tile_the_versions_and_name_their_values(name):
    era = r.TRAITS[name]
    seen = {getattr(r.release(v), name) for v in RELEASES}
    assert seen == set(era.values)  # every named value is reached, no other value
    assert all(isinstance(x, str) and not x.isdigit() for x in seen)


def test_every_trait_names_its_pinning_release():
    for name, t in r.TRAITS.items():
        rows = t.rows if isinstance(t, r.Era) else ((t.spec, None, t.pinned),)
        for _, _, pinned in rows:
            assert pinned and pinned[0].isdigit(), (name, pinned)


def test_release_value():
    rel = r.release("0.5.14")
    assert rel is r.release(Version("0.5.14")) is r.release(rel)  # cached, one value per version
    assert str(rel) == "0.5.14" and rel.version == Version("0.5.14")
    assert r.release(None).version == Version(r.LATEST) == r.release("latest").version
    assert r.release("v0.5.9").version == Version("0.5.9")
    assert r.release("0.5.8.post1").prefill_graph_sizes == r.PrefillGraphSizes.START_640
    assert not r.release("0.5.14rc1").draft_in_budget  # a pre-release sorts before its release
    assert r.release("0.5.24").draft_in_budget  # newer than the table: the latest behaviours
    with pytest.raises(dataclasses.FrozenInstanceError):
        rel.draft_in_budget = False  # type: ignore[misc]
    for bad in ("0.3.9", "banana"):
        with pytest.raises(FlagError):
            r.release(bad)
    assert r.LATEST == r.KNOWN_VERSIONS[-1]


def test_era_spec_names_a_row():
    assert r.era_spec("profile_code", r.CodeHome.KV_CACHE_MIXIN) == ">=0.5.7,<0.5.14"
    assert r.era_spec("graph_init_code", r.GraphInit.CUDA_GRAPHS) == ">=0.5.14"
    with pytest.raises(KeyError):
        r.era_spec("profile_code", "nowhere")
    with pytest.raises(TypeError):
        r.era_spec("draft_in_budget", "x")
