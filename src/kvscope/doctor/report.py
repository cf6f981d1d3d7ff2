"""The doctor's result (``DoctorReport``: the observed timeline, findings, checks, the log's
statistics) and its comparison with a plan (``--against plan.json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import LogFormatError
from ..logs.observed import ObservedRecord
from ..timeline import Timeline, timeline_from_dict
from .findings import PLAN_DISAGREES, SEVERITY_ORDER, WARNING, Check, Finding, sort_findings
from .scan import LogStats


@dataclass(frozen=True)
class SglangLogExtra(ObservedRecord):
    """The doctor's top-level figures for an SGLang log (only those it could read or derive)."""

    engine_version_source: str | None = None  # "printed", "inferred from log line formats", or that they disagree
    engine_version_range: str | None = None  # PEP 440 range the line formats imply (no version printed)
    engine_version_conflict: str | None = None  # the formats imply no release (an edited or mixed log)
    model_catalog_id: str | None = None  # the bundled model a local path's name matched (assumed)
    kv_cell_bytes_estimated: int | None = None  # KV bytes per token from the printed size (model unknown)
    pre_model_load_memory_bytes: int | None = None  # MIN over ranks of the free memory before the weights
    post_load_free_bytes: int | None = None  # MIN over ranks of the free memory after the weights
    mem_fraction_static: float | None = None  # the flag in effect
    mem_fraction_static_source: str | None = None  # server_args, launch command, assumed (--set) or error message
    context_len: int | None = None  # from the max_total_num_tokens summary line
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    available_gpu_mem_bytes: int | None = None  # the summary's available_gpu_mem
    aiter_fraction_factor: float | None = None  # 0.85 when SGLang may have scaled the fraction (aiter)
    mem_fraction_static_effective_expected: float | None = None  # flag × 0.85
    min_mem_fraction_static: float | None = None  # 1 − available/pre: below it the KV budget is ≤ 0
    tokens_per_0_01_mem_fraction_static: int | None = field(default=None, metadata={"key": "tokens_per_0.01_mem_fraction_static"})
    effective_mem_fraction_static: float | None = None  # the fraction the printed KV size implies
    dsa_fp8_budgeted_kv_gib: float | None = None  # DSA fp8 before 0.5.18: the KV size the budget priced
    effective_mem_fraction_static_range: list[float] | None = None  # with the print rounding
    pre_model_load_memory_note: str | None = None
    model_class: str | None = None  # the model class "Load weight end" printed (no model named)
    failed_at: str | None = None  # the phase a failed start died in (logs/grammar.py PHASES)
    serving_seen: bool | None = None  # the log shows the server serving (its ready line, or request traffic)


@dataclass(frozen=True)
class VllmLogExtra(ObservedRecord):
    """The doctor's top-level figures for a vLLM log (only those it could read or derive)."""

    engine_version_source: str | None = None  # "printed", "inferred from log line formats", or that they disagree
    engine_version_range: str | None = None  # PEP 440 range the line formats imply (no version printed)
    engine_version_conflict: str | None = None  # the formats imply no release (an edited or mixed log)
    model_catalog_id: str | None = None  # the bundled model a local path's name matched (assumed)
    available_kv_cache_bytes: int | None = None  # "Available KV cache memory" (first worker)
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    gpu_memory_utilization_source: str | None = None  # where the utilization came from ("log": printed)
    max_model_len: int | None = None
    max_concurrency: float | None = None  # "Maximum concurrency for N tokens per request"
    kv_cell_bytes_estimated: int | None = None  # available KV memory / KV tokens
    total_memory_bytes_inferred: int | None = None  # requested / utilization (total not printed)
    cuda_graph_estimate_subtracted: bool | None = None  # the CUDA graph estimate was reserved before KV sizing
    failed_at: str | None = None  # kv_sizing, init, engine, or a phase of logs/grammar.py PHASES
    serving_seen: bool | None = None  # the log shows the server serving (its ready line, or request traffic)
    vllm_capacity_version: str | None = None  # the release the catalog-model check ran


LOG_EXTRA: dict[str, type[ObservedRecord]] = {"sglang": SglangLogExtra, "vllm": VllmLogExtra}


def report_records(engine: str) -> tuple[type[ObservedRecord], ...]:
    """The records of a log timeline's top-level figures for this engine (``Timeline.extra``)."""
    return (LOG_EXTRA[engine],)


