"""The hook tables (``kvscope.hooks``): well-formed data, and the JSON the agent reads."""

from __future__ import annotations

import pytest

from kvscope.engines.vllm.release import TRAITS as VLLM_RELEASE
from kvscope.hooks import Target
from kvscope.hooks.vllm import TARGETS as VLLM_TARGETS
from kvscope.probe._boot import _kvscope_probe_agent as agent
from kvscope.probe.targets import all_targets, targets_from_json, targets_to_json, version_matches


@pytest.mark.parametrize("t", all_targets(), ids=lambda t: f"{t.engine}:{t.id}:{t.versions}")
def test_every_version_range_parses(t):
    version_matches("0.5.9", t.versions)  # strict: a malformed clause raises


def test_bad_clause_raises_in_kvscope_and_matches_in_the_agent():
    with pytest.raises(ValueError, match="bad version clause"):
        version_matches("0.5.9", ">=0.5.7,~0.5")
    assert agent.version_matches("0.5.9", ">=0.5.7,~0.5")  # the agent never raises


@pytest.mark.parametrize("version,spec,ok", [
    ("0.5.10.post1", ">=0.5.10,<0.5.14", True), ("0.11.0rc2+cu128", ">=0.11", True),
    ("0.5.14", "<0.5.14", False), (None, ">=9", True), ("0.5.9", "", True), ("0.19", "==0.19.0", True),
])
def test_version_matches(version, spec, ok):
    assert version_matches(version, spec) is ok


def test_json_round_trip_leaves_out_why():
    ts = all_targets()
    js = targets_to_json(ts)
    assert all("why" not in d for d in js)
    assert targets_from_json(js) == tuple(Target(**{**t.__dict__, "why": ""}) for t in ts)


def test_cudagraph_estimate_hook_follows_the_release_trait():
    (t,) = [t for t in VLLM_TARGETS if t.id == "profile_cudagraph_memory"]
    assert t.versions == VLLM_RELEASE["cudagraph_estimate_profiled"].spec
