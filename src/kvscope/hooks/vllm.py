"""What ``kvscope probe`` wraps inside vLLM (V1 engine), version by version.

Read from the released wheels 0.11.0 (``vllm/utils/__init__.py`` holds ``MemorySnapshot`` and
``memory_profiling``; ``v1/core/kv_cache_utils.py``), 0.19.1 (``vllm/utils/mem_utils.py``;
``profile_cudagraph_memory``), 0.20.2 and 0.32.0 (``get_kv_cache_configs`` still in
``kv_cache_utils.py``) and 0.33.0 (``v1/core/kv_cache_planning.py``), and checked target by target by
``tests/conformance/test_hook_targets.py``. Bounds between the wheels read (0.12–0.18, 0.21–0.31) were
not read; a wrong one shows up as a loudly reported missing target. All figures are bytes (vLLM
works in bytes; it logs GiB).

Where the work runs: ``Worker.*`` and ``GPUModelRunner.*`` in each worker process (one per GPU
rank); ``get_kv_cache_configs`` in the EngineCore process (the same process when TP=PP=1).
Pure data: the agent gets this table as JSON. Every version bound comes from the release table
(``engines/vllm/release.py``): a named behaviour (``cudagraph_estimate_profiled``) or a module move
(``mem_utils_module`` 0.19, ``kv_cache_planning_module`` 0.20; their on / off values are the modules).
"""

from __future__ import annotations

from kvscope.engines.vllm.release import TRAITS as RELEASE
from kvscope.hooks import Target, target_maker

ENGINE = "vllm"
_W = "vllm.v1.worker.gpu_worker"
_R = "vllm.v1.worker.gpu_model_runner"

_SNAPSHOT_FIELDS = {
    "free_bytes": "self.free_memory",
    "total_bytes": "self.total_memory",
    "torch_peak_bytes": "self.torch_peak",
    "torch_memory_bytes": "self.torch_memory",
    "non_torch_memory_bytes": "self.non_torch_memory",
}
_PROFILE_RESULT_FIELDS = {
    "non_kv_cache_memory_bytes": "ret.non_kv_cache_memory",
    "torch_peak_increase_bytes": "ret.torch_peak_increase",
    "non_torch_increase_bytes": "ret.non_torch_increase",
    "weights_memory_bytes": "ret.weights_memory",
    "total_consumed_bytes": "ret.total_consumed",  # >= 0.27 formula
    "before_profile_free_bytes": "ret.before_profile.free_memory",
    "after_profile_free_bytes": "ret.after_profile.free_memory",
}

_PROFILING_INPUTS = {"weights_memory_bytes": "arg.weights_memory",
                     "baseline_free_bytes": "arg.baseline_snapshot.free_memory"}
# get_kv_cache_configs: per-worker available memory in, per-worker block counts out.
_KV_CONFIGS = dict(phase="profile",
                   inputs={"available_memory_bytes_per_worker": "arg.available_memory"},
                   outputs={"num_blocks_per_worker": "ret.[].num_blocks"})

_target = target_maker(ENGINE)

# Where the hooked functions live, from the release table's code-layout traits.
_MEM_UTILS = RELEASE["mem_utils_module"]  # MemorySnapshot / memory_profiling (its modules)
# ... but not its bound: vllm/utils/mem_utils.py holds them from 0.12 (absent @ 0.11.0, present @
# v0.12.0 … v0.18.0 as well; read by tests/conformance/test_hook_targets.py), where the release
# table's trait says 0.19.
_MEM_UTILS_SPEC = ">=0.12"
_MEM_UTILS_OFF_SPEC = "<0.12"
_KV_PLANNING = RELEASE["kv_cache_planning_module"]  # get_kv_cache_configs / get_num_blocks
# CPUWorker.determine_available_memory reads kv_cache_memory_bytes (explicit) or the worker's
# requested_cpu_memory minus its RSS (auto): cpu_worker.py @ v0.20.2 l.153 … v0.33.0 l.191.
_CPU_SIZING = ">=0.20"
# 0.10: one get_kv_cache_config call per worker (kv_cache_utils.py @ v0.10.1.1 l.1079); the list
# version get_kv_cache_configs @ v0.11.0.
_ONE_CONFIG = "<0.11"
_ALL_CONFIGS = ">=0.11"
# get_num_blocks: kv_cache_utils.py @ v0.28.0 l.973; inlined (absent) @ v0.29.0 … v0.32.0.
_NUM_BLOCKS_FUNCTION = "<0.29"


