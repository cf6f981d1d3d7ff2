"""kvscope.engines.sglang.memory after the profile vs SGLang's own code, per release.

Request pools (``request_pools``: ``max_num_reqs`` / ``max_running_requests``, the ``req_to_token``
table's rows x row length x 4 B, the classic speculative headroom, the ``--max-total-tokens`` cap,
page rounding and the RuntimeError text) against ``init_memory_pool`` + the ``max_running_requests``
statement (<=0.5.9), ``_resolve_memory_pool_config`` + ``_resolve_max_num_reqs`` (mixin, 0.5.13-0.5.14)
and ``KVCacheConfigurator._resolve_memory_pool_config`` + ``resolve_max_num_reqs`` +
``_build_req_to_token_pool`` (0.5.18+), each with the release's ``ReqToTokenPool.__init__``.
See ``sglang_engine_pools.py`` for the stand-ins.
"""
from __future__ import annotations

import random

import pytest

from . import cases
from .conftest import count_cases, require_source
from .sglang_engine import _vtuple
from .sglang_engine_pools import ReqCase, SGLangPools, req_members
from .wheels import SGLANG_VERSIONS

memory = pytest.importorskip("kvscope.engines.sglang.memory")
args_mod = pytest.importorskip("kvscope.engines.sglang.args")

N_REQ = 1500


def gen_req(rng: random.Random, version: str) -> ReqCase:
    v = _vtuple(version)
    classic = v < (0, 5, 10)
    ctx = rng.choice([2048, 4096, 8192, 32768, 40960, 131072, 163840, 262144, rng.randint(64, 1_048_576)])
    r = rng.random()
    if r < 0.1:
        tokens = rng.randint(-200_000 if classic else 0, 600)  # tiny / negative budgets (classic: no clamp)
    elif r < 0.4:
        tokens = rng.randint(600, 200_000)
    else:
        tokens = rng.randint(200_000, 20_000_000)
    dp = rng.choice([1, 1, 2, 4, 8, 16])
    algos = ["EAGLE", "EAGLE3"] if v < (0, 5) else ["EAGLE", "EAGLE3", "STANDALONE", "NGRAM"]
    algo = rng.choice(algos) if rng.random() < 0.35 else None
    steps = topk = draft = None
    if algo is not None:
        steps = rng.choice([1, 2, 3, 4, 5, 7])
        topk = rng.choice([1, 1, 2, 4, 8])
        draft = rng.choice([steps + 1, steps * topk, rng.randint(2, 64)])
    return ReqCase(
        profiled_tokens=tokens, context_len=ctx,
        page_size=rng.choice([1, 1, 1, 16, 32, 64, 128, rng.randint(2, 256)]),
        max_total_tokens=cases.maybe(rng, 0.2, rng.randint(1, 3_000_000)),
        max_running_requests=cases.maybe(rng, 0.35, rng.choice([1, 2, 8, 64, 128, 256, 1024, 4096,
                                                                rng.randint(1, 20_000)])),
        dp_size=dp, enable_dp_attention=dp > 1 and rng.random() < 0.6,
        speculative_algorithm=algo, speculative_num_steps=steps, speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
        mem_fraction_static=rng.choice([0.88, round(rng.uniform(0.3, 0.95), 3)]),
    )


def kvscope_req(version: str, c: ReqCase):
    v = args_mod.parse_version(version)
    p = memory.request_pools(
        v, profiled_tokens=c.profiled_tokens, context_len=c.context_len, page_size=c.page_size,
        max_total_tokens=c.max_total_tokens, max_running_requests=c.max_running_requests,
        attn_dp_size=c.dp_size if c.enable_dp_attention else 1, speculative_algorithm=c.speculative_algorithm,
        num_steps=c.speculative_num_steps, topk=c.speculative_eagle_topk,
        num_draft_tokens=c.speculative_num_draft_tokens, mem_fraction_static=c.mem_fraction_static)
    return (p.max_total_num_tokens, p.req_pool_size, p.req_rows, p.req_row_len, p.req_to_token_bytes,
            p.max_running_requests, p.error)


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_request_pools(version, multiplier):
    require_source("sglang", version, req_members(version))
    engine = SGLangPools(version)
    n = N_REQ * multiplier
    bad = []
    for rng in cases.rngs(seed=61, n=n):
        c = gen_req(rng, version)
        t = engine.request_pools(c)
        theirs = (t.max_total_num_tokens, t.req_pool_size, t.req_rows, t.req_row_len, t.req_to_token_bytes,
                  t.max_running_requests, t.error)
        ours = kvscope_req(version, c)
        if ours != theirs:
            bad.append((c, ours, theirs))
    count_cases("sglang", version, "request pools: max_num_reqs/max_running_requests + req_to_token bytes "
                "(+cap, page, classic spec headroom, RuntimeError)", n)
    assert not bad, (f"sglang {version}: {len(bad)}/{n} differ (T, pool size, rows, row len, bytes, running, "
                     "error); first: " + "; ".join(f"{c} kvscope={o} engine={t}" for c, o, t in bad[:3]))
