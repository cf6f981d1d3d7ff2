"""Probe records -> the shared ``Timeline`` (source="probe"), so plan, log and probe compare.

Phase free bytes come from ``torch.cuda.mem_get_info()`` at the hooked call's entry and return
when the agent could read it (CUDA initialised); otherwise from the engine's own local
measurements inside that call (SGLang ``get_available_gpu_memory`` without ``distributed``,
vLLM ``MemorySnapshot.measure``), noted in ``Phase.note``. The decision record is the formula's
named inputs and outputs as the engine computed them (engine units kept in ``*_gib`` keys,
converted into ``*_bytes`` keys).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

from kvscope.probe.records import (
    ProcessRecords,
    attachment_report,
    load_probe_dir,
    targets_for_dir,
)
from kvscope.record import Loose
from kvscope.timeline import (
    PHASE_LOAD_DRAFT,
    PHASE_LOAD_WEIGHTS,
    PHASE_ORDER,
    Phase,
    RankTimeline,
    Timeline,
)

GIB = 1 << 30
# Targets that measure rather than decide: not merged into the decision record.
_MEASURING = {"get_available_gpu_memory", "MemorySnapshot.measure", "MHATokenToKVPool",
              "MLATokenToKVPool", "ReqToTokenPool", "run_scheduler_process"}


def timeline_from_probe_dir(path: str) -> Timeline:
    """Read a ``kvscope probe --out`` directory and return its measured Timeline."""
    procs = load_probe_dir(path)
    live = [r for p in procs for r in p.events("live")]
    engine_procs = [p for p in procs if p.events("call")]
    report = attachment_report(procs, targets_for_dir(path))
    engine = report.engine or (live[0].get("engine") if live else None) or "unknown"
    rows, shared = _rank_rows(engine_procs)
    model = next((m for m in (_first_input(p, ("model_path", "model")) for p in engine_procs)
                  if m), None)
    errors = [e for p in engine_procs for e in _start_errors(p)]
    # The probe records whatever the engine's functions received: an open key set.
    ranks = tuple(RankTimeline(rank=i, phases=ph, decision=Loose(d)) for i, ph, d in rows)
    first = dict(rows[0][2]) if rows else dict(shared)
    for r in live:
        for k, v in (r.get("outputs") or {}).items():
            first.setdefault(k, v)
        model = model or (r.get("inputs") or {}).get("model")
    tokens = first.get("max_total_num_tokens")
    if tokens is None and isinstance(first.get("kv_cache_size_tokens"), int):  # vLLM 0.32+ /metrics
        tokens = first["kv_cache_size_tokens"]
    if tokens is None and first.get("num_gpu_blocks") is not None and first.get("block_size"):
        tokens = first["num_gpu_blocks"] * first["block_size"]
    if isinstance(tokens, list):
        tokens = None
    weights = first.get("weight_load_mem_usage_bytes", first.get("weights_memory_bytes"))
    extra: dict[str, Any] = {"probe": report.to_dict()}
    for key in ("mem_fraction_static", "gpu_memory_utilization", "num_gpu_blocks",
                "available_kv_cache_memory_bytes", "cudagraph_memory_estimate_bytes", "block_size",
                "max_concurrency", "kv_cache_memory_bytes", "cpu_total_memory_bytes"):
        if first.get(key) is not None:
            extra[key] = first[key]
    if "available_kv_cache_memory_bytes" in extra:
        extra["available_kv_cache_bytes"] = extra["available_kv_cache_memory_bytes"]
    if live:
        extra["live"] = [dict(r) for r in live]
    if _starts(engine_procs, errors):  # a process recorded the end of its startup: it was serving
        extra["serving_seen"] = True
    warnings = [f"probe target not found: {why}" for why in report.not_found.values()]
    warnings += [f"{p.label}: agent error (engine unaffected): {e}"
                 for p in report.processes for e in p.agent_errors]
    warnings += [f"{p.path}: {p.bad_lines} unreadable line(s) (process died mid-write?)"
                 for p in procs if p.bad_lines]
    return Timeline(
        source="probe",
        engine=engine,
        engine_version=report.engine_version or (live[0].get("engine_version") if live else None),
        model=model,
        gpu=None,
        starts=_starts(engine_procs, errors),
        error=errors[0] if errors else None,
        kv_cache_tokens=tokens,
        max_running_requests=first.get("max_running_requests"),
        kv_cell_bytes=first.get("cell_size_bytes"),
        kv_cache_bytes=_kv_cache_bytes(first),
        weights_bytes=weights,
        ranks=ranks,
        extra=Loose(extra),
        warnings=tuple(warnings),
    )


_Row = Tuple[int, Tuple[Phase, ...], Dict[str, Any]]
# Records that end a process's startup (the hook tables' ``end_of_startup`` targets).
_END_CALLS = ("event_loop_normal", "event_loop_overlap", "run_busy_loop")
_END_RETURNS = ("compile_or_warm_up_model",)
# Exceptions that end a process rather than fail its start (a server stopped by a signal).
_SHUTDOWN = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")


def _start_errors(p: ProcessRecords) -> list[str]:
    """The engine's exception texts raised during the start: none after the process started
    serving (a busy loop ended by shutdown), none for an interpreter exit."""
    end = min((r.get("seq", 0) for r in p.records
               if (r.get("event") == "call" and r.get("target") in _END_CALLS)
               or (r.get("event") == "return" and r.get("target") in _END_RETURNS)),
              default=None)
    return [r["exc"] for r in p.events("raise")
            if r.get("exc") and r.get("exc_type") not in _SHUTDOWN
            and (end is None or r.get("seq", 0) < end)]


def _kv_cache_bytes(decision: Mapping[str, Any]) -> int | None:
    """The KV cache allocation: vLLM's ``KVCacheTensor.size`` summed (one rank's tensors)."""
    sizes = decision.get("kv_cache_tensor_bytes")
    if isinstance(sizes, list) and sizes and all(isinstance(x, int) for x in sizes):
        return sum(sizes)
    return None


def _rank_rows(engine_procs: list[ProcessRecords]) -> tuple[list[_Row], dict[str, Any]]:
    """One (rank, phases, decision) row per ranked process, sorted by rank, plus what the
    unranked processes decided (e.g. the vLLM EngineCore's ``get_kv_cache_configs``), which
    every rank's decision also gets where it has no value of its own."""
    rows: list[_Row] = []
    shared: dict[str, Any] = {}
    for p in engine_procs:
        decision, draft = _decision(p)
        if not p.rank:
            for k, v in decision.items():
                shared.setdefault(k, v)
            continue
        if draft:
            decision["draft"] = draft
        decision["pid"] = p.pid
        decision["rank_label"] = p.label
        decision.update({k: v for k, v in p.rank.items() if k not in decision})
        rows.append((_rank_index(p.rank, len(rows)), _phases(p), decision))
    for _, _, decision in rows:
        for k, v in shared.items():
            decision.setdefault(k, v)
    rows.sort(key=lambda row: row[0])
    return rows, shared


def _rank_index(rank: Mapping[str, Any], fallback: int) -> int:
    if rank.get("rank") is not None:
        return int(rank["rank"])
    if rank.get("tp_rank") is not None:
        tp, pp = int(rank["tp_rank"]), int(rank.get("pp_rank") or 0)
        return pp * int(rank.get("tp_size") or 1) + tp + int(rank.get("dp_rank") or 0) * int(
            rank.get("tp_size") or 1) * int(rank.get("pp_size") or 1)
    if rank.get("RANK") is not None:
        return int(rank["RANK"])
    return fallback


def _pairs(p: ProcessRecords) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    ends = {r["call_id"]: r for r in p.events("return", "raise")}
    return [(c, ends.get(c["call_id"])) for c in p.events("call")]


def _is_draft(call: Mapping[str, Any]) -> bool:
    return bool((call.get("inputs") or {}).get("is_draft_worker"))


def _decision(p: ProcessRecords) -> tuple[dict[str, Any], dict[str, Any]]:
    target: dict[str, Any] = {}
    draft: dict[str, Any] = {}
    for call, end in _pairs(p):
        if call["target"] in _MEASURING:
            continue
        dest = draft if _is_draft(call) else target
        values: dict[str, Any] = {}
        values.update(call.get("inputs") or {})
        if end is not None:
            values.update(end.get("outputs") or {})
            values.update(end.get("locals") or {})
            if end.get("event") == "raise" and end.get("exc_type") not in _SHUTDOWN \
                    and call["target"] not in _END_CALLS:
                dest.setdefault("error", end.get("exc"))
                dest.setdefault("error_type", end.get("exc_type"))
        if call["target"] == "profile_max_num_token" and "max_total_num_tokens" in values:
            values["profiled_max_total_num_tokens"] = values.pop("max_total_num_tokens")
        for k, v in values.items():
            if v is None or k == "is_draft_worker":
                continue
            if k.endswith("_v14"):
                k = k[: -len("_v14")]
            dest[k] = v  # later calls refine earlier ones (final token count after caps)
    for d in (target, draft):
        _derive(d)
    return target, draft


def _derive(d: dict[str, Any]) -> None:
    for key in list(d):
        if key.endswith("_gib") and isinstance(d[key], (int, float)):
            d.setdefault(key[: -len("_gib")] + "_bytes", int(round(d[key] * GIB)))
    pre, mfs = d.get("pre_model_load_memory_gib"), d.get("mem_fraction_static")
    if isinstance(pre, (int, float)) and isinstance(mfs, (int, float)) and "slack_gib" not in d:
        d["slack_bytes"] = int(round(pre * (1 - mfs) * GIB))
        d["slack_source"] = "computed: pre_model_load_memory * (1 - mem_fraction_static)"
    if "available_bytes" not in d and isinstance(d.get("rest_memory_gib"), (int, float)):
        d["available_bytes"] = int(d["rest_memory_gib"] * GIB)
    if isinstance(pre, (int, float)) and pre > 0 and isinstance(
            d.get("available_gpu_memory_gib"), (int, float)):
        d["min_mem_fraction_static"] = 1 - d["available_gpu_memory_gib"] / pre


def _first_input(p: ProcessRecords, names: tuple[str, ...]) -> Any:
    for r in p.events("call"):
        for n in names:
            v = (r.get("inputs") or {}).get(n)
            if v:
                return v
    return None


def _phases(p: ProcessRecords) -> tuple[Phase, ...]:
    pairs = _pairs(p)
    by_seq = sorted(p.records, key=lambda r: r.get("seq", 0))
    out = []
    for name in PHASE_ORDER:
        chosen = None
        for call, end in pairs:
            phase = call.get("phase")
            if not call.get("phase_own"):
                continue
            if name == PHASE_LOAD_DRAFT and phase == PHASE_LOAD_WEIGHTS and _is_draft(call):
                chosen = (call, end)
                break
            if phase == name and not (name == PHASE_LOAD_WEIGHTS and _is_draft(call)):
                chosen = (call, end)
                break
        if chosen is None:
            continue
        out.append(_phase(name, chosen[0], chosen[1], by_seq))
    return tuple(out)


def _phase(name: str, call: Mapping[str, Any], end: Mapping[str, Any] | None,
           by_seq: list[Mapping[str, Any]]) -> Phase:
    m0, m1 = call.get("mem"), (end or {}).get("mem")
    if end is None:  # the process died (or is still) inside this call: keep what is known
        return Phase(name, (m0 or {}).get("free_bytes"), None,
                     note=f"{call['target']}: no return record (the process died or is still in it)")
    if m0 and m1:
        return Phase(name, m0.get("free_bytes"), m1.get("free_bytes"),
                     note=f"torch.cuda.mem_get_info around {call['target']}")
    lo, hi = call.get("seq", 0), (end or {}).get("seq", 1 << 62)
    inner = []
    calls = {r.get("call_id"): r for r in by_seq if r.get("event") == "call"}
    for r in by_seq:
        if not (lo < r.get("seq", 0) < hi) or r.get("event") != "return":
            continue
        if (calls.get(r.get("call_id"), {}).get("inputs") or {}).get("distributed"):
            continue
        out = r.get("outputs") or {}
        if r.get("target") == "get_available_gpu_memory" and isinstance(out.get("free_gib"),
                                                                          (int, float)):
            inner.append(int(out["free_gib"] * GIB))
        elif r.get("target") == "MemorySnapshot.measure" and out.get("free_bytes") is not None:
            inner.append(int(out["free_bytes"]))
    # only local measurements count: a distributed one is the MIN over ranks, not this GPU
    if inner:
        before = inner[0] if len(inner) > 1 else None
        return Phase(name, before, inner[-1],
                     note=f"engine's own local measurements inside {call['target']}")
    return Phase(name, None, None, note=f"{call['target']}: no memory figure")


def _starts(procs: list[ProcessRecords], errors: list[str]) -> bool | None:
    if errors:
        return False
    if any(r.get("target") in (*_END_CALLS, *_END_RETURNS)
           for p in procs for r in p.events("call")):
        return True
    return None


__all__ = ["timeline_from_probe_dir"]
