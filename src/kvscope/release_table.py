"""The release-traits table machinery both engines share: :class:`Trait`, :class:`Era` and the
version-containment rules (stdlib + ``packaging`` only; no engine imports another, both import this).

A trait is a behaviour that changed between releases: the releases that have it, as a ``packaging``
specifier set (``">=0.5.14"``, ``">=0.14,<0.19"``), the release and file whose code pins it, and its
value inside / outside those releases. An era is a behaviour with more than two values: specifier rows
that tile the versions, each with its named value. Each engine keeps its own table (``TRAITS`` in
``engines/<engine>/release.py``) and its frozen per-release value built from it.

Containment is a parameter of the table, chosen per engine, because the two engines' rules differ:

- :func:`by_order` (vLLM): every clause by plain ``Version`` order.
- :func:`by_order_else_pep440` (SGLang): ``<X`` and ``>=X`` by plain ``Version`` order; any other
  operator by PEP 440 (``Specifier.contains``, pre-releases admitted).

Both put a pre-release or dev build of X before X (``0.5.14rc1`` behaves as the releases before
0.5.14, where PEP 440 would keep it out of ``<0.5.14`` too). They part only on ``>X``, which both
tables use for log formats (``">0.5.9"``, ``">0.11.0"``): PEP 440 keeps X's post-releases and local
builds out of ``>X`` (``0.5.9.post1``, ``0.5.9.post1.dev0``, ``0.5.9+cu124``: not after 0.5.9), plain
order counts them after X. The two rules agree on every release the tables name and the tests walk,
but not on those post-release / local neighbours of a ``>`` bound; one rule for both would change
what one engine answers there, so each engine binds its own to its table (:func:`bind_rule`). A
``Trait`` / ``Era`` built outside a table uses :func:`by_order`.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar, Union

from packaging.version import Version

if TYPE_CHECKING:  # packaging.specifiers imports packaging.tags (logging, platform, subprocess): only on use
    from packaging.specifiers import SpecifierSet

Rule = Callable[[Iterable["Clause"], Version], bool]
"""A containment rule: whether version ``v`` satisfies every clause of a specifier set."""

_parsed = lru_cache(maxsize=None)(Version)  # each clause's bound, parsed once (a release() reads ~70 traits)

# The comparison operators plain order knows (a trait using another one is a table error: KeyError).
_ORDER = {">=": operator.ge, "<": operator.lt, ">": operator.gt, "<=": operator.le, "==": operator.eq}


def by_order(clauses: Iterable[Specifier], v: Version) -> bool:
    """Every clause by plain ``Version`` order (the vLLM table): a dev / rc build of X is before X,
    a post-release or local build of X after it."""
    return all(_ORDER[s.operator](v, _parsed(s.version)) for s in clauses)


def by_order_else_pep440(clauses: Iterable[Specifier], v: Version) -> bool:
    """``<X`` / ``>=X`` by plain ``Version`` order, other operators by PEP 440 with pre-releases
    admitted (the SGLang table): ``>X`` excludes X's post-releases and local builds."""
    for s in clauses:
        if s.operator == "<":
            ok = v < _parsed(s.version)
        elif s.operator == ">=":
            ok = v >= _parsed(s.version)
        else:
            ok = s.contains(v, prereleases=True)
        if not ok:
            return False
    return True


_CLAUSE = re.compile(r"^\s*(~=|==|!=|<=|>=|<|>)\s*([0-9][0-9a-z.+!]*)\s*$")


