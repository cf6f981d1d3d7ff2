"""What ``kvscope probe`` wraps inside SGLang, version by version.

Read from the released wheels (``pip download --no-deps sglang==X``) and checked target by target,
release by release, by ``tests/conformance/test_hook_targets.py``: 0.4.6.post5, 0.4.8.post1,
0.4.10.post2 (``utils.py``, ``init_cuda_graphs``), 0.5.1–0.5.13 (``init_device_graphs``), 0.5.3+
(``utils/common.py``), 0.5.7–0.5.10 (mixin ``profile_max_num_token``), 0.5.10+
(``_resolve_memory_pool_config``; ``init_memory_pool(pre_model_load_memory)``), 0.5.11–0.5.15
(mixin ``_profile_available_bytes`` + ``pool_configurator.py``), 0.5.16+
(``mem_cache/kv_cache_configurator.py``; ``ModelRunner.ps``), 0.5.21+
(``distributed/bootstrap.measure_pre_model_load_memory``). Every bound below sits between two
adjacent read releases (0.5.0 is not on PyPI); a wrong one would show up as a loudly
reported missing target, never as silently absent data.

Units are the engine's: ``get_available_gpu_memory`` returns GiB floats; ``pre_model_load_memory``
(``total_gpu_memory`` / ``min_per_gpu_memory`` in older versions) is GiB; budgets in ``*_bytes``.
Pure data: the agent gets this table as JSON. The bounds here are where functions live (module
moves): the release table's code-layout traits (``engines/sglang/release.py``: ``profile_code``,
``pool_init_code``, ``pool_configurator_code``, ``graph_init_code``, ``baseline_code``) give them.
"""

from __future__ import annotations

from kvscope.engines.sglang.release import CodeHome, GraphInit, era_spec
from kvscope.hooks import Target, target_maker

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
# 0.5.16+: the runner keeps its parallel state in ``self.ps`` (model_runner.py @ 0.5.16 l.262;
# ``self.tp_rank = `` @ 0.5.15, absent @ 0.5.16).
_RUNNER_RANK_PS = {"tp_rank": "self.ps.tp_rank", "pp_rank": "self.ps.pp_rank", "gpu_id": "self.gpu_id",
                   "tp_size": "self.ps.tp_size", "pp_size": "self.ps.pp_size"}
_RANK_ATTRS = "<0.5.16"
_RANK_PS = ">=0.5.16"  # to 0.5.20; from 0.5.21 the bootstrap row's target applies

_INIT_INPUTS = {"is_draft_worker": "self.is_draft_worker",
                "mem_fraction_static": "self.mem_fraction_static"}
# The classic profile function's arguments (``total_gpu_memory`` is the pre-load free GiB).
_CLASSIC_PROFILE_INPUTS = {"pre_model_load_memory_gib": "arg.total_gpu_memory",
                           "mem_fraction_static": "self.mem_fraction_static",
                           "is_draft_worker": "self.is_draft_worker"}
_FREE_INPUTS = {"device": "arg.device", "gpu_id": "arg.gpu_id", "distributed": "arg.distributed",
                "empty_cache": "arg.empty_cache"}
_POOL_SIZES_INPUTS = {"available_bytes": "arg.available_bytes", "page_size": "arg.page_size",
                      "cell_size_bytes": "self._cell_size"}


def _fields(prefix: str, *names: str) -> dict[str, str]:
    """``{name: prefix + name}``: the engine object's fields under their own names."""
    return {n: prefix + n for n in names}


_TOKENS = ("max_total_num_tokens", "max_running_requests")
_SWA_TOKENS = ("full_max_total_num_tokens", "swa_max_total_num_tokens")
_POOL_CONFIG_OUTPUTS = _fields("ret.", *_TOKENS, *_SWA_TOKENS)  # the pool-config record
_POOL_ATTR_OUTPUTS = _fields("self.", *_TOKENS, "page_size")  # set on the runner

_target = target_maker(ENGINE)

