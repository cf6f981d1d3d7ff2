"""What ``kvscope probe`` wraps inside SGLang, version by version.

Read from the released wheels (``pip download --no-deps sglang==X``): 0.5.6 (classic
``model_runner.py``), 0.5.9 (``model_runner_kv_cache_mixin.py``), 0.5.14 (mixin
``_profile_available_bytes`` + ``pool_configurator.py``) and 0.5.23
(``mem_cache/kv_cache_configurator.py`` + ``distributed/bootstrap.py``). Version bounds between
the wheels read are taken from ``shared/specs/sglang.md`` §0.1 (0.5.7 mixin, 0.5.18 configurator);
the 0.5.15–0.5.22 window for ``measure_pre_model_load_memory`` was not read, so a wrong bound
there shows up as a loudly reported missing target, never as silently absent data.

Units are the engine's: ``get_available_gpu_memory`` returns GiB floats; ``pre_model_load_memory``
(``total_gpu_memory`` / ``min_per_gpu_memory`` in older versions) is GiB; budgets in ``*_bytes``.
Stdlib only: the agent gets this table as JSON.
"""

from __future__ import annotations

from kvscope.probe.targets import Target

ENGINE = "sglang"
_MR = "sglang.srt.model_executor.model_runner"
_MIXIN = "sglang.srt.model_executor.model_runner_kv_cache_mixin"
_POOLCFG = "sglang.srt.model_executor.pool_configurator"
_KVC = "sglang.srt.mem_cache.kv_cache_configurator"
_SCHED = "sglang.srt.managers.scheduler"
_POOL = "sglang.srt.mem_cache.memory_pool"

# The formula's named quantities, captured from the profile function's locals at its return
# (or raise): ``rest = available - pre * (1 - mem_fraction_static)``.
_CLASSIC_LOCALS = {
    "available_gpu_memory_gib": "available_gpu_memory",
    "cell_size_bytes": "cell_size",
    "rest_memory_gib": "rest_memory",
    "num_layers": "num_layers",
}
_RUNNER_RANK = {"tp_rank": "self.tp_rank", "pp_rank": "self.pp_rank", "gpu_id": "self.gpu_id",
                "tp_size": "self.tp_size", "pp_size": "self.pp_size"}


def _t(id: str, module: str, qualname: str, **kw) -> Target:
    return Target(id=id, engine=ENGINE, module=module, qualname=qualname, **kw)


