"""Text rendering of a ``DoctorReport`` (``kvscope doctor`` without ``--json``)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..doctor import DoctorReport
from ..doctor.outcome import FAILURES
from ..logs.observed import ObservedRecord
from ..record import Loose
from ..engines.sglang.logs import MEMORY_FLAGS as SGLANG_MEMORY_FLAGS
from ..engines.vllm.logs import MEMORY_FLAGS as VLLM_MEMORY_FLAGS
from ..units import GiB

SEVERITY_MARK = {"error": "ERROR", "warning": "WARN ", "info": "info "}


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GiB:.2f}"


def render_doctor(report: DoctorReport) -> str:
    """The text of ``kvscope doctor`` (without ``--json``)."""
    out = _header(report) + [""] + _ranks(report.timeline)
    out += _checks(report) + [""] + _findings(report) + _comparison(report) + [""] + _stats(report)
    return "\n".join(out) + "\n"


def _field(rec: Any, name: str, default: Any = None) -> Any:
    """A figure of a typed record (a log's timeline), or of an open one (a probe directory's)."""
    if isinstance(rec, (Mapping, Loose)):
        return rec.get(name, default)
    value = getattr(rec, name, None)
    return default if value is None else value


def _has(rec: Any, name: str) -> bool:
    if isinstance(rec, ObservedRecord):
        return rec.has(name)
    if isinstance(rec, (Mapping, Loose)):
        return name in rec
    return getattr(rec, name, None) is not None


def _header(report: DoctorReport) -> list[str]:
    tl = report.timeline
    x = tl.extra
    version_range, conflict = _field(x, "engine_version_range"), _field(x, "engine_version_conflict")
    version = tl.engine_version or (f"version inferred from log formats: {version_range}" if version_range else
                                    f"version unknown: the line formats disagree ({conflict})" if conflict else
                                    "version unknown")
    out = [f"engine   {tl.engine} ({version})", f"model    {tl.model or _field(x, 'model_class') or 'not in log'}"]
    shown = {k: v for k, v in report.flags.items() if _is_memory_flag(tl.engine, k)}
    if shown:
        out.append("flags    " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    status = {True: "started (KV cache allocated; the log ends before the server said it was ready)",
              False: "FAILED at KV sizing", None: "unknown (log ends early)"}[tl.starts]
    if tl.starts and _has(x, "serving_seen"):
        status = "started (the log shows it serving)"
    failed_at = _field(x, "failed_at")
    if tl.starts is False and failed_at == "init":
        status = "FAILED before loading weights (startup memory check)"
    elif tl.starts is False and failed_at == "engine":
        status = "FAILED (the engine crashed; see the traceback in the log)"
    elif tl.starts is False and failed_at != "kv_sizing" and (tl.engine, failed_at) in FAILURES:
        status = f"FAILED at {FAILURES[(tl.engine, failed_at)].what}"
    out.append(f"startup  {status}")
    if tl.kv_cache_tokens is not None:
        out.append(f"KV       {tl.kv_cache_tokens:,} tokens, {_gib(tl.kv_cache_bytes)} GiB per GPU"
                   + (f", max_running_requests {tl.max_running_requests}" if tl.max_running_requests else ""))
    for key, label in (("effective_mem_fraction_static", "effective mem_fraction_static"),
                       ("min_mem_fraction_static", "minimum viable mem_fraction_static"),
                       ("max_concurrency", "max concurrency")):
        if _has(x, key):
            out.append(f"         {label}: {_field(x, key)}")
    return out


def _ranks(tl: Any) -> list[str]:
    out = ["per-rank timeline (GiB free before → after; figures as printed, %.2f GiB)"]
    for group in _identical_rank_groups(tl.ranks):
        r = group[0]
        if len(group) == 1:
            out.append(f"  rank {r.rank} [{_field(r.decision, 'rank_label', r.rank)}]")
        else:
            out.append(f"  ranks {_rank_span([g.rank for g in group])} "
                       f"[{_label_span([str(_field(g.decision, 'rank_label', g.rank)) for g in group])} identical]")
        for ph in r.phases:
            out.append(f"    {ph.name:<18} {_gib(ph.free_bytes_before):>8} → {_gib(ph.free_bytes_after):>8}"
                       f"   used {_gib(ph.used_bytes):>7}   {ph.note}")
        if _has(r.decision, "free_bytes_at_end"):
            out.append(f"    {'left free':<18} {_gib(_field(r.decision, 'free_bytes_at_end')):>8}")
    return out


def _checks(report: DoctorReport) -> list[str]:
    if not report.checks:
        return []
    out = ["", "recomputed from the log"]
    for name, c in _collapsed_checks(report.checks):
        out.append(f"  {'ok  ' if c.agrees else 'DIFF'} {name}: printed {c.printed}, recomputed {c.recomputed}  ({c.how})")
    return out


def _findings(report: DoctorReport) -> list[str]:
    out = ["findings" if report.findings else "findings: none"]
    for f in report.findings:
        out.append(f"  {SEVERITY_MARK.get(f.severity, f.severity)} [{f.code}] {f.message}")
        out += [f"        {e}" for e in f.evidence]
        if f.fix:
            out.append(f"        fix: {f.fix}")
    return out


def _comparison(report: DoctorReport) -> list[str]:
    if not report.comparison:
        return []
    out = ["", "against the plan (observed − predicted)"]
    for row in report.comparison:
        o, p, d = row["observed"], row["predicted"], row["delta"]
        if row["what"].endswith("bytes") or "bytes" in row["what"]:
            out.append(f"  {row['what']:<36} rank {row['rank']!s:<4} log {_gib(o):>8}  plan {_gib(p):>8}  Δ {_gib(d):>8} GiB")
        else:
            out.append(f"  {row['what']:<36} rank {row['rank']!s:<4} log {o!s:>10}  plan {p!s:>10}  Δ {d!s:>8}")
    return out


def _stats(report: DoctorReport) -> list[str]:
    st = report.stats
    out = [f"read {st.lines:,} lines ({st.bytes / 1e6:.1f} MB): {st.recognised:,} understood, "
           f"{st.request_lines:,} request lines, "
           + (f"{st.traceback_lines:,} traceback lines, " if st.traceback_lines else "")
           + f"{st.unparsed:,} memory-looking lines not understood"]
    out += [f"  ? {s}" for s in report.unparsed_samples[:10]]
    return out


def _rank_signature(r: Any) -> tuple:
    """What the text shows for a rank, at the printed 2-decimal GiB precision (labels aside)."""
    phases = tuple((ph.name, _gib(ph.free_bytes_before), _gib(ph.free_bytes_after), ph.note) for ph in r.phases)
    return phases, _gib(_field(r.decision, "free_bytes_at_end"))


def _identical_rank_groups(ranks: Any) -> list[list[Any]]:
    """Ranks that printed the same figures, collapsed into one row (``TP0-7 identical``), in order of
    their first rank; ranks without figures are never merged."""
    groups: list[list[Any]] = []
    by_sig: dict[tuple, list[Any]] = {}
    for r in ranks:
        sig = _rank_signature(r)
        if r.phases and sig in by_sig:
            by_sig[sig].append(r)
            continue
        group = [r]
        groups.append(group)
        if r.phases:
            by_sig[sig] = group
    return groups


def _collapsed_checks(checks: Any) -> list[tuple[str, Any]]:
    """Per-rank checks with the same outcome in one row: ``TP0-7 weights mem usage``."""
    rows: list[list[Any]] = []  # [display name parts, check, labels]
    index: dict[tuple, list[Any]] = {}
    for c in checks:
        m = re.match(r"^((?:[A-Z]+\d+ )*[A-Z]+)(\d+) (.+)$", c.name)
        if not m:
            rows.append([c.name, c, None])
            continue
        key = (m.group(1), m.group(3), repr(c.printed), repr(c.recomputed), c.agrees, c.how)
        if key in index:
            index[key][2].append(int(m.group(2)))
            continue
        row = [None, c, [int(m.group(2))], m.group(1), m.group(3)]
        index[key] = row
        rows.append(row)
    out = []
    for row in rows:
        if row[2] is None:
            out.append((row[0], row[1]))
        else:
            out.append((f"{row[3]}{_compress(row[2])} {row[4]}", row[1]))
    return out


def _compress(nums: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out: list[str] = []
    start = prev = nums[0]
    for n in nums[1:] + [None]:  # type: ignore[list-item]
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def _rank_span(ids: list[Any]) -> str:
    if all(isinstance(i, int) for i in ids):
        return _compress(list(ids))
    return ",".join(str(i) for i in ids)


def _label_span(labels: list[str]) -> str:
    """``TP0 … TP7`` -> ``TP0-7``; ``DP0 TP0 … DP0 TP3`` -> ``DP0 TP0-3``; ``TP1, TP3`` -> ``TP1,3``."""
    parts = [re.match(r"^(.*?)(\d+)$", lb) for lb in labels]
    if all(parts) and len({p.group(1) for p in parts}) == 1:
        return f"{parts[0].group(1)}{_compress([int(p.group(2)) for p in parts])}"
    return ", ".join(labels)


def _is_memory_flag(engine: str, key: str) -> bool:
    return key in (SGLANG_MEMORY_FLAGS if engine == "sglang" else VLLM_MEMORY_FLAGS)
