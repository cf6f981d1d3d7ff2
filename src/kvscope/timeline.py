"""The one data model: an engine's startup as a per-rank timeline plus the sizing decision.

Produced by ``plan`` (predicted), ``doctor`` (observed in logs) and ``probe`` (measured), so the
three can be compared phase by phase. All figures are integer bytes; ``None`` means unknown.

JSON contract (other tools read these keys; add keys, never rename): the same required top-level
keys for both engines (the fields below), ``ranks`` [{rank, phases, decision}], and the engine's
own figures (``extra``, a typed record such as ``SGLangPlanExtra``) as further top-level keys. The
decision and extra records are frozen dataclasses whose field names are the JSON keys; the schema
built from them ships as ``kvscope/data/output.schema.json`` (docs/json.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from .record import Loose, Record

Source = Literal["plan", "log", "probe"]
EngineName = Literal["sglang", "vllm"]

# Phase names shared by every engine and every source (plan / doctor / probe).
PHASE_INIT = "init"  # CUDA context, NCCL / custom all-reduce: free memory after it is the baseline
PHASE_LOAD_WEIGHTS = "load_weights"
PHASE_LOAD_DRAFT = "load_draft_weights"
PHASE_PROFILE = "profile"  # the engine's sizing formula (SGLang profile / vLLM memory profiling)
PHASE_KV_ALLOC = "kv_cache"
PHASE_REQ_POOL = "req_to_token_pool"
PHASE_CUDA_GRAPH = "cuda_graph"
PHASE_ORDER = (
    PHASE_INIT,
    PHASE_LOAD_WEIGHTS,
    PHASE_LOAD_DRAFT,
    PHASE_PROFILE,
    PHASE_KV_ALLOC,
    PHASE_REQ_POOL,
    PHASE_CUDA_GRAPH,
)


@dataclass(frozen=True)
class Phase:
    """One startup phase on one rank: device free memory before and after it."""

    name: str  # one of PHASE_ORDER
    free_bytes_before: int | None  # device free memory before the phase (bytes)
    free_bytes_after: int | None  # device free memory after it (bytes)
    estimated: bool = False  # whether these figures are estimates rather than measured or printed
    note: str = ""  # what the phase did, in the engine's terms

    @property
    def used_bytes(self) -> int | None:
        if self.free_bytes_before is None or self.free_bytes_after is None:
            return None
        return self.free_bytes_before - self.free_bytes_after

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "free_bytes_before": self.free_bytes_before,
            "free_bytes_after": self.free_bytes_after,
            "used_bytes": self.used_bytes,
            "estimated": self.estimated,
            "note": self.note,
        }


@dataclass(frozen=True)
class Fix:
    """A flag change that makes the engine start (or start better), with the reason."""

    flag: str  # the engine flag, as on its command line
    value: Any  # the value to pass
    why: str  # the reason, with the figure it comes from

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "why": self.why}


@dataclass(frozen=True)
class RankTimeline:
    """One GPU rank: its phases in order and the sizing formula's named inputs and outputs."""

    rank: int
    phases: tuple[Phase, ...]
    decision: Record = field(default_factory=Loose)  # the engine's typed decision record (SGLangDecision, ...)

    def phase(self, name: str) -> Phase | None:
        for p in self.phases:
            if p.name == name:
                return p
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "phases": [p.to_dict() for p in self.phases],
            "decision": self.decision.to_dict(),
        }


@dataclass(frozen=True)
class Timeline:
    """One engine start: what every rank did and what came of it."""

    source: Source  # plan (predicted), log (doctor: printed), probe (measured in the engine)
    engine: EngineName  # the serving engine
    engine_version: str | None  # the release simulated or seen (None: not printed by the log)
    model: str | None  # model id or path
    gpu: str | None  # kvscope's GPU key (plan) or the device name
    starts: bool | None  # whether the engine starts (None: the log ends before it says)
    error: str | None  # the engine's own error text when it does not start
    kv_cache_tokens: int | None  # KV pool size in tokens (SGLang max_total_num_tokens; vLLM GPU KV cache size)
    max_running_requests: int | None  # concurrent requests the engine admits (vLLM: max_num_seqs)
    kv_cell_bytes: int | None  # KV bytes per token per rank
    kv_cache_bytes: int | None  # KV pool bytes per rank
    weights_bytes: int | None  # weight bytes per rank (largest PP stage)
    ranks: tuple[RankTimeline, ...] = ()  # one per GPU rank: phases and the decision record
    fix: tuple[Fix, ...] = ()  # flag changes that make it start (or serve the context)
    extra: Record = field(default_factory=Loose)  # engine/source figures, emitted as top-level JSON keys
    warnings: tuple[str, ...] = ()  # what the engine would warn, and kvscope's assumptions
    estimated: tuple[str, ...] = ()  # names of top-level figures that are estimates

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": self.model,
            "gpu": self.gpu,
            "starts": self.starts,
            "error": self.error,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_running_requests": self.max_running_requests,
            "kv_cell_bytes": self.kv_cell_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "weights_bytes": self.weights_bytes,
        }
        for k, v in self.extra.to_dict().items():
            out.setdefault(k, v)
        out["fix"] = [f.to_dict() for f in self.fix]
        out["warnings"] = list(self.warnings)
        out["estimated"] = list(self.estimated)
        out["ranks"] = [r.to_dict() for r in self.ranks]
        return out


def timeline_from_dict(d: Mapping[str, Any]) -> Timeline:
    """Inverse of ``Timeline.to_dict`` (used by ``doctor --against plan.json``)."""
    known = {
        "source", "engine", "engine_version", "model", "gpu", "starts", "error",
        "kv_cache_tokens", "max_running_requests", "kv_cell_bytes", "kv_cache_bytes",
        "weights_bytes", "fix", "warnings", "estimated", "ranks",
    }
    ranks = tuple(
        RankTimeline(
            rank=int(r.get("rank", i)),
            phases=tuple(
                Phase(
                    name=p["name"],
                    free_bytes_before=p.get("free_bytes_before"),
                    free_bytes_after=p.get("free_bytes_after"),
                    estimated=bool(p.get("estimated", False)),
                    note=p.get("note", ""),
                )
                for p in r.get("phases", ())
            ),
            decision=Loose(dict(r.get("decision", {}))),
        )
        for i, r in enumerate(d.get("ranks", ()))
    )
    return Timeline(
        source=d.get("source", "plan"),
        engine=d.get("engine", "unknown"),
        engine_version=d.get("engine_version"),
        model=d.get("model"),
        gpu=d.get("gpu"),
        starts=d.get("starts"),
        error=d.get("error"),
        kv_cache_tokens=d.get("kv_cache_tokens"),
        max_running_requests=d.get("max_running_requests"),
        kv_cell_bytes=d.get("kv_cell_bytes"),
        kv_cache_bytes=d.get("kv_cache_bytes"),
        weights_bytes=d.get("weights_bytes"),
        ranks=ranks,
        fix=tuple(Fix(f["flag"], f.get("value"), f.get("why", "")) for f in d.get("fix", ())),
        extra=Loose({k: v for k, v in d.items() if k not in known}),
        warnings=tuple(d.get("warnings", ())),
        estimated=tuple(d.get("estimated", ())),
    )
