"""What the probe wraps: one ``Target`` per engine function, with the values to record.

Stdlib only. The tables live in ``kvscope.engines.<engine>.hooks``; ``kvscope probe`` turns them into
JSON for the agent (``_boot/_kvscope_probe_agent.py``), which runs inside the engine's interpreter
and cannot import kvscope.

Capture paths (evaluated by the agent, never raising):
  ``arg.NAME``      a bound argument of the call (by parameter name, defaults applied)
  ``self.A.B``      an attribute chain on the bound ``self``
  ``ret`` / ``ret.A`` the return value (outputs only); ``[]`` maps over a sequence: ``ret.[].num_blocks``
  ``NAME.A``        in ``locals``: a local variable of the function at its return (or raise)
  ``env.NAME``      an environment variable
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class Target:
    """One function the probe wraps in one engine, for a range of engine versions.

    ``versions`` is a comma-separated list of ``>=X``, ``<X``, ``<=X``, ``>X``, ``==X`` clauses
    (release numbers only, e.g. ``">=0.5.7,<0.5.14"``); an empty string means every version.
    ``phase`` is a ``kvscope.timeline`` phase name, or ``""`` to inherit the phase of the hooked
    call it runs inside (``get_available_gpu_memory`` inside ``load_model`` is ``load_weights``).
    """

    id: str
    engine: str
    module: str
    qualname: str
    versions: str = ""
    phase: str = ""
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    locals: Mapping[str, str] = field(default_factory=dict)
    rank: Mapping[str, str] = field(default_factory=dict)  # sets the process's rank fields
    kind: str = "function"  # "function" | "contextmanager"
    startup_only: bool = True  # stop recording once the engine has finished starting
    end_of_startup: str = ""  # "call" | "return": that event ends startup in this process
    required: bool = True  # a required target never found is reported loudly
    why: str = ""

    def applies_to(self, version: str | None) -> bool:
        return version_matches(version, self.versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "engine": self.engine,
            "module": self.module,
            "qualname": self.qualname,
            "versions": self.versions,
            "phase": self.phase,
            "inputs": dict(self.inputs),
            "outputs": dict(self.outputs),
            "locals": dict(self.locals),
            "rank": dict(self.rank),
            "kind": self.kind,
            "startup_only": self.startup_only,
            "end_of_startup": self.end_of_startup,
            "required": self.required,
        }


_CLAUSE = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9][0-9a-zA-Z.+-]*)\s*$")


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.10.post1"`` -> ``(0, 5, 10)``; ``"0.11.0rc2+cu128"`` -> ``(0, 11, 0)``.

    Deliberately tiny (the agent has the same function and cannot import ``packaging``).
    """
    out = []
    for part in version.split("+")[0].split("."):
        m = re.match(r"^(\d+)", part)
        if not m:
            break
        out.append(int(m.group(1)))
        if m.group(1) != part:
            break
    return tuple(out)


def version_matches(version: str | None, spec: str) -> bool:
    """True when ``version`` satisfies every clause of ``spec``; an unknown version matches all."""
    if not spec.strip() or not version:
        return True
    v = release_tuple(version)
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"bad version clause {clause!r} in {spec!r}")
        op, bound = m.group(1), release_tuple(m.group(2))
        width = max(len(v), len(bound))
        a = v + (0,) * (width - len(v))
        b = bound + (0,) * (width - len(bound))
        ok = {
            ">=": a >= b, "<=": a <= b, "==": a == b, ">": a > b, "<": a < b,
        }[op]
        if not ok:
            return False
    return True


def all_targets() -> tuple[Target, ...]:
    """Every target of every engine (the hooks tables)."""
    from kvscope.engines.sglang.hooks import TARGETS as SGLANG
    from kvscope.engines.vllm.hooks import TARGETS as VLLM

    return tuple(SGLANG) + tuple(VLLM)


def targets_to_json(targets: Iterable[Target]) -> list[dict[str, Any]]:
    return [t.to_dict() for t in targets]


def targets_from_json(items: Iterable[Mapping[str, Any]]) -> tuple[Target, ...]:
    """Inverse of ``targets_to_json`` (a probe directory's ``targets.json``)."""
    names = set(Target.__dataclass_fields__)
    return tuple(Target(**{k: v for k, v in d.items() if k in names}) for d in items)