@dataclass(frozen=True)
class DoctorReport:
    """The observed timeline plus what the doctor concluded. ``to_dict`` is the ``--json`` output."""

    timeline: Timeline
    findings: tuple[Finding, ...]
    checks: tuple[Check, ...]
    unparsed_samples: tuple[str, ...]
    stats: LogStats
    flags: dict[str, Any] = field(default_factory=dict)
    flag_sources: dict[str, str] = field(default_factory=dict)
    comparison: tuple[dict[str, Any], ...] = ()

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    @staticmethod
    def json_properties(defs: dict[str, Any]) -> dict[str, Any]:
        """JSON Schema of the keys ``to_dict`` adds to the timeline (``defs``: shared definitions)."""
        evidence = {"type": "array", "items": {"type": "string"}}
        defs["Finding"] = {"type": "object", "additionalProperties": False,
                           "required": ["code", "severity", "message", "evidence", "fix"],
                           "properties": {"code": {"type": "string"}, "severity": {"enum": list(SEVERITY_ORDER)},
                                          "message": {"type": "string"}, "evidence": evidence,
                                          "fix": {"type": ["string", "null"]}}}
        defs["Check"] = {"type": "object", "additionalProperties": False,
                         "required": ["name", "printed", "recomputed", "agrees", "how", "evidence"],
                         "properties": {"name": {"type": "string"}, "printed": {}, "recomputed": {},
                                        "agrees": {"type": "boolean"}, "how": {"type": "string"}, "evidence": evidence}}
        counts = ("lines", "bytes", "recognised", "request_lines", "unparsed", "cut_lines", "traceback_lines",
                  "skipped_startup_lines")
        defs["LogStats"] = {"type": "object", "additionalProperties": False, "required": [*counts, "seconds"],
                            "properties": {**{k: {"type": "integer"} for k in counts}, "seconds": {"type": "number"}}}
        nullable_int = {"type": ["integer", "null"]}
        row = {"type": "object", "required": ["what", "rank", "observed", "predicted", "delta"],
               "additionalProperties": False,
               "properties": {"what": {"type": "string"}, "rank": nullable_int, "observed": {}, "predicted": {},
                              "delta": {}, "estimated": {"type": ["boolean", "null"]}}}
        return {
            "flags": {"type": "object", "description": "the flags in effect, as the log printed them"},
            "flag_sources": {"type": "object", "additionalProperties": {"type": "string"}},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/Finding"}},
            "checks": {"type": "array", "items": {"$ref": "#/$defs/Check"}},
            "unparsed": {"type": "object", "required": ["count", "samples"], "additionalProperties": False,
                         "properties": {"count": {"type": "integer"}, "samples": evidence}},
            "log": {"$ref": "#/$defs/LogStats"},
            "comparison": {"type": "array", "items": row},
        }

    def to_dict(self) -> dict[str, Any]:
        out = self.timeline.to_dict()
        out["flags"] = {k: _jsonable(v) for k, v in self.flags.items()}
        out["flag_sources"] = dict(self.flag_sources)
        out["findings"] = [f.to_dict() for f in self.findings]
        out["checks"] = [c.to_dict() for c in self.checks]
        out["unparsed"] = {"count": self.stats.unparsed, "samples": list(self.unparsed_samples)}
        out["log"] = self.stats.to_dict()
        if self.comparison:
            out["comparison"] = list(self.comparison)
        return out


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def load_against(path: str) -> Timeline:
    """The timeline of a ``kvscope plan --json`` output (the file, or its ``timeline`` member)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise LogFormatError(f"no such file: {path}", field="--against") from None
    except (OSError, ValueError) as exc:
        raise LogFormatError(f"{path} is not a plan JSON: {exc}", field="--against") from None
    if isinstance(data, dict) and "timeline" in data and isinstance(data["timeline"], dict):
        data = data["timeline"]
    if not isinstance(data, dict) or "ranks" not in data:
        raise LogFormatError(f"{path} is not a `kvscope plan --json` output (no 'ranks')", field="--against")
    try:
        return timeline_from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise LogFormatError(f"{path}: malformed timeline: {exc}", field="--against") from None


TOP_LEVEL_FIGURES = ("kv_cache_tokens", "kv_cache_bytes", "weights_bytes", "max_running_requests", "kv_cell_bytes")
PHASE_FIGURES = ("free_bytes_before", "free_bytes_after", "used_bytes")


def compare(observed: Timeline, predicted: Timeline) -> list[dict[str, Any]]:
    """Phase by phase and figure by figure: observed (log) vs predicted (plan), bytes and delta."""
    rows: list[dict[str, Any]] = []
    for key in TOP_LEVEL_FIGURES:
        o, p = getattr(observed, key), getattr(predicted, key)
        if o is not None or p is not None:
            rows.append({"what": key, "rank": None, "observed": o, "predicted": p,
                         "delta": None if o is None or p is None else o - p})
    pred_ranks = {r.rank: r for r in predicted.ranks}
    fallback = predicted.ranks[0] if predicted.ranks else None
    for r in observed.ranks:
        pr = pred_ranks.get(r.rank, fallback)
        if pr is None:
            continue
        for ph in r.phases:
            pp = pr.phase(ph.name)
            for attr in PHASE_FIGURES:
                o = getattr(ph, attr)
                p = getattr(pp, attr) if pp is not None else None
                if o is None and p is None:
                    continue
                rows.append({"what": f"{ph.name}.{attr}", "rank": r.rank, "observed": o, "predicted": p,
                             "delta": None if o is None or p is None else o - p,
                             "estimated": bool(pp.estimated) if pp is not None else None})
    return rows


def with_comparison(report: DoctorReport, against: Timeline) -> DoctorReport:
    """The report with ``compare`` rows, and a warning when the KV pool differs from the plan by > 2 %."""
    rows = compare(report.timeline, against)
    findings = list(report.findings)
    for row in rows:
        if row["what"] in ("kv_cache_tokens",) and row["delta"] is not None and row["predicted"]:
            rel = row["delta"] / row["predicted"]
            if abs(rel) > 0.02:
                findings.append(Finding(PLAN_DISAGREES, WARNING,
                                        f"the log's KV pool ({row['observed']:,} tokens) differs from the plan "
                                        f"({row['predicted']:,}) by {rel:+.1%}", (), None))
    return DoctorReport(report.timeline, tuple(sort_findings(findings)), report.checks, report.unparsed_samples,
                        report.stats, report.flags, report.flag_sources, tuple(rows))
