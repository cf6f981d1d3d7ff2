"""The shared release-traits machinery (kvscope.release_table): Trait, Era, the two containment rules.

The rules are table-driven, packaging style. The last tests hold the reason there are two: on every
release the engines' tables name (and their pre / dev / post neighbours) the rules agree, except on
the post-releases and local builds of a ``>X`` bound, so each engine keeps its own.
"""

from __future__ import annotations

import dataclasses

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kvscope.engines.sglang import release as sglang
from kvscope.engines.vllm import release as vllm
from kvscope.release_table import Era, Trait, bind_rule, by_order, by_order_else_pep440

RULES = {"by_order": by_order, "by_order_else_pep440": by_order_else_pep440}


@pytest.mark.parametrize("spec,version,order,pep440", [
    # <X / >=X: plain Version order under both (a pre-release or dev build of X is before X)
    (">=0.5.14", "0.5.14", True, True),
    (">=0.5.14", "0.5.14rc1", False, False),
    (">=0.5.14", "0.5.14.dev0", False, False),
    (">=0.5.14", "0.5.13.post1", False, False),
    (">=0.5.14", "0.5.14.post1", True, True),
    ("<0.14", "0.14.0rc1", True, True),  # PEP 440 alone would exclude it
    ("<0.14", "0.14.0.dev5", True, True),
    ("<0.14", "0.14", False, False),
    ("<0.14", "0.13.99", True, True),
    (">=0.14,<0.19", "0.19.0rc1", True, True),
    (">=0.14,<0.19", "0.19.0", False, False),
    # >X: the rules part on X's post-releases and local builds
    (">0.5.9", "0.5.10", True, True),
    (">0.5.9", "0.5.10rc1", True, True),
    (">0.5.9", "0.5.9", False, False),
    (">0.5.9", "0.5.9rc1", False, False),
    (">0.5.9", "0.5.9.post1", True, False),
    (">0.5.9", "0.5.9.post1.dev0", True, False),
    (">0.5.9", "0.5.9+cu124", True, False),
    (">0.4.10.post2", "0.4.10.post3", True, True),
    (">0.4.10.post2", "0.4.10.post2", False, False),
    (">0.11.0", "0.11.0.post1", True, False),
])
def test_rules(spec, version, order, pep440):
    clauses, v = tuple(SpecifierSet(spec)), Version(version)
    assert by_order(clauses, v) is order
    assert by_order_else_pep440(clauses, v) is pep440


def test_trait():
    t = Trait(">=0.14,<0.19", "kv_cache_utils.py @ v0.14.1", 1.5, 1.25)
    assert t.rule is by_order  # outside a table: plain order
    assert t.boundaries == ("0.14", "0.19")
    assert t.specifier == SpecifierSet(">=0.14,<0.19")
    assert (t.at("0.14.1"), t.at(Version("0.19")), t.value("0.15"), t.value("0.13")) == (True, False, 1.5, 1.25)
    assert Trait("<0.19", "x").off_spec == ">=0.19" and Trait(">=0.19", "x").off_spec == "<0.19"
    for no_complement in (t, Trait(">0.11.0", "x")):
        with pytest.raises(ValueError):
            _ = no_complement.off_spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.spec = "<1"  # type: ignore[misc]
    # the rule is how a trait is read, not what it says
    assert Trait(">0.5.9", "x") == Trait(">0.5.9", "x", rule=by_order_else_pep440)