TARGETS: tuple[Target, ...] = (
    # -- process identity: one scheduler process per (dp, pp, tp) rank --------------------------
    _t("run_scheduler_process", _SCHED, "run_scheduler_process",
       rank={"tp_rank": "arg.tp_rank", "pp_rank": "arg.pp_rank", "dp_rank": "arg.dp_rank",
             "gpu_id": "arg.gpu_id", "tp_size": "arg.server_args.tp_size",
             "pp_size": "arg.server_args.pp_size", "dp_size": "arg.server_args.dp_size"},
       inputs={"model_path": "arg.server_args.model_path",
               "mem_fraction_static": "arg.server_args.mem_fraction_static",
               "max_total_tokens": "arg.server_args.max_total_tokens",
               "max_running_requests": "arg.server_args.max_running_requests",
               "page_size": "arg.server_args.page_size",
               "kv_cache_dtype": "arg.server_args.kv_cache_dtype",
               "disable_custom_all_reduce": "arg.server_args.disable_custom_all_reduce",
               "cuda_graph_max_bs": "arg.server_args.cuda_graph_max_bs",
               "speculative_algorithm": "arg.server_args.speculative_algorithm"},
       why="rank of this process and the server args the formula reads"),
    # -- the one measuring tool: free memory in GiB (MIN over ranks when distributed) ----------
    _t("get_available_gpu_memory", "sglang.srt.utils.common", "get_available_gpu_memory",
       inputs={"device": "arg.device", "gpu_id": "arg.gpu_id",
               "distributed": "arg.distributed", "empty_cache": "arg.empty_cache"},
       outputs={"free_gib": "ret"},
       why="every free-memory figure SGLang logs or uses"),
    # -- baseline: MIN free memory across the world after NCCL/custom AR, before weights -------
    _t("init_torch_distributed", _MR, "ModelRunner.init_torch_distributed", versions="<0.5.23",
       phase="init", rank=_RUNNER_RANK,
       inputs={"is_draft_worker": "self.is_draft_worker",
               "mem_fraction_static": "self.mem_fraction_static"},
       outputs={"pre_model_load_memory_gib": "ret"},
       why="min_per_gpu_memory (<=0.5.9) / pre_model_load_memory (0.5.10+) is its return"),
    _t("init_torch_distributed", _MR, "ModelRunner.init_torch_distributed", versions=">=0.5.23",
       phase="init", rank={"gpu_id": "self.gpu_id"},
       inputs={"is_draft_worker": "self.is_draft_worker",
               "mem_fraction_static": "self.mem_fraction_static"},
       outputs={"pre_model_load_memory_gib": "self.pre_model_load_memory"}),
    _t("measure_pre_model_load_memory", "sglang.srt.distributed.bootstrap",
       "measure_pre_model_load_memory", versions=">=0.5.23", phase="init",
       inputs={"is_draft_worker": "arg.is_draft_worker"},
       outputs={"pre_model_load_memory_gib": "ret"}),
    # -- weights --------------------------------------------------------------------------------
    _t("load_model", _MR, "ModelRunner.load_model", phase="load_weights",
       inputs={"is_draft_worker": "self.is_draft_worker"},
       outputs={"weight_load_mem_usage_gib": "self.weight_load_mem_usage"}),
    # -- the sizing formula ---------------------------------------------------------------------
    _t("profile_max_num_token", _MR, "ModelRunner.profile_max_num_token", versions="<0.5.7",
       phase="profile",
       inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory",
               "mem_fraction_static": "self.mem_fraction_static",
               "is_draft_worker": "self.is_draft_worker"},
       outputs={"max_total_num_tokens": "ret"}, locals=_CLASSIC_LOCALS),
    _t("profile_max_num_token", _MIXIN, "ModelRunnerKVCacheMixin.profile_max_num_token",
       versions=">=0.5.7,<0.5.14", phase="profile",
       inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory",
               "mem_fraction_static": "self.mem_fraction_static",
               "is_draft_worker": "self.is_draft_worker"},
       outputs={"max_total_num_tokens": "ret"}, locals=_CLASSIC_LOCALS),
    _t("get_cell_size_per_token", _MIXIN, "ModelRunnerKVCacheMixin.get_cell_size_per_token",
       versions=">=0.5.7,<0.5.14", inputs={"num_layers": "arg.num_layers"},
       outputs={"cell_size_bytes": "ret"}),
    _t("_profile_available_bytes", _MIXIN, "ModelRunnerKVCacheMixin._profile_available_bytes",
       versions=">=0.5.14,<0.5.18", phase="profile",
       inputs={"pre_model_load_memory_gib": "arg.pre_model_load_memory",
               "mem_fraction_static": "self.mem_fraction_static",
               "is_draft_worker": "self.is_draft_worker"},
       outputs={"available_bytes": "ret"},
       locals={"available_gpu_memory_gib": "available_gpu_memory",
               "rest_memory_gib": "rest_memory"}),
    _t("_resolve_memory_pool_config", _MIXIN, "ModelRunnerKVCacheMixin._resolve_memory_pool_config",
       versions=">=0.5.14,<0.5.18", phase="profile",
       outputs={"max_total_num_tokens": "ret.max_total_num_tokens",
                "max_running_requests": "ret.max_running_requests",
                "full_max_total_num_tokens": "ret.full_max_total_num_tokens",
                "swa_max_total_num_tokens": "ret.swa_max_total_num_tokens"}),
    _t("_profile_available_bytes", _KVC, "KVCacheConfigurator._profile_available_bytes",
       versions=">=0.5.18", phase="profile",
       inputs={"pre_model_load_memory_gib": "arg.pre_model_load_memory",
               "is_draft_worker": "self.is_draft_worker"},
       outputs={"available_bytes": "ret"},
       locals={"available_gpu_memory_gib": "available_gpu_memory", "slack_gib": "slack_gb",
               "mm_reservation_gib": "mm_reservation_gb", "rest_memory_gib": "rest_memory"}),
    _t("calculate_pool_sizes", _POOLCFG, "DefaultPoolConfigurator.calculate_pool_sizes",
       versions=">=0.5.14", phase="profile",
       inputs={"available_bytes": "arg.available_bytes", "page_size": "arg.page_size",
               "cell_size_bytes": "self._cell_size"},
       outputs={"max_total_num_tokens": "ret.max_total_num_tokens"}),
    _t("calculate_pool_sizes_swa", _POOLCFG, "HybridSWAPoolConfigurator.calculate_pool_sizes",
       versions=">=0.5.14", phase="profile", required=False,
       inputs={"available_bytes": "arg.available_bytes", "page_size": "arg.page_size",
               "cell_size_bytes": "self._cell_size"},
       outputs={"max_total_num_tokens": "ret.max_total_num_tokens",
                "full_max_total_num_tokens": "ret.full_max_total_num_tokens",
                "swa_max_total_num_tokens": "ret.swa_max_total_num_tokens"}),
    # -- pool allocation ------------------------------------------------------------------------
    _t("init_memory_pool", _MR, "ModelRunner.init_memory_pool", versions="<0.5.7",
       phase="kv_cache",
       inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory"},
       outputs={"max_total_num_tokens": "self.max_total_num_tokens",
                "max_running_requests": "self.max_running_requests",
                "page_size": "self.page_size"}),
    _t("init_memory_pool", _MIXIN, "ModelRunnerKVCacheMixin.init_memory_pool",
       versions=">=0.5.7,<0.5.18", phase="kv_cache",
       inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory",
               "pre_model_load_memory_gib_v14": "arg.pre_model_load_memory"},
       outputs={"max_total_num_tokens": "self.max_total_num_tokens",
                "max_running_requests": "self.max_running_requests",
                "page_size": "self.page_size"}),
    _t("configure", _KVC, "KVCacheConfigurator.configure", versions=">=0.5.18",
       phase="kv_cache",
       inputs={"pre_model_load_memory_gib": "arg.pre_model_load_memory",
               "is_draft_worker": "self.is_draft_worker", "page_size": "self.page_size"},
       outputs={"max_total_num_tokens": "ret.max_total_num_tokens",
                "max_running_requests": "ret.max_running_requests",
                "full_max_total_num_tokens": "ret.full_max_total_num_tokens",
                "swa_max_total_num_tokens": "ret.swa_max_total_num_tokens"}),
    _t("ReqToTokenPool", _POOL, "ReqToTokenPool.__init__", phase="req_to_token_pool",
       inputs={"size": "arg.size", "max_context_len": "arg.max_context_len"}),
    _t("MHATokenToKVPool", _POOL, "MHATokenToKVPool.__init__", required=False,
       inputs={"size": "arg.size", "page_size": "arg.page_size", "dtype": "arg.dtype",
               "head_num": "arg.head_num", "head_dim": "arg.head_dim",
               "layer_num": "arg.layer_num"}),
    _t("MLATokenToKVPool", _POOL, "MLATokenToKVPool.__init__", required=False,
       inputs={"size": "arg.size", "page_size": "arg.page_size", "dtype": "arg.dtype",
               "kv_lora_rank": "arg.kv_lora_rank", "qk_rope_head_dim": "arg.qk_rope_head_dim",
               "layer_num": "arg.layer_num"}),
    # -- CUDA graphs ----------------------------------------------------------------------------
    _t("init_device_graphs", _MR, "ModelRunner.init_device_graphs", versions="<0.5.14",
       phase="cuda_graph", inputs={"is_draft_worker": "self.is_draft_worker"}),
    _t("init_cuda_graphs", _MR, "ModelRunner.init_cuda_graphs", versions=">=0.5.14",
       phase="cuda_graph", inputs={"is_draft_worker": "self.is_draft_worker"}),
    # -- end of startup: the scheduler loop starts; nothing after this is recorded -------------
    _t("event_loop_normal", _SCHED, "Scheduler.event_loop_normal", end_of_startup="call",
       required=False),
    _t("event_loop_overlap", _SCHED, "Scheduler.event_loop_overlap", end_of_startup="call",
       required=False),
)
