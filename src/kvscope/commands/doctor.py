"""``kvscope doctor PATH|-|DIR [--json] [--against plan.json] [--engine E] [--model HF_ID]``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..units import GiB

SEVERITY_MARK = {"error": "ERROR", "warning": "WARN ", "info": "info "}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="explain an SGLang or vLLM startup log: timeline, recomputed figures, findings with fixes",
        description="Read an SGLang or vLLM log (a file, '-' for stdin, or a probe directory), rebuild the "
                    "per-rank startup timeline it printed, recompute the engine's numbers and report findings.",
    )
    p.add_argument("path", metavar="PATH|-|DIR", help="log file (plain or .gz), '-' for stdin, or a probe directory")
    p.add_argument("--json", action="store_true", help="machine-readable output (same timeline schema as plan --json)")
    p.add_argument("--against", metavar="PLAN_JSON", help="compare with a `kvscope plan --json` prediction, phase by phase")
    p.add_argument("--engine", choices=("sglang", "vllm"), help="skip auto-detection")
    p.add_argument("--model", metavar="HF_ID", help="the model, when the log does not name it")
    p.add_argument("--set", metavar="FLAG=VALUE", action="append", default=[],
                   help="a flag the log does not print (e.g. tp_size=4, mem_fraction_static=0.93); the log wins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..doctor import diagnose_path, load_against

    against = load_against(args.against) if args.against else None
    from ..engines.sglang.logs import literal
    from ..errors import FlagError

    assume = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FlagError(f"--set expects FLAG=VALUE, got {item!r}", field="--set")
        assume[key.strip().lstrip("-").replace("-", "_")] = literal(value)
    report = diagnose_path(args.path, engine=args.engine, model=args.model, against=against, assume=assume)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report))
    return 1 if any(f.severity == "error" for f in report.findings) else 0


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GiB:.2f}"


def render_text(report: Any) -> str:
    tl = report.timeline
    x = tl.extra
    out: list[str] = []
    version = tl.engine_version or (f"version inferred from log formats: {x['engine_version_range']}"
                                   if x.get("engine_version_range") else
                                   f"version unknown: the line formats disagree ({x['engine_version_conflict']})"
                                   if x.get("engine_version_conflict") else "version unknown")
    out.append(f"engine   {tl.engine} ({version})")
    out.append(f"model    {tl.model or x.get('model_class') or 'not in log'}")
    shown = {k: v for k, v in report.flags.items() if _is_memory_flag(tl.engine, k)}
    if shown:
        out.append("flags    " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    status = {True: "started (KV cache allocated)", False: "FAILED at KV sizing", None: "unknown (log ends early)"}[tl.starts]
    failed_at = x.get("failed_at")
    if tl.starts is False and failed_at == "init":
        status = "FAILED before loading weights (startup memory check)"
    elif tl.starts is False and failed_at == "engine":
        status = "FAILED (the engine crashed; see the traceback in the log)"
    out.append(f"startup  {status}")
    if tl.kv_cache_tokens is not None:
        out.append(f"KV       {tl.kv_cache_tokens:,} tokens, {_gib(tl.kv_cache_bytes)} GiB per GPU"
                   + (f", max_running_requests {tl.max_running_requests}" if tl.max_running_requests else ""))
    for key, label in (("effective_mem_fraction_static", "effective mem_fraction_static"),
                       ("min_mem_fraction_static", "minimum viable mem_fraction_static"),
                       ("max_concurrency", "max concurrency")):
        if key in x:
            out.append(f"         {label}: {x[key]}")
    out.append("")
    out.append("per-rank timeline (GiB free before → after; figures as printed, %.2f GiB)")
    for group in _identical_rank_groups(tl.ranks):
        r = group[0]
        if len(group) == 1:
            out.append(f"  rank {r.rank} [{r.decision.get('rank_label', r.rank)}]")
        else:
            out.append(f"  ranks {_rank_span([g.rank for g in group])} "
                       f"[{_label_span([str(g.decision.get('rank_label', g.rank)) for g in group])} identical]")
        for ph in r.phases:
            used = ph.used_bytes
            out.append(f"    {ph.name:<18} {_gib(ph.free_bytes_before):>8} → {_gib(ph.free_bytes_after):>8}"
                       f"   used {_gib(used):>7}   {ph.note}")
        if "free_bytes_at_end" in r.decision:
            out.append(f"    {'left free':<18} {_gib(r.decision['free_bytes_at_end']):>8}")
    if report.checks:
        out.append("")
        out.append("recomputed from the log")
        for name, c in _collapsed_checks(report.checks):
            out.append(f"  {'ok  ' if c.agrees else 'DIFF'} {name}: printed {c.printed}, recomputed {c.recomputed}  ({c.how})")
    out.append("")
    out.append("findings" if report.findings else "findings: none")
    for f in report.findings:
        out.append(f"  {SEVERITY_MARK.get(f.severity, f.severity)} [{f.code}] {f.message}")
        for e in f.evidence:
            out.append(f"        {e}")
        if f.fix:
            out.append(f"        fix: {f.fix}")
    if report.comparison:
        out.append("")
        out.append("against the plan (observed − predicted)")
        for row in report.comparison:
            o, p, d = row["observed"], row["predicted"], row["delta"]
            if row["what"].endswith("bytes") or "bytes" in row["what"]:
                out.append(f"  {row['what']:<36} rank {row['rank']!s:<4} log {_gib(o):>8}  plan {_gib(p):>8}  Δ {_gib(d):>8} GiB")
            else:
                out.append(f"  {row['what']:<36} rank {row['rank']!s:<4} log {o!s:>10}  plan {p!s:>10}  Δ {d!s:>8}")
    st = report.stats
    out.append("")
    out.append(f"read {st.lines:,} lines ({st.bytes / 1e6:.1f} MB): {st.recognised:,} understood, "
               f"{st.request_lines:,} request lines, "
               + (f"{st.traceback_lines:,} traceback lines, " if getattr(st, "traceback_lines", 0) else "")
               + f"{st.unparsed:,} memory-looking lines not understood")
    for s in report.unparsed_samples[:10]:
        out.append(f"  ? {s}")
    return "\n".join(out) + "\n"


def _rank_signature(r: Any) -> tuple:
    """What the text shows for a rank, at the printed 2-decimal GiB precision (labels aside)."""
    phases = tuple((ph.name, _gib(ph.free_bytes_before), _gib(ph.free_bytes_after), ph.note) for ph in r.phases)
    return phases, _gib(r.decision.get("free_bytes_at_end"))


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
    import re

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
    import re

    parts = [re.match(r"^(.*?)(\d+)$", lb) for lb in labels]
    if all(parts) and len({p.group(1) for p in parts}) == 1:
        return f"{parts[0].group(1)}{_compress([int(p.group(2)) for p in parts])}"
    return ", ".join(labels)


def _is_memory_flag(engine: str, key: str) -> bool:
    if engine == "sglang":
        from ..engines.sglang.logs import MEMORY_FLAGS
    else:
        from ..engines.vllm.logs import MEMORY_FLAGS
    return key in MEMORY_FLAGS
