"""Typed records of what a log printed.

A log prints some figures and not others, and prints them in its own order; the doctor's JSON
lists exactly the keys the log gave, in the order the grammar found them. ``ObservedRecord`` is a
``Record`` (typed fields, named like the JSON keys) built from those (key, value) pairs: a key
without a field is refused, a field the log did not give is left out, and a key the log gave with
no value (``full_layer_tokens`` of an all-SWA pool) stays, as ``null``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, TypeVar

from ..record import Record

R = TypeVar("R", bound="ObservedRecord")


@dataclass(frozen=True)
class ObservedRecord(Record):
    omit_none: ClassVar[bool] = True

    @classmethod
    def from_items(cls: type[R], items: Iterable[tuple[str, Any]]) -> R:
        """The record of these (JSON key, value) pairs, keeping their order."""
        pairs = dict(items)
        names = {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in pairs if k not in names]
        if unknown:
            raise KeyError(f"{cls.__name__} has no field for {unknown}")
        rec = cls(**{names[k]: v for k, v in pairs.items()})
        object.__setattr__(rec, "_keys", tuple(pairs))  # not a field: the order and presence of the keys
        return rec

    def has(self, key: str) -> bool:
        """Whether the log gave this key (its value may still be None)."""
        keys = getattr(self, "_keys", None)
        return key in keys if keys is not None else key in super().to_dict()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        keys = getattr(self, "_keys", None)
        return out if keys is None else {k: out.get(k) for k in keys}
