"""What the doctor tells a user: findings (problem + evidence + fix) and recomputation checks.

Value types only; the rules that produce them are ``rules_common``, ``sglang_rules`` and
``vllm_rules``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from ..timeline import Fix

Severity = Literal["error", "warning", "info"]
ERROR: Severity = "error"
WARNING: Severity = "warning"
INFO: Severity = "info"
SEVERITY_ORDER: dict[str, int] = {ERROR: 0, WARNING: 1, INFO: 2}

# Finding codes (stable: tests and --json consumers match on them).
KV_SIZING_FAILED = "kv-sizing-failed"
EFFECTIVE_FRACTION_MISMATCH = "effective-fraction-mismatch"
EFFECTIVE_FRACTION = "effective-fraction"
FLAGS_DISAGREE = "flags-disagree"  # documented, not emitted today
UNBALANCED_RANKS = "unbalanced-ranks"
KV_POOL_BELOW_CONTEXT = "kv-pool-below-context"
CUDA_GRAPH_SLACK = "cuda-graph-slack"
DRAFT_MODEL_MEMORY = "draft-model-memory"
CUSTOM_ALLREDUCE = "custom-allreduce"
RUNTIME_OOM = "runtime-oom"
LOAD_OOM = "load-oom"
KV_POOL_FULL = "kv-pool-full-at-runtime"
MAX_TOTAL_TOKENS_CAPPED = "max-total-tokens-capped"
MAX_RUNNING_REDUCED = "max-running-requests-reduced"
ARITHMETIC_MISMATCH = "engine-arithmetic-mismatch"
HYBRID_TOKEN_COUNT = "kv-tokens-from-concurrency"
CUDA_GRAPH_NOT_RESERVED = "cuda-graph-not-reserved"
PROFILING_ERROR = "profiling-error"
FREE_BELOW_UTILIZATION = "free-memory-below-utilization"
TRUNCATED = "log-truncated"
NO_MEMORY_LINES = "no-memory-lines"
RESTARTS = "multiple-starts"
UNPARSED_LINES = "unparsed-lines"
LOCAL_BASELINE = "baseline-is-local"  # documented, not emitted today
STARTUP_FAILED = "startup-failed"
PLAN_DISAGREES = "plan-disagrees"

PRINT_HALF_STEP_GIB = 0.005  # SGLang and vLLM print GiB to 2 decimals


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Check:
    """The doctor recomputed one of the engine's printed numbers from other printed numbers."""

    name: str
    printed: Any
    recomputed: Any
    agrees: bool
    how: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "printed": self.printed,
            "recomputed": self.recomputed,
            "agrees": self.agrees,
            "how": self.how,
            "evidence": list(self.evidence),
        }


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))


def _evidence(evidence: Any) -> tuple[str, ...]:
    return tuple(e for e in (evidence if isinstance(evidence, (list, tuple)) else (evidence,)) if e)


@dataclass
class Analysis:
    """What the rules concluded: top-level figures for the Timeline plus findings and checks.
    The rules fill it in order (the order of ``extra`` keys is the JSON's)."""

    findings: list[Finding] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    starts: bool | None = None
    error: str | None = None
    kv_cache_tokens: int | None = None
    max_running_requests: int | None = None
    kv_cache_bytes: int | None = None
    weights_bytes: int | None = None
    kv_cell_bytes: int | None = None
    fix: list[Fix] = field(default_factory=list)

    def add(self, code: str, severity: Severity, message: str, evidence: Any = (), fix: str | None = None) -> None:
        """One finding; empty evidence lines are dropped, repeated ones kept once."""
        self.findings.append(Finding(code, severity, message, tuple(dict.fromkeys(_evidence(evidence))), fix))

    def check(self, name: str, printed: Any, recomputed: Any, agrees: bool, how: str, evidence: Any = ()) -> None:
        self.checks.append(Check(name, printed, recomputed, agrees, how, _evidence(evidence)))

    def suggest(self, flag: str, value: Any, why: str) -> None:
        """A flag value that fixes the start (``Timeline.fix``)."""
        self.fix.append(Fix(flag, value, why))

    def mismatches(self, exempt: tuple[str, ...]) -> None:
        """A warning per recomputation that disagrees (``exempt``: checks whose disagreement is a
        finding of its own)."""
        for c in list(self.checks):
            if not c.agrees and c.name not in exempt:
                self.add(ARITHMETIC_MISMATCH, WARNING,
                         f"{c.name}: printed {c.printed}, recomputed {c.recomputed} ({c.how})", c.evidence,
                         "the log may be edited or mixed from several runs, or this version computes it differently")


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ceil_to(x: float, step: float) -> float:
    return round(math.ceil(round(x / step, 9)) * step, 10)