# Version ranges: where each hooked function lives, from the release table's code-layout traits.
_PROFILE_RUNNER = era_spec("profile_code", CodeHome.MODEL_RUNNER)  # <0.5.7
_POOL_RUNNER = era_spec("pool_init_code", CodeHome.MODEL_RUNNER)  # <0.5.7
# mem_cache/kv_cache_configurator.py replaces the mixin in 0.5.16 (absent @ 0.5.15), before the
# release table's 0.5.18 row.
_PROFILE_CONFIGURATOR = ">=0.5.16"
_POOL_MIXIN = ">=0.5.7,<0.5.16"
_POOL_CONFIGURATOR = ">=0.5.16"
# The baseline moves to distributed/bootstrap.py's measure_pre_model_load_memory in 0.5.21
# (model_runner.py @ 0.5.21 l.1163; absent @ 0.5.20), before the release table's 0.5.23 row.
_BASELINE_RETURNED = "<0.5.21"
_BASELINE_BOOTSTRAP = ">=0.5.21"
# Where the release table's eras (engines/sglang/release.py: profile_code's split at 0.5.14,
# graph_init_code's single <0.5.14 row, pool_configurator_code >=0.5.14) do not match where the
# functions live, the hooks take the bounds read from the wheels (test_hook_targets.py):
# profile_max_num_token / get_cell_size_per_token leave the mixin after 0.5.10 (absent @ 0.5.11),
# _profile_available_bytes and pool_configurator.py are there from 0.5.11 (absent @ 0.5.10),
# _resolve_memory_pool_config from 0.5.10 (absent @ 0.5.9).
_PROFILE_MIXIN = ">=0.5.7,<0.5.10"  # profile_max_num_token(total_gpu_memory)
_PROFILE_MIXIN_PRE = ">=0.5.10,<0.5.11"  # profile_max_num_token(pre_model_load_memory) @ 0.5.10
_CELL_SIZE_MIXIN = ">=0.5.7,<0.5.11"
_PROFILE_SPLIT = ">=0.5.11,<0.5.16"
_RESOLVE_POOL_CONFIG = ">=0.5.10,<0.5.16"
# the profile's free-memory local: post_model_load_memory @ 0.5.11 … 0.5.13, available_gpu_memory @ 0.5.14
_PROFILE_SPLIT_POST = ">=0.5.11,<0.5.14"
_PROFILE_SPLIT_AVAILABLE = ">=0.5.14,<0.5.16"
_SPLIT_PROFILE_INPUTS = {"pre_model_load_memory_gib": "arg.pre_model_load_memory",
                         "mem_fraction_static": "self.mem_fraction_static",
                         "is_draft_worker": "self.is_draft_worker"}
_POOL_CONFIGURATOR_CLASSES = ">=0.5.11"
# init_cuda_graphs @ 0.4.6.post5 … 0.4.10.post2 and 0.5.14+; init_device_graphs @ 0.5.1 … 0.5.13.
_GRAPHS_DEVICE = ">=0.5.1," + era_spec("graph_init_code", GraphInit.DEVICE_GRAPHS)  # >=0.5.1,<0.5.14
_GRAPHS_CUDA_OLD = "<0.5.1"
_GRAPHS_CUDA = era_spec("graph_init_code", GraphInit.CUDA_GRAPHS)  # >=0.5.14
# get_available_gpu_memory: sglang/srt/utils.py @ 0.5.2, utils/common.py @ 0.5.3.
_UTILS_PACKAGE = ">=0.5.3"
_UTILS_MODULE = "<0.5.3"


