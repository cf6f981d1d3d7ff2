"""kvscope.engines.sglang.memory (cell size, profile -> tokens, ValueError text) vs SGLang's own code.

Engine side, per release: ``ModelRunner.profile_max_num_token`` (<=0.5.6, cell inline),
``ModelRunnerKVCacheMixin.get_cell_size_per_token`` + ``profile_max_num_token`` (0.5.9),
``DefaultPoolConfigurator._compute_cell_size`` + ``_profile_available_bytes`` (mixin 0.5.13-0.5.14,
``KVCacheConfigurator`` 0.5.18+) + ``DefaultPoolConfigurator.calculate_pool_sizes`` (page rounding),
``ModelConfig.get_num_kv_heads``. Attention kinds: MHA/GQA/MQA (TP above and below the KV-head
count) and MLA; KV element sizes 1, 2, 4 bytes. Text models, no draft, no mamba, no DSA.
"""
from __future__ import annotations

import random

import pytest

from . import cases
from .conftest import count_cases, require_source
from .sglang_engine import ProfileCase, SGLang, profile_members
from .wheels import sglang_params

memory = pytest.importorskip("kvscope.engines.sglang.memory")
kv_cache = pytest.importorskip("kvscope.engines.sglang.kv_cache")
pools = pytest.importorskip("kvscope.engines.sglang.pools")
release_mod = pytest.importorskip("kvscope.engines.sglang.release")
spec_mod = pytest.importorskip("kvscope.model.spec")

N_CASES = 2000
KV_DTYPE = {1: "float8_e4m3fn", 2: "bfloat16", 4: "float32"}


def gen_profile(rng: random.Random) -> ProfileCase:
    mla = rng.random() < 0.3
    heads = rng.choice([1, 2, 4, 8, 8, 16, 32, 64, 128, rng.randint(1, 160)])
    head_dim = rng.choice([64, 80, 96, 112, 128, 128, 192, 256, rng.randint(8, 512)])
    pre = rng.choice([rng.uniform(5, 200), rng.uniform(70, 140)])
    weights = rng.uniform(0, pre * rng.choice([0.3, 0.9, 1.0]))
    return ProfileCase(
        attention="mla" if mla else "mha",
        num_layers=rng.choice([1, 16, 24, 28, 32, 36, 40, 48, 61, 64, 80, 94, 126, rng.randint(1, 200)]),
        total_num_kv_heads=heads,
        head_dim=head_dim,
        v_head_dim=rng.choice([head_dim, head_dim, 128, rng.randint(8, 512)]),
        kv_lora_rank=rng.choice([512, 512, 256, rng.randint(16, 1024)]),
        qk_rope_head_dim=rng.choice([64, 64, 32, rng.randint(8, 128)]),
        kv_bytes=rng.choice([2, 2, 1, 4]),
        attn_tp_size=rng.choice([1, 1, 2, 4, 8, 16, 32]),
        pre_model_load_gib=pre,
        available_gib=pre - weights,
        mem_fraction_static=rng.choice([round(rng.uniform(0.3, 0.97), 3), 0.88, 0.9, rng.uniform(0.5, 0.95)]),
        page_size=rng.choice([1, 1, 16, 32, 64, 128, rng.randint(1, 256)]),
    )


def model_spec(c: ProfileCase):
    mla = c.attention == "mla"
    return spec_mod.ModelSpec(
        name="generated", model_type="deepseek_v3" if mla else "llama",
        architectures=("DeepseekV3ForCausalLM",) if mla else ("LlamaForCausalLM",),
        hidden_size=4096, num_hidden_layers=c.num_layers, num_attention_heads=max(c.total_num_kv_heads, 1),
        num_key_value_heads=c.total_num_kv_heads, head_dim=c.head_dim, v_head_dim=c.v_head_dim,
        vocab_size=32000, intermediate_size=11008, max_position_embeddings=32768, dtype="bfloat16",
        tie_word_embeddings=False, attention="mla" if mla else "mha",
        layer_types=(spec_mod.FULL,) * c.num_layers, ffn_types=("dense",) * c.num_layers,
        kv_lora_rank=c.kv_lora_rank if mla else None, qk_rope_head_dim=c.qk_rope_head_dim if mla else None,
    )


def kvscope_profile(version: str, c: ProfileCase):
    rel = release_mod.release(version)
    cell = kv_cache.cell_size(model_spec(c), rel, attn_tp=c.attn_tp_size, kv_bytes=c.kv_bytes).cell_bytes
    prof, _ = memory.profile(rel, pre_model_load_gib=c.pre_model_load_gib, available_gpu_gib=c.available_gib,
                             mem_fraction_static=c.mem_fraction_static, cell_bytes=cell)
    if prof.error is not None:
        return cell, None, prof.error
    if rel.req_to_token_padding_row:  # DefaultPoolConfigurator.calculate_pool_sizes (0.5.12+)
        return cell, pools.round_to_page(prof.profiled_tokens, c.page_size), None
    return cell, prof.profiled_tokens, None


KNOWN: dict[str, str] = {}  # the v0.5.6 MHA cell mismatch found by this suite was fixed in kvscope


@pytest.mark.parametrize("version", sglang_params(KNOWN))
def test_cell_size_and_profile(version, multiplier):
    require_source("sglang", version, profile_members(version))
    engine = SGLang(version)
    n = N_CASES * multiplier
    bad = []
    for rng in cases.rngs(seed=23, n=n):
        c = gen_profile(rng)
        theirs = engine.profile(c)
        ours = kvscope_profile(version, c)
        if ours != (theirs.cell_size, theirs.tokens, theirs.error):
            bad.append((c, ours, (theirs.cell_size, theirs.tokens, theirs.error)))
    count_cases("sglang", version, "cell size (MHA/GQA/MLA) + profile -> max_total_num_tokens (+page) + ValueError", n)
    assert not bad, (f"sglang {version}: {len(bad)}/{n} differ (cell, tokens, error); first: "
                     + "; ".join(f"{c} kvscope={o} engine={t}" for c, o, t in bad[:3]))
