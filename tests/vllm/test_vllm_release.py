"""The vLLM release-traits table: each trait flips exactly at its boundary (packaging style)."""

from __future__ import annotations

import dataclasses

import pytest
from packaging.version import Version

from kvscope.engines.vllm.release import KNOWN_VERSIONS, LATEST_VERSION, TRAITS, VersionTraits, version_traits
from kvscope.errors import FlagError


def _just_before(boundary: str) -> str:
    """The release just below a boundary: 0.20.2 -> 0.20.1, 0.14 -> 0.13.99, 0.10.2 -> 0.10.1."""
    parts = list(Version(boundary).release)
    while parts and parts[-1] == 0:
        parts.pop()
    if parts[-1] > 0 and len(parts) > 2:
        parts[-1] -= 1
        return ".".join(map(str, parts))
    parts[-1] -= 1
    return ".".join(map(str, parts + [99]))


def _just_after(boundary: str) -> str:
    """The release just above a boundary: 0.11.0 -> 0.11.1."""
    parts = list(Version(boundary).release) + [0] * (3 - len(Version(boundary).release))
    parts[-1] += 1
    return ".".join(map(str, parts))


def test_every_trait_is_a_field_and_back():
    names = {f.name for f in dataclasses.fields(VersionTraits)} - {"version"}
    assert names == set(TRAITS)


@pytest.mark.parametrize("name", sorted(TRAITS))
def test_trait_flips_exactly_at_its_boundaries(name):
    t = TRAITS[name]
    assert t.on != t.off
    assert t.pinned and ("@" in t.pinned or "spec" in t.pinned), "each trait names the code that pins it"
    assert t.boundaries, name
    for s in t.specifier:
        b = s.version
        if Version(b) <= Version("0.6"):
            continue
        # ">=X" / "<X" flip between the release before X and X; ">X" (a log format first seen after
        # X, the releases between not read) between X and the release after it
        lo, hi = (b, _just_after(b)) if s.operator == ">" else (_just_before(b), b)
        at, below = getattr(version_traits(hi), name), getattr(version_traits(lo), name)
        assert at != below, (name, b, at, below)
        assert at == t.value(Version(hi)) and below == t.value(Version(lo))
    # between boundaries the value holds: every known release agrees with the specifier
    for v in KNOWN_VERSIONS:
        assert getattr(version_traits(v), name) == (t.on if all(
            {">=": Version(v) >= Version(s.version), "<": Version(v) < Version(s.version),
             ">": Version(v) > Version(s.version)}[s.operator]
            for s in t.specifier) else t.off), (name, v)


@pytest.mark.parametrize("name,boundary", [
    # backend-selection traits: named by what they gate, at the release that brought it
    ("fa_fp8_e4m3_only", "0.22"), ("fa4_large_head_upgrade", "0.27"), ("tokenspeed_mla", "0.24"),
    ("rocm_aiter_sparse_fp8", "0.22"), ("fa4_hd256_kernel", "0.30"), ("fa4_sm90_fp8_head_512", "0.33"),
    # error texts, max-len rules and MLA block rules: one named trait per change
    ("error_docs_link", "0.13"), ("error_format_gib", "0.14"), ("error_cpu_hint", "0.22"),
    ("max_len_rope_parameters", "0.12"), ("max_len_yarn_unscaled", "0.30"),
    ("cutlass_mla_blackwell_family", "0.13"), ("flashinfer_mla_block_rule", "0.15"),
    ("null_block_reserved", "0.29"), ("tokens_from_concurrency", "0.20.2"),
])
def test_named_boundaries(name, boundary):
    assert TRAITS[name].boundaries[0] == boundary
    assert getattr(version_traits(boundary), name) is True
    assert getattr(version_traits(_just_before(boundary)), name) is False


def test_ranges_and_values():
    assert [version_traits(v).admission_first_group_only for v in ("0.13.0", "0.14.1", "0.18.0", "0.19.0")] == \
        [False, True, True, False]
    assert [version_traits(v).mamba_blocks_cap_warning for v in ("0.18.0", "0.19.0", "0.20.1", "0.20.2")] == \
        [False, True, True, False]
    assert version_traits("0.19.0").default_gpu_memory_utilization == 0.9
    assert version_traits("0.20.0").default_gpu_memory_utilization == 0.92
    assert version_traits("0.17.0").group_size_max_ratio == 1.25
    assert version_traits("0.18.0").group_size_max_ratio == 1.5


def test_development_builds_order_before_their_release():
    """A dev / rc build of X behaves as the release before X (Version order), also for ``<X`` traits."""
    assert version_traits("0.14.0rc1").admission_per_layer is True
    assert version_traits("0.14.0rc1").requested_memory_ceil is False
    assert version_traits("0.20.2.dev3").tokens_from_concurrency is False


def test_cached_per_version_and_latest():
    assert version_traits("0.19.0") is version_traits("0.19.0")
    assert version_traits("0.19").version == "0.19"  # the version as given (it shows in engine_version)
    assert version_traits(None).version == LATEST_VERSION


def test_code_layout_traits_name_the_modules():
    mem = TRAITS["mem_utils_module"]
    assert (mem.spec, mem.off_spec) == (">=0.19", "<0.19")
    assert version_traits("0.19.0").mem_utils_module == "vllm.utils.mem_utils"
    assert version_traits("0.18.0").mem_utils_module == "vllm.utils"
    assert TRAITS["admission_per_layer"].off_spec == ">=0.14"
    with pytest.raises(ValueError):
        _ = TRAITS["admission_first_group_only"].off_spec  # two clauses: no one-clause complement


def test_too_old_and_invalid():
    with pytest.raises(FlagError):
        version_traits("0.5.4")
    with pytest.raises(FlagError):
        version_traits("not-a-version")