TARGETS: tuple[Target, ...] = (
    # -- process identity: one scheduler process per (dp, pp, tp) rank --------------------------
    _target("run_scheduler_process", _SCHED, "run_scheduler_process",
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
    _target("get_available_gpu_memory", "sglang.srt.utils.common", "get_available_gpu_memory",
            versions=_UTILS_PACKAGE, inputs=_FREE_INPUTS, outputs={"free_gib": "ret"},
            why="every free-memory figure SGLang logs or uses"),
    _target("get_available_gpu_memory", "sglang.srt.utils", "get_available_gpu_memory",
            versions=_UTILS_MODULE, inputs=_FREE_INPUTS, outputs={"free_gib": "ret"}),
    # -- baseline: MIN free memory across the world after NCCL/custom AR, before weights -------
    _target("init_torch_distributed", _MR, "ModelRunner.init_torch_distributed",
            versions=_BASELINE_RETURNED + "," + _RANK_ATTRS, phase="init", rank=_RUNNER_RANK,
            inputs=_INIT_INPUTS,
            outputs={"pre_model_load_memory_gib": "ret"},
            why="min_per_gpu_memory (<=0.5.9) / pre_model_load_memory (0.5.10+) is its return"),
    _target("init_torch_distributed", _MR, "ModelRunner.init_torch_distributed",
            versions=_BASELINE_RETURNED + "," + _RANK_PS, phase="init", rank=_RUNNER_RANK_PS,
            inputs=_INIT_INPUTS,
            outputs={"pre_model_load_memory_gib": "ret"}),
    _target("init_torch_distributed", _MR, "ModelRunner.init_torch_distributed",
            versions=_BASELINE_BOOTSTRAP, phase="init", rank={"gpu_id": "self.gpu_id"},
            inputs=_INIT_INPUTS,
            outputs={"pre_model_load_memory_gib": "self.pre_model_load_memory"}),
    _target("measure_pre_model_load_memory", "sglang.srt.distributed.bootstrap",
            "measure_pre_model_load_memory", versions=_BASELINE_BOOTSTRAP, phase="init",
            inputs={"is_draft_worker": "arg.is_draft_worker"},
            outputs={"pre_model_load_memory_gib": "ret"}),
    # -- weights --------------------------------------------------------------------------------
    _target("load_model", _MR, "ModelRunner.load_model", phase="load_weights",
            inputs={"is_draft_worker": "self.is_draft_worker"},
            outputs={"weight_load_mem_usage_gib": "self.weight_load_mem_usage"}),
    # -- the sizing formula ---------------------------------------------------------------------
    _target("profile_max_num_token", _MR, "ModelRunner.profile_max_num_token", versions=_PROFILE_RUNNER,
            phase="profile",
            inputs=_CLASSIC_PROFILE_INPUTS,
            outputs={"max_total_num_tokens": "ret"}, locals=_CLASSIC_LOCALS),
    _target("profile_max_num_token", _MIXIN, "ModelRunnerKVCacheMixin.profile_max_num_token",
            versions=_PROFILE_MIXIN, phase="profile",
            inputs=_CLASSIC_PROFILE_INPUTS,
            outputs={"max_total_num_tokens": "ret"}, locals=_CLASSIC_LOCALS),
    _target("profile_max_num_token", _MIXIN, "ModelRunnerKVCacheMixin.profile_max_num_token",
            versions=_PROFILE_MIXIN_PRE, phase="profile",
            inputs={**_CLASSIC_PROFILE_INPUTS, "pre_model_load_memory_gib": "arg.pre_model_load_memory"},
            outputs={"max_total_num_tokens": "ret"},
            locals={**_CLASSIC_LOCALS, "available_gpu_memory_gib": "post_model_load_memory"}),
    _target("get_cell_size_per_token", _MIXIN, "ModelRunnerKVCacheMixin.get_cell_size_per_token",
            versions=_CELL_SIZE_MIXIN, inputs={"num_layers": "arg.num_layers"},
            outputs={"cell_size_bytes": "ret"}),
    _target("_profile_available_bytes", _MIXIN, "ModelRunnerKVCacheMixin._profile_available_bytes",
            versions=_PROFILE_SPLIT_POST, phase="profile", inputs=_SPLIT_PROFILE_INPUTS,
            outputs={"available_bytes": "ret"},
            locals={"available_gpu_memory_gib": "post_model_load_memory",
                    "rest_memory_gib": "rest_memory"}),
    _target("_profile_available_bytes", _MIXIN, "ModelRunnerKVCacheMixin._profile_available_bytes",
            versions=_PROFILE_SPLIT_AVAILABLE, phase="profile", inputs=_SPLIT_PROFILE_INPUTS,
            outputs={"available_bytes": "ret"},
            locals={"available_gpu_memory_gib": "available_gpu_memory",
                    "rest_memory_gib": "rest_memory"}),
    _target("_resolve_memory_pool_config", _MIXIN,
            "ModelRunnerKVCacheMixin._resolve_memory_pool_config",
            versions=_RESOLVE_POOL_CONFIG, phase="profile",
            outputs=_POOL_CONFIG_OUTPUTS),
    _target("_profile_available_bytes", _KVC, "KVCacheConfigurator._profile_available_bytes",
            versions=_PROFILE_CONFIGURATOR, phase="profile",
            inputs={"pre_model_load_memory_gib": "arg.pre_model_load_memory",
                    "is_draft_worker": "self.is_draft_worker"},
            outputs={"available_bytes": "ret"},
            locals={"available_gpu_memory_gib": "available_gpu_memory", "slack_gib": "slack_gb",
                    "mm_reservation_gib": "mm_reservation_gb", "rest_memory_gib": "rest_memory"}),
    _target("calculate_pool_sizes", _POOLCFG, "DefaultPoolConfigurator.calculate_pool_sizes",
            versions=_POOL_CONFIGURATOR_CLASSES, phase="profile",
            inputs=_POOL_SIZES_INPUTS,
            outputs={"max_total_num_tokens": "ret.max_total_num_tokens"}),
    _target("calculate_pool_sizes_swa", _POOLCFG, "HybridSWAPoolConfigurator.calculate_pool_sizes",
            versions=_POOL_CONFIGURATOR_CLASSES, phase="profile", required=False,
            inputs=_POOL_SIZES_INPUTS,
            outputs=_fields("ret.", "max_total_num_tokens", *_SWA_TOKENS)),
    # -- pool allocation ------------------------------------------------------------------------
    _target("init_memory_pool", _MR, "ModelRunner.init_memory_pool", versions=_POOL_RUNNER,
            phase="kv_cache",
            inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory"},
            outputs=_POOL_ATTR_OUTPUTS),
    _target("init_memory_pool", _MIXIN, "ModelRunnerKVCacheMixin.init_memory_pool",
            versions=_POOL_MIXIN, phase="kv_cache",
            inputs={"pre_model_load_memory_gib": "arg.total_gpu_memory",
                    "pre_model_load_memory_gib_v14": "arg.pre_model_load_memory"},
            outputs=_POOL_ATTR_OUTPUTS),
    _target("configure", _KVC, "KVCacheConfigurator.configure", versions=_POOL_CONFIGURATOR,
            phase="kv_cache",
            inputs={"pre_model_load_memory_gib": "arg.pre_model_load_memory",
                    "is_draft_worker": "self.is_draft_worker", "page_size": "self.page_size"},
            outputs=_POOL_CONFIG_OUTPUTS),
    _target("ReqToTokenPool", _POOL, "ReqToTokenPool.__init__", phase="req_to_token_pool",
            inputs={"size": "arg.size", "max_context_len": "arg.max_context_len"}),
    _target("MHATokenToKVPool", _POOL, "MHATokenToKVPool.__init__", required=False,
            inputs={"size": "arg.size", "page_size": "arg.page_size", "dtype": "arg.dtype",
                    "head_num": "arg.head_num", "head_dim": "arg.head_dim",
                    "layer_num": "arg.layer_num"}),
    _target("MLATokenToKVPool", _POOL, "MLATokenToKVPool.__init__", required=False,
            inputs={"size": "arg.size", "page_size": "arg.page_size", "dtype": "arg.dtype",
                    "kv_lora_rank": "arg.kv_lora_rank", "qk_rope_head_dim": "arg.qk_rope_head_dim",
                    "layer_num": "arg.layer_num"}),
    # -- CUDA graphs ----------------------------------------------------------------------------
    _target("init_device_graphs", _MR, "ModelRunner.init_device_graphs", versions=_GRAPHS_DEVICE,
            phase="cuda_graph", inputs={"is_draft_worker": "self.is_draft_worker"}),
    _target("init_cuda_graphs", _MR, "ModelRunner.init_cuda_graphs", versions=_GRAPHS_CUDA,
            phase="cuda_graph", inputs={"is_draft_worker": "self.is_draft_worker"}),
    _target("init_cuda_graphs", _MR, "ModelRunner.init_cuda_graphs", versions=_GRAPHS_CUDA_OLD,
            phase="cuda_graph", inputs={"is_draft_worker": "self.is_draft_worker"}),
    # -- end of startup: the scheduler loop starts; nothing after this is recorded -------------
    _target("event_loop_normal", _SCHED, "Scheduler.event_loop_normal", end_of_startup="call",
            required=False),
    _target("event_loop_overlap", _SCHED, "Scheduler.event_loop_overlap", end_of_startup="call",
            required=False),
)
