from __future__ import annotations

import pytest

from kvscope.errors import FlagError
from kvscope.perf.speculative import (DraftHead, draft_traffic, eagle3_head, expected_accept_length,
                                      resolve_spec_config)


@pytest.mark.parametrize("a,g,tau", [(0.6, 3, 2.18), (0.7, 2, 2.19), (0.8, 4, 3.36), (0.9, 7, 5.70), (0.5, 1, 1.50)])
def test_leviathan_table(a, g, tau):
    # shared/specs/perf.md §4.1 E[tau] table
    assert expected_accept_length(a, g) == pytest.approx(tau, abs=0.005)


def test_accept_rate_bounds():
    assert expected_accept_length(1.0, 3) == 4.0
    with pytest.raises(FlagError):
        expected_accept_length(1.2, 3)


def test_resolve_chain_flags():
    assert resolve_spec_config("EAGLE3", None, None, 4) == resolve_spec_config("eagle3", 3, 1, None)
    c = resolve_spec_config("EAGLE3", 3, 1, 4)
    assert (c.num_steps, c.eagle_topk, c.num_draft_tokens) == (3, 1, 4)
    with pytest.raises(FlagError):
        resolve_spec_config("MEDUSA", 3, 1, 4)


def test_eagle3_draft_bytes_kimi(kimi):
    from kvscope.catalog import load_model_source
    head = eagle3_head(kimi, load_model_source("sgl-project/SpecForge-kimi-k25-eagle3").config, "specforge")
    assert (head.hidden_size, head.num_key_value_heads, head.draft_vocab_size) == (7168, 64, 32000)
    d = draft_traffic(head, tp=8)
    q = 64 * 128
    attn = (q * 2 * 7168 + 7168 * q) // 8 + 2 * 8 * 128 * 2 * 7168  # q/o sharded; k/v 8 heads per rank, 2h input
    mlp = 3 * 7168 * 18432 // 8
    assert d.layer_bytes == (attn + mlp) * 2 + 4000 * 7168 * 2
    assert d.fc_bytes == 3 * 7168 * 7168 * 2  # nn.Linear: replicated
    assert d.num_allreduces == 3
    assert d.kv_bytes_per_token == 2 * 8 * 128 * 2


def test_synthesized_head_matches_specforge_template(kimi):
    from kvscope.catalog import load_model_source
    cfg = load_model_source("sgl-project/SpecForge-kimi-k25-eagle3").config
    a, b = eagle3_head(kimi), eagle3_head(kimi, cfg)
    assert isinstance(a, DraftHead)
    assert (a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.head_dim, a.intermediate_size,
            a.draft_vocab_size) == (b.hidden_size, b.num_attention_heads, b.num_key_value_heads, b.head_dim,
                                    b.intermediate_size, b.draft_vocab_size)