TARGETS: tuple[Target, ...] = (
    # -- init: NCCL/custom AR, then the init snapshot and requested memory ----------------------
    _target("init_device", _W, "Worker.init_device", phase="init",
            rank={"rank": "self.rank", "local_rank": "self.local_rank",
                  "tp_size": "self.parallel_config.tensor_parallel_size",
                  "pp_size": "self.parallel_config.pipeline_parallel_size"},
            inputs={"gpu_memory_utilization": "self.cache_config.gpu_memory_utilization",
                    "model": "self.model_config.model"},
            outputs={"init_free_bytes": "self.init_snapshot.free_memory",
                     "total_bytes": "self.init_snapshot.total_memory",
                     "requested_memory_bytes": "self.requested_memory"}),
    _target("MemorySnapshot.measure", _MEM_UTILS.off, "MemorySnapshot.measure", versions=_MEM_UTILS_OFF_SPEC,
            outputs=_SNAPSHOT_FIELDS),
    _target("MemorySnapshot.measure", _MEM_UTILS.on, "MemorySnapshot.measure",
            versions=_MEM_UTILS_SPEC, outputs=_SNAPSHOT_FIELDS),
    # -- weights --------------------------------------------------------------------------------
    _target("load_model", _W, "Worker.load_model", phase="load_weights",
            outputs={"model_memory_usage_bytes": "self.model_runner.model_memory_usage"}),
    # -- the profile and the formula ------------------------------------------------------------
    _target("memory_profiling", _MEM_UTILS.off, "memory_profiling", versions=_MEM_UTILS_OFF_SPEC,
            kind="contextmanager", phase="profile",
            inputs=_PROFILING_INPUTS,
            outputs=_PROFILE_RESULT_FIELDS),
    _target("memory_profiling", _MEM_UTILS.on, "memory_profiling", versions=_MEM_UTILS_SPEC,
            kind="contextmanager", phase="profile",
            inputs=_PROFILING_INPUTS,
            outputs=_PROFILE_RESULT_FIELDS),
    _target("profile_cudagraph_memory", _R, "GPUModelRunner.profile_cudagraph_memory",
            versions=RELEASE["cudagraph_estimate_profiled"].spec, phase="profile",
            outputs={"cudagraph_memory_estimate_bytes": "ret"}),
    _target("determine_available_memory", _W, "Worker.determine_available_memory", phase="profile",
            inputs={"gpu_memory_utilization": "self.cache_config.gpu_memory_utilization",
                    "kv_cache_memory_bytes": "self.cache_config.kv_cache_memory_bytes",
                    "init_free_bytes": "self.init_snapshot.free_memory",
                    "total_bytes": "self.init_snapshot.total_memory",
                    "requested_memory_bytes": "self.requested_memory",
                    "weights_memory_bytes": "self.model_runner.model_memory_usage"},
            outputs={"available_kv_cache_memory_bytes": "ret",
                     "available_kv_cache_memory_bytes_attr": "self.available_kv_cache_memory_bytes",
                     "peak_activation_memory_bytes": "self.peak_activation_memory",
                     "non_torch_memory_bytes": "self.non_torch_memory",
                     "cudagraph_memory_estimate_bytes": "self.cudagraph_memory_estimate",
                     "total_consumed_bytes": "self.total_consumed"},
            locals={"non_kv_cache_memory_bytes": "profile_result.non_kv_cache_memory",
                    "free_gpu_memory_bytes": "free_gpu_memory",
                    "cudagraph_memory_estimate_applied_bytes":
                        "cudagraph_memory_estimate_applied"}),
    # -- KV config: runs in the EngineCore process, one entry per worker ------------------------
    _target("get_kv_cache_configs", _KV_PLANNING.off, "get_kv_cache_config", versions=_ONE_CONFIG,
            phase="profile", inputs=_KV_CONFIGS["inputs"], outputs={"num_blocks": "ret.num_blocks"}),
    _target("get_kv_cache_configs", _KV_PLANNING.off, "get_kv_cache_configs",
            versions=_ALL_CONFIGS + "," + _KV_PLANNING.off_spec, **_KV_CONFIGS),
    _target("get_kv_cache_configs", _KV_PLANNING.on, "get_kv_cache_configs",
            versions=_KV_PLANNING.spec, **_KV_CONFIGS),
    _target("get_num_blocks", _KV_PLANNING.off, "get_num_blocks", versions=_NUM_BLOCKS_FUNCTION,
            required=False, phase="profile",
            inputs={"worker_available_memory_bytes": "arg.available_memory",
                    "page_size_bytes": "arg.page_size", "num_layers": "arg.num_layers"},
            outputs={"worker_num_blocks": "ret"}),  # per worker, before the MIN across workers
    # the figure of "Maximum concurrency for N tokens per request: Xx" (kv_cache_utils.py in every
    # release read, v0.10.1.1 … v0.33.0; EngineCore process)
    _target("get_max_concurrency", "vllm.v1.core.kv_cache_utils",
            "get_max_concurrency_for_kv_cache_config", phase="profile", required=False,
            inputs={"num_blocks": "arg.kv_cache_config.num_blocks",
                    "max_model_len": "arg.vllm_config.model_config.max_model_len"},
            outputs={"max_concurrency": "ret"}),
    # -- allocation and graphs ------------------------------------------------------------------
    _target("initialize_from_config", _W, "Worker.initialize_from_config", phase="kv_cache",
            inputs={"num_blocks": "arg.kv_cache_config.num_blocks",
                    "kv_cache_tensor_bytes": "arg.kv_cache_config.kv_cache_tensors.[].size"},
            outputs={"num_gpu_blocks": "self.cache_config.num_gpu_blocks",
                     "block_size": "self.cache_config.block_size"}),
    _target("capture_model", _R, "GPUModelRunner.capture_model", phase="cuda_graph",
            outputs={"cuda_graph_size_bytes": "ret"}),
    _target("compile_or_warm_up_model", _W, "Worker.compile_or_warm_up_model",
            end_of_startup="return"),
    # -- end of startup in the EngineCore process, on every platform: its busy loop starts -----
    _target("run_busy_loop", "vllm.v1.engine.core", "EngineCoreProc.run_busy_loop",
            end_of_startup="call", required=False,
            why="the EngineCore serves from here (DPEngineCoreProc's override is followed too)"),
    # -- the CPU platform: CPUWorker overrides init_device / determine_available_memory /
    # compile_or_warm_up_model (the Worker targets follow the overrides); its sizing reads
    # VLLM_CPU_KVCACHE_SPACE (kv_cache_memory_bytes) or the worker's reserved memory minus its RSS.
    _target("determine_available_memory", "vllm.v1.worker.cpu_worker",
            "CPUWorker.determine_available_memory", versions=_CPU_SIZING, phase="profile",
            required=False,
            inputs={"kv_cache_memory_bytes": "self.cache_config.kv_cache_memory_bytes",
                    "gpu_memory_utilization": "self.cache_config.gpu_memory_utilization",
                    "requested_memory_bytes": "self.requested_cpu_memory",
                    "kv_cache_space_env": "env.VLLM_CPU_KVCACHE_SPACE"},
            outputs={"available_kv_cache_memory_bytes": "ret"},
            locals={"cpu_available_memory_bytes": "available_memory",
                    "cpu_total_memory_bytes": "memory_status.total_memory",
                    "cpu_numa_node": "cpu_core.numa_node",
                    "consumed_memory_bytes": "consumed_memory",
                    "explicit_kv_cache_size_bytes": "explicit_kv_cache_size"},
            why="the CPU worker's own sizing (cpu_worker.py @ v0.32.0 l.204)"),
)