def test_era():
    era = Era((("<0.5.7", "runner", "0.5.6"), (">=0.5.7,<0.5.18", "mixin", "0.5.9"), (">=0.5.18", "conf", "0.5.18")))
    assert [era.at(v) for v in ("0.5.6", "0.5.7rc1", "0.5.7", "0.5.17.post1", "0.5.18")] == \
        ["runner", "runner", "mixin", "mixin", "conf"]
    assert era.value("0.5.18") == era.at(Version("0.5.18")) == "conf"
    assert era.values == ("runner", "mixin", "conf")
    assert era.spec_of("mixin") == ">=0.5.7,<0.5.18"
    with pytest.raises(KeyError):
        era.spec_of("nowhere")
    gap = Era((("<0.5.7", "a", "x"), (">=0.5.8", "b", "x")))
    overlap = Era((("<0.5.8", "a", "x"), (">=0.5.7", "b", "x")))
    for bad in (gap, overlap):
        with pytest.raises(ValueError):
            bad.at("0.5.7")


def test_bind_rule():
    traits = {"t": Trait(">0.5.9", "x"), "e": Era((("<0.5.9", "a", "x"), (">=0.5.9", "b", "x")))}
    table = bind_rule(by_order_else_pep440, traits)
    assert list(table) == ["t", "e"] and table == traits  # the same entries, read by the bound rule
    assert all(t.rule is by_order_else_pep440 for t in table.values())
    assert table["t"].at("0.5.9.post1") is False and traits["t"].at("0.5.9.post1") is True
    assert table["e"].at("0.5.9.post1") == "b"


def test_each_engine_binds_its_rule():
    assert {t.rule for t in sglang.TRAITS.values()} == {by_order_else_pep440}
    assert {t.rule for t in vllm.TRAITS.values()} == {by_order}
    assert sglang.Trait is vllm.Trait is Trait and sglang.Era is Era


def _specs(table):
    for name, t in table.items():
        for spec in ([row[0] for row in t.rows] if isinstance(t, Era) else [t.spec]):
            yield name, spec


def _with_neighbours(versions):
    out = set()
    for text in versions:
        v = Version(text)
        post = (v.post or 0) + 1  # the next post-release (0.5.8.post1 -> 0.5.8.post2)
        out.update((v, Version(f"{v}+cu124")))
        out.update(Version(v.base_version + s) for s in ("rc1", "a1", ".dev0", f".post{post}", f".post{post}.dev0"))
    return sorted(out)


def _disagreements(table, versions):
    return sorted({(spec, str(v)) for _, spec in _specs(table) for v in versions
                   if by_order(tuple(SpecifierSet(spec)), v) != by_order_else_pep440(tuple(SpecifierSet(spec)), v)})


SGLANG_LISTED = sglang.KNOWN_VERSIONS + ("0.4.7", "0.4.8", "0.4.9", "0.4.10", "0.5.0", "0.5.1", "0.5.2", "0.5.8.post1",
                                         "0.5.16", "0.5.17", "0.5.19")


@pytest.mark.parametrize("table,listed", [(sglang.TRAITS, SGLANG_LISTED), (vllm.TRAITS, vllm.KNOWN_VERSIONS)],
                         ids=["sglang", "vllm"])
def test_rules_agree_on_listed_releases_not_on_gt_post_neighbours(table, listed):
    assert _disagreements(table, [Version(v) for v in listed]) == []
    diff = _disagreements(table, _with_neighbours(listed))
    assert diff, "the rules part somewhere: one rule for both would change an engine's answers"
    for spec, v in diff:  # only on a '>X' clause, at X's post-releases or local builds
        base = Version(Version(v).base_version)
        assert any(s.operator == ">" and Version(Version(s.version).base_version) == base
                   for s in SpecifierSet(spec)), (spec, v)
        assert Version(v).post is not None or Version(v).local is not None, (spec, v)


def test_engine_answers_at_gt_post_neighbours():
    """What each engine's table answers where the rules part (pinned, so a rule change shows)."""
    assert sglang.release("0.5.9.post1").log_load_end_no_dtype is False  # PEP 440: not after 0.5.9
    assert sglang.release("0.5.10").log_load_end_no_dtype is True
    assert vllm.version_traits("0.11.0.post1").log_weights_memory_word is True  # plain order: after 0.11.0
    assert vllm.version_traits("0.11.0").log_weights_memory_word is False
