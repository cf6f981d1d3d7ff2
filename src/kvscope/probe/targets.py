"""The probe's registry of targets: every engine's hook table, and its JSON for the agent.

The tables are data in the neutral ``kvscope.hooks`` package (``Target`` and one module per engine);
the probe imports them and no engine module. ``kvscope probe`` writes them as ``targets.json`` for
the agent (``_boot/_kvscope_probe_agent.py``), which runs inside the engine's interpreter and cannot
import kvscope; the version matching below is the agent's own (stdlib-only) function.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from kvscope.hooks import Target
from kvscope.hooks.sglang import TARGETS as SGLANG_TARGETS
from kvscope.hooks.vllm import TARGETS as VLLM_TARGETS
from kvscope.probe._boot import _kvscope_probe_agent as _agent

__all__ = ["Target", "all_targets", "targets_from_json", "targets_to_json", "version_matches"]


def version_matches(version: str | None, spec: str) -> bool:
    """True when ``version`` satisfies every clause of ``spec``; an unknown version matches all.

    A malformed clause raises ``ValueError`` (the agent, which must never raise, matches instead).
    """
    return _agent.version_matches(version, spec, strict=True)


def all_targets() -> tuple[Target, ...]:
    """Every target of every engine (the hooks tables)."""
    return tuple(SGLANG_TARGETS) + tuple(VLLM_TARGETS)


def targets_to_json(targets: Iterable[Target]) -> list[dict[str, Any]]:
    return [t.to_dict() for t in targets]


def targets_from_json(items: Iterable[Mapping[str, Any]]) -> tuple[Target, ...]:
    """Inverse of ``targets_to_json`` (a probe directory's ``targets.json``)."""
    return tuple(Target.from_dict(d) for d in items)
