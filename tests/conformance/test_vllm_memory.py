"""kvscope.engines.vllm.{memory,args} vs vLLM's own budget and argument-default code, per release.

Engine side (``vllm_engine_mem.py``): ``request_memory`` / ``Worker.init_device`` (requested memory,
the free-memory check and its ValueError text), ``Worker.determine_available_memory`` with the
release's ``memory_profiling`` / ``MemorySnapshot`` on a simulated device, ``EngineArgs`` batch
defaults (``_set_default_args`` 0.10-0.11; ``get_batch_defaults`` + the chunked-prefill/prefix-caching
and max-num-seqs/batched-tokens defaulting 0.19+), ``CacheConfig.gpu_memory_utilization`` default
and bounds, the env defaults that gate the CUDA-graph estimate.

kvscope side: ``memory.requested_memory_bytes`` / ``request_memory_error`` /
``available_kv_cache_bytes`` and ``args.resolve_args`` / ``batch_defaults`` /
``validate_gpu_memory_utilization``, ``release.version_traits`` and ``max_len``.
"""
from __future__ import annotations

import operator
import random

import pytest

from . import cases
from .conftest import count_cases, require_source
from .vllm_engine_mem import (GiB, MiB, BudgetCase, VllmMem, args_members, block_members, block_size_classic,
                              has_classic_block_rule, max_len, maxlen_members, mem_members)
from .vllm_engine_mem import vtuple
from .wheels import VLLM_ALL, VLLM_DEFAULT

memory = pytest.importorskip("kvscope.engines.vllm.memory")
args_mod = pytest.importorskip("kvscope.engines.vllm.args")
release = pytest.importorskip("kvscope.engines.vllm.release")
max_len_mod = pytest.importorskip("kvscope.engines.vllm.max_len")
errors = pytest.importorskip("kvscope.errors")

N_REQUEST = 3000
N_BUDGET = 1500
N_BATCH = 1500
N_MAXLEN = 2000

# CUDA-visible totals (mem_get_info) printed in vLLM logs, plus nvidia-smi totals in MiB.
CUDA_TOTALS = [85031714816, 84987740160, 150754820096, 191514427392, 25388515328, 42298834944,
               47697362944, 16928342016, 24146608128]
UTILS = [0.9, 0.92, 0.95, 0.5, 0.8, 0.85, 0.98, 1.0, 0.01, 0.3, 0.75, 0.88, 0.97, 0.99]


def version_params(versions=VLLM_ALL):
    out = []
    for v in versions:
        marks = [] if v in VLLM_DEFAULT else [pytest.mark.conformance_full]
        out.append(pytest.param(v, marks=marks, id=v))
    return out


