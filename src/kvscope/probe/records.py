"""Read a probe directory (one JSONL file per process) and say which hooks attached and fired.

Lenient like the log parsers: a truncated last line (a rank killed mid-write) is skipped and
counted, never fatal.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kvscope.errors import KvscopeError
from kvscope.validate import probe_record_ok
from kvscope.probe.targets import Target, all_targets, targets_from_json, version_matches


@dataclass(frozen=True)
class ProcessRecords:
    """Every record one process wrote, in order."""

    path: str
    pid: int | None
    records: tuple[Mapping[str, Any], ...]
    bad_lines: int = 0

    @property
    def rank(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for r in self.records:
            out.update(r.get("rank") or {})
        return out

    @property
    def engine(self) -> str | None:
        for r in self.records:
            if r.get("engine"):
                return r["engine"]
        return None

    @property
    def engine_version(self) -> str | None:
        for r in self.records:
            if r.get("engine_version"):
                return r["engine_version"]
        return None

    def events(self, *names: str) -> list[Mapping[str, Any]]:
        return [r for r in self.records if r.get("event") in names]

    @property
    def label(self) -> str:
        return rank_label(self.rank, self.pid)


def rank_label(rank: Mapping[str, Any], pid: int | None = None) -> str:
    parts = []
    for key, tag in (("dp_rank", "DP"), ("pp_rank", "PP"), ("tp_rank", "TP")):
        if rank.get(key) is not None and not (key != "tp_rank" and rank.get(key) == 0):
            parts.append(f"{tag}{rank[key]}")
    if not parts and rank.get("rank") is not None:
        parts.append(f"rank{rank['rank']}")
    if not parts and rank.get("RANK") is not None:
        parts.append(f"rank{rank['RANK']}")
    return " ".join(parts) if parts else f"pid {pid}"


def load_probe_dir(path: str) -> list[ProcessRecords]:
    """All ``*.jsonl`` files under ``path`` (probe-*.jsonl and live-*.jsonl), sorted by name."""
    if not os.path.isdir(path):
        raise KvscopeError(f"{path} is not a directory", field="probe dir",
                           fix="pass the --out directory of a `kvscope probe` run")
    out = []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".jsonl"):
            continue
        recs, bad = [], 0
        with open(os.path.join(path, name), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    bad += 1
                    continue
                if probe_record_ok(rec):  # an object with the fields' kinds (validate.PROBE_RECORD_RULES)
                    recs.append(rec)
                else:
                    bad += 1
        pid = next((r.get("pid") for r in recs if r.get("pid") is not None), None)
        out.append(ProcessRecords(os.path.join(path, name), pid, tuple(recs), bad))
    return out


@dataclass(frozen=True)
class ProcessAttachment:
    label: str
    pid: int | None
    attached: tuple[str, ...]  # target ids
    fired: Mapping[str, int]  # target id -> calls
    missing: Mapping[str, str]  # target id -> reason
    agent_errors: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "pid": self.pid, "attached": list(self.attached),
                "fired": dict(self.fired), "missing": dict(self.missing),
                "agent_errors": list(self.agent_errors)}


@dataclass(frozen=True)
class AttachmentReport:
    """Verified attachment: per process what attached and fired; per target what was never found."""

    engine: str | None
    engine_version: str | None
    processes: tuple[ProcessAttachment, ...]
    not_found: Mapping[str, str] = field(default_factory=dict)  # target id -> why
    never_fired: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.not_found

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "engine_version": self.engine_version, "ok": self.ok,
                "processes": [p.to_dict() for p in self.processes],
                "not_found": dict(self.not_found), "never_fired": list(self.never_fired)}


def attachment_report(processes: Iterable[ProcessRecords],
                      targets: Iterable[Target] | None = None) -> AttachmentReport:
    procs = [p for p in processes if p.events("attach", "missing", "call")]
    targets = tuple(all_targets() if targets is None else targets)
    engine = next((p.engine for p in procs if p.engine), None)
    version = next((p.engine_version for p in procs if p.engine_version), None)
    rows = []
    attached_any: set[str] = set()
    missing_any: dict[str, str] = {}
    fired_any: set[str] = set()
    for p in procs:
        attached = [r["target"] for r in p.events("attach")]
        for r in p.events("process"):
            attached.extend(r.get("inherited_attached", ()))
        fired: dict[str, int] = {}
        for r in p.events("call"):
            fired[r["target"]] = fired.get(r["target"], 0) + 1
        missing = {r["target"]: r.get("reason", "") for r in p.events("missing")
                   if r.get("required", True)}
        errors = tuple(f"{r.get('where')}: {r.get('error')}" for r in p.events("agent_error"))
        attached_any.update(attached)
        fired_any.update(fired)
        missing_any.update(missing)
        rows.append(ProcessAttachment(p.label, p.pid, tuple(dict.fromkeys(attached)), fired,
                                      missing, errors))
    not_found: dict[str, str] = {}
    applicable = [t for t in targets if t.engine == engine and version_matches(version, t.versions)]
    for t in applicable:
        if t.id in attached_any or not t.required:
            continue
        why = missing_any.get(t.id) or f"module {t.module} was never imported by any process"
        not_found[t.id] = f"{t.module}:{t.qualname} ({why}) in {engine} {version or '?'}"
    never_fired = tuple(sorted({t.id for t in applicable if t.id in attached_any}
                               - fired_any))
    return AttachmentReport(engine, version, tuple(rows), not_found, never_fired)


def targets_for_dir(path: str) -> tuple[Target, ...]:
    """The targets a run used (its ``targets.json``); the current tables when absent."""
    tpath = os.path.join(path, "targets.json")
    if os.path.exists(tpath):
        with open(tpath, encoding="utf-8") as fh:
            return targets_from_json(json.load(fh))
    return all_targets()


def report_for_dir(path: str) -> AttachmentReport:
    return attachment_report(load_probe_dir(path), targets_for_dir(path))