class Clause:
    """One clause of a specifier set (``operator``, ``version``), read without importing
    ``packaging.specifiers`` (its import costs more than the whole plan); ``contains`` is PEP 440's
    (``packaging.specifiers.Specifier.contains``). A plain class: a dataclass costs ~1 ms at import."""

    __slots__ = ("operator", "version")

    def __init__(self, operator: str, version: str) -> None:
        self.operator, self.version = operator, version

    def __repr__(self) -> str:
        return f"Clause({self.operator!r}, {self.version!r})"

    def contains(self, v: Version, prereleases: bool = True) -> bool:
        if prereleases and v.local is None:  # PEP 440 where it is plain order (packaging's own first test)
            if self.operator == ">" and not v.is_postrelease:
                return v > _parsed(self.version)  # the post / local exclusions of ">V" need one
            if self.operator == "<=":
                return v <= _parsed(self.version)
        from packaging.specifiers import Specifier

        return Specifier(self.operator + self.version).contains(v, prereleases=prereleases)


@lru_cache(maxsize=None)
def _clauses(spec: str) -> tuple[Clause, ...]:
    """The clauses of ``spec`` (comma-separated); anything but plain ``OP VERSION`` clauses is read
    by ``packaging.specifiers.SpecifierSet`` (its errors included)."""
    found = [_CLAUSE.match(part) for part in spec.split(",")]
    if not all(found):
        from packaging.specifiers import SpecifierSet

        return tuple(Clause(c.operator, c.version) for c in SpecifierSet(spec))
    return tuple(Clause(m.group(1), m.group(2)) for m in found if m)


def _version(v: Version | str) -> Version:
    return v if isinstance(v, Version) else Version(v)


@dataclass(frozen=True)
class Trait:
    """One version-dependent behaviour: ``on`` in the releases ``spec`` matches, else ``off``.

    ``pinned``: the release and file whose code shows it. ``rule``: the table's containment rule.
    """

    spec: str  # PEP 440 specifier set: the releases that have the behaviour
    pinned: str  # the release / wheel code that pins it
    on: Any = True
    off: Any = False
    rule: Rule = field(default=by_order, repr=False, compare=False)

    @property
    def specifier(self) -> SpecifierSet:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.spec)

    @property
    def boundaries(self) -> tuple[str, ...]:
        """The releases where the value flips (the specifier versions)."""
        return tuple(s.version for s in self.specifier)

    def at(self, v: Version | str) -> bool:
        """Whether release ``v`` has the behaviour."""
        return self.rule(_clauses(self.spec), _version(v))

    def value(self, v: Version | str) -> Any:
        return self.on if self.at(v) else self.off

    @property
    def off_spec(self) -> str:
        """The releases outside ``spec``, for a one-clause ``>=X`` / ``<X`` trait (``<X`` / ``>=X``)."""
        (s,) = self.specifier
        flipped = {">=": "<", "<": ">="}.get(s.operator)
        if flipped is None:
            raise ValueError(f"no one-clause complement for {self.spec!r}")
        return flipped + s.version


@dataclass(frozen=True)
class Era:
    """A behaviour with more than two values: ``(specifier, value, pinned)`` rows tiling the versions."""

    rows: tuple[tuple[str, Any, str], ...]
    rule: Rule = field(default=by_order, repr=False, compare=False)

    def at(self, v: Version | str) -> Any:
        """The value of the one row that holds ``v`` (ValueError if none or several do)."""
        v = _version(v)
        hits = [value for spec, value, _ in self.rows if self.rule(_clauses(spec), v)]
        if len(hits) != 1:
            raise ValueError(f"era rows {self.rows} give {hits} for {v}")
        return hits[0]

    value = at  # an era's value at ``v``, as ``Trait.value``

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(value for _, value, _ in self.rows)

    def spec_of(self, value: Any) -> str:
        """The specifier of the row whose value is ``value`` (KeyError if none)."""
        for spec, v, _ in self.rows:
            if v == value:
                return spec
        raise KeyError(f"no era row {value!r} in {self.values}")


T = TypeVar("T", bound=Union[Trait, Era])


def bind_rule(rule: Rule, traits: Mapping[str, T]) -> dict[str, T]:
    """The table ``traits`` with every trait and era evaluated by ``rule`` (one rule per engine)."""
    return {name: replace(t, rule=rule) for name, t in traits.items()}


__all__ = ["Era", "Rule", "Trait", "bind_rule", "by_order", "by_order_else_pep440"]