def gen_total(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.4:
        return rng.choice(CUDA_TOTALS)
    if r < 0.7:
        return rng.choice(cases.GPU_MEM_MIB) * MiB
    return rng.randint(4 * GiB, 300 * GiB)


def gen_util(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.5:
        return rng.choice(UTILS)
    if r < 0.8:
        return round(rng.uniform(0.01, 1.0), rng.choice([2, 3, 4]))
    return rng.uniform(0.01, 1.0)


def gen_request(rng: random.Random):
    total = gen_total(rng)
    util = gen_util(rng)
    req = total * util
    r = rng.random()
    if r < 0.3:  # the ceil edge: exactly at / one byte around the requested memory
        free = int(req) + rng.choice([-1, 0, 1, 2])
    elif r < 0.6:
        free = total - rng.randint(0, int(total * 0.2))
    else:
        free = rng.randint(0, total)
    return total, max(0, min(total, free)), util


def traits(version):
    return release.version_traits(version)


@pytest.mark.parametrize("version", version_params())
def test_requested_memory_and_check(version, multiplier):
    require_source("vllm", version, mem_members(version))
    eng = VllmMem(version)
    t = traits(version)
    external = eng.has_external_weights()
    n = N_REQUEST * multiplier
    bad = []
    for rng in cases.rngs(seed=61, n=n):
        total, free, util = gen_request(rng)
        ext = 0
        if external and rng.random() < 0.3:
            req = total * util
            ext = rng.choice([rng.randint(1, total), int(req), int(req) + 1, max(1, int(req) - free)])
        _, e_req, e_err = eng.request(BudgetCase(total=total, init_free=free, util=util, external_weights=ext),
                                      eng.dev.reset(total, free), eng._mem_classes())
        ours = memory.request_memory(total, free, util, t, external_weight_bytes=ext)
        if not ext:  # the two-step API plan.py uses
            req = memory.requested_memory_bytes(total, util, t)
            err = memory.request_memory_error(free, total, util, req, t) if free < req else None
            if (None if err else req, err) != ours:
                bad.append(((total, free, util), ("two-step", req, err), ours))
        if ours != (e_req, e_err) or type(ours[0]) is not type(e_req):
            bad.append(((total, free, util, ext), ours, (e_req, e_err)))
    count_cases("vllm", version, "requested memory + free-memory check (ValueError texts"
                + (", external weights" if external else "") + ")", n)
    assert not bad, _report(version, "requested memory", bad, n)


def gen_budget(rng: random.Random, version: str, has_kv_bytes_flag: bool) -> BudgetCase:
    total = gen_total(rng)
    util = rng.choice([gen_util(rng), 0.9, 0.92, 0.95])
    used = rng.choice([0, int(0.5 * GiB), rng.randint(0, int(total * (1 - util)))])
    weights = rng.choice([0, rng.randint(0, int(total * 0.9)), rng.randint(1 * GiB, 20 * GiB),
                          int(15.0 * GiB), rng.randint(0, total)])
    g = lambda hi: rng.choice([0, rng.randint(0, hi)])  # noqa: E731
    init_free = max(total - used, 0)
    # A model has weights (>= 1 MiB), and they fit in what was free: the profiling sanity assert
    # (``init free > free after``; strict in 0.10-0.11) holds for every real start.
    weights = max(MiB, min(weights, init_free))
    return BudgetCase(
        total=total, init_free=init_free, util=util,
        torch_at_init=g(64 * MiB),
        weights=weights,
        non_torch_before_profile=g(int(2.5 * GiB)),
        activation=rng.choice([0, rng.randint(0, 8 * GiB), rng.randint(0, 40 * GiB)]),
        persistent=g(512 * MiB),
        non_torch_profile=g(600 * MiB),
        pinned=rng.choice([0, 0, g(300 * MiB)]),
        cudagraph=g(3 * GiB),
        cudagraph_torch_peak=g(2 * GiB),
        cudagraph_mode_none=rng.random() < 0.2,
        kv_cache_memory_bytes=(rng.choice([1, 10 ** 9, 40 * GiB, rng.randint(1, 200 * GiB)])
                               if has_kv_bytes_flag and rng.random() < 0.15 else None),
    )


def kvscope_available(c: BudgetCase, t, requested) -> int:
    cg = 0 if c.cudagraph_mode_none else c.cudagraph
    av = memory.available_kv_cache_bytes(
        requested, c.weights, c.persistent + c.activation, c.non_torch_before_profile + c.non_torch_profile,
        cg, t, c.kv_cache_memory_bytes, torch_unreleased_bytes=c.pinned)
    return av.available_kv_cache_bytes


@pytest.mark.parametrize("version", version_params())
def test_available_kv_cache_memory(version, multiplier):
    require_source("vllm", version, mem_members(version))
    eng = VllmMem(version)
    t = traits(version)
    has_flag = "kv_cache_memory_bytes" in eng.text("vllm/config/cache.py")
    n = N_BUDGET * multiplier
    bad = []
    for rng in cases.rngs(seed=67, n=n):
        c = gen_budget(rng, version, has_flag)
        theirs = eng.budget(c)
        req = memory.requested_memory_bytes(c.total, c.util, t)
        if theirs.request_error is not None:
            ours = memory.request_memory_error(c.init_free, c.total, c.util, req, t) if c.init_free < req else None
            if ours != theirs.request_error:
                bad.append((c, ours, theirs.request_error))
            continue
        ours = kvscope_available(c, t, req)
        if ours != theirs.available:
            bad.append((c, ours, theirs.available))
    count_cases("vllm", version, "determine_available_memory (profile terms, CUDA-graph estimate, "
                                 "kv_cache_memory_bytes) -> available KV bytes", n)
    assert not bad, _report(version, "available KV cache memory", bad, n)


FLAG_PROBES = {
    # flag -> (engine member, text that exists iff the flag does, VllmFlags kwargs)
    "--kv-cache-memory-bytes": ("vllm/config/cache.py", "kv_cache_memory_bytes", {"kv_cache_memory_bytes": 10 * GiB}),
    "--performance-mode": ("vllm/engine/arg_utils.py", "performance_mode", {"performance_mode": "throughput"}),
    "--max-model-len -1": (None, "max_model_len == -1", {"max_model_len": -1}),  # _get_and_verify_max_len
}


@pytest.mark.parametrize("version", version_params())
def test_flags_exist(version):
    """kvscope accepts a version-gated flag exactly where the release has it (``CacheConfig``
    field, ``EngineArgs`` field; ``-1`` auto-fit arrived with ``request_memory`` in 0.14)."""
    model_m = [m for m in maxlen_members(version) if m.startswith("vllm/config/")][0]
    require_source("vllm", version, ("vllm/config/cache.py", "vllm/engine/arg_utils.py", model_m))
    eng = VllmMem(version)
    bad = []
    for flag, (member, probe, kw) in FLAG_PROBES.items():
        member = member or model_m
        has = probe in eng.text(member)
        try:
            _resolve(args_mod.VllmFlags(**kw), version, model_max_len=4096, gpu_total=80 * GiB,
                     gpu_name="NVIDIA H100 80GB HBM3")
            accepted = True
        except errors.FlagError:
            accepted = False
        if accepted != has:
            bad.append((flag, has, accepted))
    count_cases("vllm", version, "version-gated flags exist (kv-cache-memory-bytes, performance-mode, -1)",
                len(FLAG_PROBES))
    assert not bad, f"vllm {version}: (flag, in the release, kvscope accepts): {bad}"


@pytest.mark.parametrize("version", version_params())
def test_gpu_memory_utilization_default_and_bounds(version):
    require_source("vllm", version, ("vllm/config/cache.py", "vllm/envs.py"))
    eng = VllmMem(version)
    t = traits(version)
    spec = eng.util_field()
    assert t.default_gpu_memory_utilization == spec["default"], (version, spec)
    flag = bool(eng.env("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")) if \
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in eng.text("vllm/envs.py") else False
    assert t.cudagraph_estimate_applied == flag, (version, flag)
    bad = []
    n = 0
    for value in [-1.0, -0.0, 0.0, 1e-9, 0.01, 0.5, 0.9, 0.92, 1.0, 1.0000001, 1.01, 1.5, 2.0, 100.0]:
        n += 1
        want = _engine_util_error(eng, spec, value)
        try:
            args_mod.validate_gpu_memory_utilization(value, t)
            got = None
        except errors.FlagError as exc:
            got = str(exc)
        if (want is None) != (got is None) or (want is not None and want not in got):
            bad.append((value, got, want))
    count_cases("vllm", version, "gpu_memory_utilization default, bounds and error text", n)
    assert not bad, f"vllm {version}: gpu_memory_utilization validation differs: {bad}"


def _engine_util_error(eng: VllmMem, spec: dict, value: float):
    """The engine's message for a bad value: pydantic's ``Field(gt=, le=)`` (0.19+) or
    ``CacheConfig._verify_args`` (0.10-0.11: only ``> 1.0`` raises)."""
    if "gt" in spec or "le" in spec:
        try:
            import pydantic
        except ImportError:  # not a test dependency: compare accept/reject only
            ok = all(op(value, spec[k]) for k, op in (("gt", operator.gt), ("ge", operator.ge),
                                                      ("lt", operator.lt), ("le", operator.le)) if k in spec)
            return None if ok else ""
        from pydantic import Field
        from pydantic.dataclasses import dataclass

        kw = {k: spec[k] for k in ("gt", "ge", "lt", "le") if k in spec}

        @dataclass
        class CacheConfig:
            gpu_memory_utilization: float = Field(default=spec["default"], **kw)

        try:
            CacheConfig(gpu_memory_utilization=value)
            return None
        except pydantic.ValidationError as exc:
            return exc.errors()[0]["msg"]
    text = eng.text("vllm/config/cache.py")
    assert "if self.gpu_memory_utilization > 1.0:" in text
    if value > 1.0:
        return f"GPU memory utilization must be less than 1.0. Got {value}."
    return None


GPU_NAMES = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H200",
             "NVIDIA B200", "NVIDIA GB200", "NVIDIA L40S", "NVIDIA A10G", "NVIDIA GeForce RTX 4090",
             "NVIDIA H100 PCIe", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GB10", "Tesla T4"]
CAPS = {"H100": (9, 0), "H200": (9, 0), "A100": (8, 0), "B200": (10, 0), "GB200": (10, 0), "L40S": (8, 9),
        "A10G": (8, 6), "4090": (8, 9), "6000": (12, 0), "GB10": (12, 1), "T4": (7, 5)}


def _cap(name: str):
    for k, v in CAPS.items():
        if k in name:
            return v
    return (9, 0)


def _sm(cap) -> str:
    return f"sm{cap[0]}{cap[1]}"


def gen_batch(rng: random.Random):
    name = rng.choice(GPU_NAMES)
    total = rng.choice([gen_total(rng), rng.choice([70 * GiB - 1, 70 * GiB, 160 * GiB - 1, 160 * GiB]),
                        rng.choice(cases.GPU_MEM_MIB) * MiB])
    return dict(
        gpu_total=total, gpu_name=name, capability=_cap(name), api_server=rng.random() < 0.6,
        max_num_batched_tokens=cases.maybe(rng, 0.25, rng.choice([512, 2048, 8192, rng.randint(1, 70000)])),
        max_num_seqs=cases.maybe(rng, 0.25, rng.choice([1, 8, 64, 256, 1024, rng.randint(1, 4096)])),
        enable_chunked_prefill=rng.choice([None, None, True, False]),
        max_model_len=rng.choice([1, 16, 512, 2048, 4096, 8192, 32768, 131072, rng.randint(1, 300000)]),
        is_hybrid=rng.random() < 0.2,
        performance_mode=rng.choice(["balanced", "balanced", "throughput", "interactivity"]),
    )


def _resolve(flags, version, *, model_max_len, gpu_total, gpu_name, sm="sm90", is_hybrid=False):
    return args_mod.resolve_args(flags, traits=traits(version), model_max_len=model_max_len,
                                 gpu_memory_bytes=gpu_total, gpu_name=gpu_name, is_mla=False,
                                 is_hybrid_mamba=is_hybrid, num_attention_heads=32, gpu_sm=sm)


@pytest.mark.parametrize("version", version_params())
def test_batch_defaults(version, multiplier):
    require_source("vllm", version, args_members(version))
    eng = VllmMem(version)
    n = N_BATCH * multiplier
    bad = []
    compare_prefix = eng.prefix_caching_decided_in_engine_args()
    has_perf_mode = "performance_mode" in eng.text("vllm/engine/arg_utils.py")  # EngineArgs field (0.17+)
    for rng in cases.rngs(seed=71, n=n):
        b = gen_batch(rng)
        if not has_perf_mode:
            b["performance_mode"] = "balanced"  # no --performance-mode before 0.17
        theirs = eng.batch_defaults(**b)
        flags = args_mod.VllmFlags(max_num_batched_tokens=b["max_num_batched_tokens"],
                                   max_num_seqs=b["max_num_seqs"], enable_chunked_prefill=b["enable_chunked_prefill"],
                                   api_server=b["api_server"], max_model_len=b["max_model_len"],
                                   performance_mode=b["performance_mode"])
        try:
            a = _resolve(flags, version, model_max_len=b["max_model_len"], gpu_total=b["gpu_total"],
                         gpu_name=b["gpu_name"], sm=_sm(b["capability"]), is_hybrid=b["is_hybrid"])
            ours = (a.max_num_batched_tokens, a.max_num_seqs, a.enable_prefix_caching if compare_prefix else None)
        except errors.FlagError as exc:
            ours = ("FlagError", str(exc))
        want = (theirs[0], theirs[1], theirs[3] if compare_prefix else None)
        if ours != want:
            bad.append((b, ours, want))
    count_cases("vllm", version, "EngineArgs defaults: max_num_batched_tokens / max_num_seqs (usage context, "
                                 "GPU tier, chunked prefill, performance mode)"
                + (" / enable_prefix_caching" if compare_prefix else ""), n)
    assert not bad, _report(version, "batch defaults (mnbt, seqs, prefix)", bad, n)


LENS = [2048, 4096, 8192, 16384, 32768, 40960, 65536, 131072, 163840, 262144, 1048576]
ROPE_TYPES = ["linear", "dynamic", "yarn", "llama3", "longrope", "su", "default", "mrope", "deepseek_yarn",
              "deepseek_llama_scaling"]


def gen_rope(rng: random.Random, max_pos):
    t = rng.choice(ROPE_TYPES)
    d = {rng.choice(["type", "rope_type", "rope_type"]): t}
    r = rng.random()
    if r < 0.7:
        d["factor"] = rng.choice([2.0, 4.0, 8.0, 1.5, 32.0, 40.0, 2, 4, 16])
    elif r < 0.8:
        d["factor"] = None
    if t in ("yarn", "deepseek_yarn") or rng.random() < 0.2:
        d["original_max_position_embeddings"] = rng.choice([4096, 8192, 32768, max_pos or 4096])
    if t == "mrope":
        d["mrope_section"] = [16, 24, 24]
    if t == "llama3":
        d.update(low_freq_factor=1.0, high_freq_factor=4.0)
    return d


def gen_hf_config(rng: random.Random, version: str) -> dict:
    cfg = {"model_type": rng.choice(["llama", "qwen2", "mistral", "gemma3", "gemma3_text", "phi3", "deepseek_v3"])}
    keys = [k for k in max_len_mod.MAX_LEN_KEYS if k != "model_max_length"]
    for k in rng.sample(keys, rng.choice([0, 1, 1, 1, 1, 2, 3])):
        cfg[k] = rng.choice(LENS + [rng.randint(1, 2_000_000)])
    if rng.random() < 0.15:
        cfg["model_max_length"] = rng.choice([0, None, 8192, 131072, rng.randint(1, 2_000_000)])
    if rng.random() < 0.7:
        cfg[rng.choice(["rope_theta", "rope_theta", "rotary_emb_base"])] = rng.choice([10000.0, 500000.0, 1e6])
    if rng.random() < 0.1:
        cfg[rng.choice(["partial_rotary_factor", "rotary_pct"])] = 0.5
    if rng.random() < 0.15:
        cfg["original_max_position_embeddings"] = rng.choice([4096, 8192, 32768])
    r = rng.random()
    if r < 0.5:
        cfg["rope_scaling"] = gen_rope(rng, cfg.get("max_position_embeddings"))
    elif r < 0.6 and release.version_traits(version).max_len_rope_parameters:
        cfg["rope_parameters"] = {"full_attention": gen_rope(rng, cfg.get("max_position_embeddings")),
                                  "sliding_attention": {"rope_type": "default"}}
    return cfg


def gen_user_len(rng: random.Random, cfg: dict, version: str):
    t = release.version_traits(version)
    base = cfg.get("max_position_embeddings") or cfg.get("model_max_length") or 4096
    choices = [None, None, base, base - 1, base + 1, base * 2, base * 4, base // 2, rng.randint(1, 4 * base),
               cfg.get("model_max_length") or base, rng.randint(1, 3_000_000)]
    if t.requested_memory_ceil:
        choices.append(-1)
    v = rng.choice(choices)
    return None if v is None else max(v, 1) if v != -1 else -1


def kvscope_max_len(cfg, user, version, allow_long):
    t = release.version_traits(version)
    try:
        d = max_len_mod.derive_max_model_len(cfg, t)
        return max_len_mod.verify_max_model_len(user, d, t, allow_long), None
    except errors.FlagError as exc:
        return None, str(exc)
    except errors.ConfigError as exc:
        return None, f"ConfigError: {exc}"


@pytest.mark.parametrize("version", version_params())
def test_max_model_len_from_hf_config(version, multiplier):
    require_source("vllm", version, maxlen_members(version))
    eng = VllmMem(version)
    ml = max_len(eng)
    n = N_MAXLEN * multiplier
    bad = []
    for rng in cases.rngs(seed=73, n=n):
        cfg = gen_hf_config(rng, version)
        user = gen_user_len(rng, cfg, version)
        allow = rng.random() < 0.15
        theirs = ml(cfg, user, allow)
        if theirs[1] is not None and theirs[1].startswith("patch: "):
            continue  # config rejected by vLLM's RoPE patching (conflicting type keys): not generated on purpose
        ours = kvscope_max_len(cfg, user, version, allow)
        if theirs[1] is not None and theirs[1].startswith("TypeError") and ours[1] is not None:
            same = ours[1].startswith("ConfigError")  # the engine crashes; kvscope names the field
        else:
            same = ours[0] == theirs[0] and type(ours[0]) is type(theirs[0]) and (
                (ours[1] is None and theirs[1] is None) or
                (ours[1] is not None and theirs[1] is not None and theirs[1] in ours[1]))
        if not same:
            bad.append(((cfg, user, allow), ours, theirs))
    count_cases("vllm", version, "_get_and_verify_max_len: derived length (keys, RoPE scaling), user value "
                                 "check + ValueError text", n)
    assert not bad, _report(version, "max_model_len", bad, n)


N_BLOCK = 500
CAPABILITIES = [(9, 0), (10, 0), (8, 0), (8, 9), (8, 6), (10, 3), (12, 0), (12, 1), (7, 5)]


@pytest.mark.parametrize("version", version_params())
def test_block_size_default(version, multiplier):
    """Default / forced KV block size where the CUDA platform sets it (0.10-0.11). From 0.19 the
    attention-backend registry decides; kvscope keeps 16 / MLA 64 there (labelled estimated)."""
    if vtuple(version) >= (0, 12):
        pytest.skip(f"vllm {version}: 0.12-0.17's check_and_update_config MLA rule and 0.18+'s backend "
                    "registry are compared in test_vllm_block_size.py")
    require_source("vllm", version, block_members(version))
    eng = VllmMem(version)
    if not has_classic_block_rule(eng):
        pytest.skip(f"vllm {version}: block size chosen by the attention-backend registry "
                    "(Platform.update_block_size_for_backend), not conformance-tested")
    n = N_BLOCK * multiplier
    bad = []
    for rng in cases.rngs(seed=79, n=n):
        cap = rng.choice(CAPABILITIES)
        mla = rng.random() < 0.6
        sparse = mla and rng.random() < 0.3
        user = rng.choice([None, None, 16, 32, 64, 128, 256, 8, 1])
        theirs = block_size_classic(eng, user_block_size=user, use_mla=mla, capability=cap, sparse=sparse)
        flags = args_mod.VllmFlags(block_size=user)
        a = args_mod.resolve_args(flags, traits=traits(version), model_max_len=4096, gpu_memory_bytes=80 * GiB,
                                  gpu_name="gpu", is_mla=mla, is_hybrid_mamba=False, num_attention_heads=32,
                                  gpu_sm=_sm(cap), is_sparse_mla=sparse)
        if a.block_size != theirs:
            bad.append(((cap, mla, sparse, user), a.block_size, theirs))
    count_cases("vllm", version, "block size default / MLA-backend forced size (platforms/cuda.py)", n)
    assert not bad, _report(version, "block size", bad, n)


def _report(version, what, bad, n) -> str:
    lines = [f"vllm {version}: {what}: {len(bad)}/{n} generated cases differ; first:"]
    for case, ours, theirs in bad[:4]:
        lines.append(f"  kvscope={ours!r} engine={theirs!r} for {case}")
    return "\n".join(lines)
