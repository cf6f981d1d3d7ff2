"""What ``kvscope probe`` wraps inside each engine: the ``Target`` record and the per-engine tables.

Pure data, and neutral: the engines never import this package, and it imports no engine module
but the engines' release tables (pure data, for version boundaries that follow a named trait);
``kvscope.hooks.sglang`` and ``kvscope.hooks.vllm`` hold the tables. The probe
(``kvscope.probe.targets``) reads them and sends them as JSON to the agent
(``probe/_boot/_kvscope_probe_agent.py``), which runs inside the engine's interpreter and cannot
import kvscope.

Capture paths (evaluated by the agent, never raising):
  ``arg.NAME``      a bound argument of the call (by parameter name, defaults applied)
  ``self.A.B``      an attribute chain on the bound ``self``
  ``ret`` / ``ret.A`` the return value (outputs only); ``[]`` maps over a sequence:
                    ``ret.[].num_blocks``
  ``NAME.A``        in ``locals``: a local variable of the function at its return (or raise)
  ``env.NAME``      an environment variable
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

# Fields the agent does not read: kept in the table, left out of the JSON.
_NOT_SENT = frozenset({"why"})


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

    def to_dict(self) -> dict[str, Any]:
        """The JSON the agent reads: every field but ``why``, in declaration order."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in _NOT_SENT:
                continue
            v = getattr(self, f.name)
            out[f.name] = dict(v) if isinstance(v, Mapping) else v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Target":
        """Inverse of ``to_dict``; keys the record does not know are dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def target_maker(engine: str) -> Callable[..., Target]:
    """``_target(id, module, qualname, **fields)`` for one engine's table."""
    return functools.partial(_target, engine)


def _target(engine: str, id: str, module: str, qualname: str, **kw: Any) -> Target:
    return Target(id=id, engine=engine, module=module, qualname=qualname, **kw)

