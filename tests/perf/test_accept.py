"""Typical accept lengths per draft kind (perf/accept.py) reproduce the published points they cite."""
from __future__ import annotations

import pytest

from kvscope.perf.accept import ACCEPT_DEFAULTS, default_accept_length
from kvscope.perf.speculative import resolve_spec_config


@pytest.mark.parametrize("kind", sorted(ACCEPT_DEFAULTS))
def test_published_points_inside_the_range(kind):
    d = ACCEPT_DEFAULTS[kind]
    assert d.rate_lo < d.rate < d.rate_hi
    for p in d.points:
        assert d.accept_length(p.draft_tokens, "lo") <= p.accept_length <= d.accept_length(p.draft_tokens, "hi"), p
        assert p.source


def test_values_and_source_text():
    central, lo, hi, text = default_accept_length("EAGLE", 2)
    assert central == pytest.approx(1 + 0.55 + 0.55 ** 2)  # chain formula, a = 0.55, k = 2
    assert lo < 1.89 < hi  # vllm#16035: 1.89 at k = 2
    assert text.startswith("assumed") and "pull/16035" in text


def test_aliases():
    assert resolve_spec_config("MTP", 2, 1, None).algorithm == "NEXTN"
    assert resolve_spec_config("ngram", 3, 1, None).algorithm == "NGRAM"
