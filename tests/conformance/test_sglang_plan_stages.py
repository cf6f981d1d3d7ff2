"""The plan's numbers ARE the conformance-tested stage functions' outputs (issue #11, review §3.8).

* ``test_pool_stage_is_request_pools``: on the request-pool conformance cases (``gen_req``, the same
  generator ``test_request_pools`` compares with SGLang's code), ``plan.pool_stage`` — the stage
  ``plan_sglang`` runs — gives ``pools.request_pools``' tokens, request pool, running requests,
  req_to_token bytes and error.
* ``test_plan_numbers_are_stage_outputs``: ``plan_sglang`` on catalog models at the pinned releases;
  each rank's decision equals ``memory.profile`` / ``kv_cache.cell_size`` / ``pools.request_pools``
  run on the decision's own inputs.

No engine wheel is needed: the engine side of these functions is ``test_sglang_pools.py`` /
``test_sglang_memory.py``.
"""
from __future__ import annotations

import pytest

from kvscope.engines.sglang import plan as plan_mod
from kvscope.engines.sglang.args import ResolvedDefaults, SGLangArgs
from kvscope.engines.sglang.backend import AttentionBackend
from kvscope.engines.sglang.kv_cache import CellSize, cell_size
from kvscope.engines.sglang.mamba import MambaCarve
from kvscope.engines.sglang.memory import Profile, profile
from kvscope.engines.sglang.pools import PoolFlags, request_pools
from kvscope.engines.sglang.release import release
from kvscope.engines.sglang.settle import Settled
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec

from . import cases
from .test_sglang_pools import gen_req, req_flags
from .wheels import SGLANG_VERSIONS

N = 1500


def _request_pools(rel, c):
    return request_pools(rel, c.profiled_tokens, c.context_len, req_flags(c),
                         max_mamba_cache_size=c.max_mamba_cache_size)


def _stage_inputs(c):
    """The pool stage's inputs for one request-pool case: the flags, the profile's tokens, the carve."""
    spec, _ = load_spec("Qwen/Qwen3-8B")
    a = SGLangArgs(dp_size=c.dp_size, enable_dp_attention=c.enable_dp_attention,
                   mem_fraction_static=c.mem_fraction_static, context_length=c.context_len,
                   page_size=c.page_size, max_running_requests=c.max_running_requests,
                   max_total_tokens=c.max_total_tokens, speculative_algorithm=c.speculative_algorithm,
                   speculative_num_steps=c.speculative_num_steps, speculative_eagle_topk=c.speculative_eagle_topk,
                   speculative_num_draft_tokens=c.speculative_num_draft_tokens,
                   disable_radix_cache=c.disable_radix_cache)
    s = Settled(args=a, defaults=ResolvedDefaults(8192, 160, c.mem_fraction_static, "user", None, 0, None),
                backend=AttentionBackend("fa3", "default", c.page_size, "user", None, ""), page_size=c.page_size,
                fraction_factor=1.0, mem_fraction_static=c.mem_fraction_static, context_len=c.context_len,
                kv_dtype_name="bfloat16", kv_bytes=2)
    cells = plan_mod.Cells((CellSize(cell_bytes=1, full_layer_bytes=1, num_full_layers=1),), 0, False, 0, (), ())
    carve = MambaCarve(1.0, c.max_mamba_cache_size, 1) if c.max_mamba_cache_size is not None else None
    first = Profile(1.0, 1.0, c.mem_fraction_static, 0.0, 0.0, 0.0, 1.0, 1 << 30, 1, c.profiled_tokens, None)
    prof = plan_mod.Profiled(1.0, 1.0, 0.0, first, carve, (c.profiled_tokens,))
    return spec, s, cells, prof


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_pool_stage_is_request_pools(version):
    rel = release(version)
    bad = []
    for rng in cases.rngs(seed=61, n=N):
        c = gen_req(rng, version)
        rp = _request_pools(rel, c)
        spec, s, cells, prof = _stage_inputs(c)
        p = plan_mod.pool_stage(spec, s, rel, cells, prof)
        want = (rp.error, rp.max_total_num_tokens, rp.req_pool_size, rp.max_running_requests,
                rp.req_to_token_bytes) if rp.error is None else (rp.error,)
        got = (p.error, p.tokens, p.req_pool_size, p.running, p.req_to_token_bytes) if p.error is None else (p.error,)
        if got != want:
            bad.append((c, got, want))
    assert not bad, f"{len(bad)}/{N} differ; first: {bad[:2]}"


MODELS = ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-70B-Instruct", "deepseek-ai/DeepSeek-V3",
          "Qwen/Qwen3-Next-80B-A3B-Thinking", "Qwen/Qwen3-30B-A3B")
