"""Typed records: frozen dataclasses that serialise to the documented JSON keys.

A decision or extra record is a frozen dataclass deriving from ``Record``. Its JSON keys are its
field names, in declaration order (a field can carry ``metadata={"key": "json-name"}``). Records
whose ``omit_none`` class attribute is true leave out fields that are ``None`` (observed records:
a log prints some figures and not others); plan records emit every field.

``Loose`` carries an open set of keys (the probe records whatever the engine's functions received;
``timeline_from_dict`` keeps keys it has no type for).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping


def _json(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, tuple):
        return [_json(x) for x in v]
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _json(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Record:
    """Base of every typed decision / extra record."""

    omit_none: ClassVar[bool] = False

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        return tuple(f.metadata.get("key", f.name) for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and self.omit_none:
                continue
            out[f.metadata.get("key", f.name)] = _json(v)
        return out


@dataclass(frozen=True)
class Loose(Record):
    """An open set of keys (probe records, or JSON read back without a known type)."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: _json(v) for k, v in self.values.items()}

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def items(self):
        return self.values.items()