FLAGS = (dict(tp_size=1), dict(tp_size=8, max_running_requests=64, page_size=16, max_total_tokens=300_000),
         dict(tp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
              speculative_num_draft_tokens=4, max_running_requests=32),
         dict(tp_size=8, dp_size=4, enable_dp_attention=True, kv_cache_dtype="fp8_e4m3", disable_radix_cache=True))


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_plan_numbers_are_stage_outputs(version):
    rel = release(version)
    gpu = get_gpu("h200")
    for name in MODELS:
        spec, _ = load_spec(name)
        for f in FLAGS:
            a = SGLangArgs(**f)
            t = plan_sglang_or_none(spec, gpu, a, version)
            if t is None:
                continue
            d, x = t.ranks[0].decision, t.extra
            cell = cell_size(spec, rel, attn_tp=a.attn_tp_size, kv_bytes=_kv_bytes(x),
                             kv_flag=a.kv_cache_dtype, draft_layers=_draft_layers(spec, a),
                             draft_in_budget=rel.draft_in_budget, attention_backends=(x.attention_backend,) * 2,
                             sm100=False)
            assert d.cell_size == cell.cell_bytes, (name, f)
            p, carve = profile(rel, pre_model_load_gib=d.pre_model_load_gib, available_gpu_gib=d.available_gpu_gib,
                               mem_fraction_static=d.mem_fraction_static, cell_bytes=d.cell_size,
                               mm_reservation=d.mm_reservation_gib, mamba_per_req_bytes=_mamba_per_req(spec, a, rel),
                               disable_radix_cache=a.disable_radix_cache, max_running_requests=a.max_running_requests,
                               attn_dp_size=a.attn_dp_size,
                               mamba_is_gdn=bool(spec.mamba and spec.mamba.kind == "gdn"),
                               speculative_num_draft_tokens=a.speculative_num_draft_tokens
                               if a.speculative_algorithm else None)
            assert (p.rest_memory_bytes, p.profiled_tokens, p.error) == (
                d.rest_memory_bytes, d.profiled_tokens, None if p.error is None else d.error), (name, f)
            if p.error is not None:
                continue
            flags = PoolFlags(page_size=d.page_size, max_total_tokens=a.max_total_tokens,
                              max_running_requests=a.max_running_requests, attn_dp_size=a.attn_dp_size,
                              speculative_algorithm=a.speculative_algorithm, num_steps=a.speculative_num_steps,
                              topk=a.speculative_eagle_topk, num_draft_tokens=a.speculative_num_draft_tokens,
                              mem_fraction_static=d.mem_fraction_static, disable_radix_cache=a.disable_radix_cache)
            rp = request_pools(rel, d.profiled_tokens, x.context_len, flags,
                               max_mamba_cache_size=carve.max_mamba_cache_size if carve else None)
            assert (d.max_total_num_tokens, d.max_num_reqs, d.max_running_requests, d.error) == (
                rp.max_total_num_tokens, rp.req_pool_size, rp.max_running_requests, rp.error), (name, f)
            assert d.req_to_token_bytes == (rp.req_to_token_bytes or 0), (name, f)


def plan_sglang_or_none(spec, gpu, a, version):
    from kvscope.errors import FlagError

    try:
        return plan_mod.plan_sglang(spec, gpu, a, version)
    except FlagError:
        return None


def _kv_bytes(x) -> int:
    return {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}[x.kv_cache_dtype]


def _draft_layers(spec, a) -> int:
    return plan_mod._draft_layers(spec, a, None)


def _mamba_per_req(spec, a, rel) -> int:
    from kvscope.engines.sglang.mamba import mamba_pp_stage_bytes, mamba_state_bytes_per_req

    if not spec.is_mambaish:
        return 0
    ids = [i for i, t in enumerate(spec.layer_types) if t in ("linear_attention", "mamba")]
    return mamba_pp_stage_bytes(rel, mamba_state_bytes_per_req(spec, a.attn_tp_size), ids, spec.num_hidden_layers,
                                a.pp_size)


def test_plan_reports_the_hybrid_state_cache_error():
    """``_resolve_max_num_reqs`` (mixin @ v0.5.13, kv_cache_configurator.py @ v0.5.23) raises when the
    mamba state pool admits no request; ``request_pools`` has the text, and the plan now runs it."""
    spec, _ = load_spec("Qwen/Qwen3-Next-80B-A3B-Thinking")
    a = SGLangArgs(tp_size=4, mem_fraction_static=0.2716)
    t = plan_mod.plan_sglang(spec, get_gpu("h200"), a, "0.5.23")
    assert not t.starts and t.ranks[0].decision.max_mamba_cache_size == 1
    assert t.error.startswith("RuntimeError: Hybrid (mamba/linear-attention) state cache is too small")
    old = plan_mod.plan_sglang(spec, get_gpu("h200"), a, "0.5.12")  # no such check before 0.5.13
    assert old.error is None or "state cache is too small" not in old.error
    fix = {f.flag: f.value for f in t.fix}
    fixed = SGLangArgs(tp_size=4, mem_fraction_static=fix["--mem-fraction-static"])
    ok = plan_mod.plan_sglang(spec, get_gpu("h200"), fixed, "0.5.23")
    assert ok.starts and ok.max_running_requests >= 1  # the fix is the smallest fraction that admits a request
    assert fix["--disable-radix-cache"] is True
