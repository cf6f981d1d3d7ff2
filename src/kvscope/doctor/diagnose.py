"""``kvscope doctor``: read an SGLang or vLLM log once, rebuild the startup timeline it printed,
recompute the engine's numbers from it, and say what went wrong and how to fix it.

The stages: ``scan`` (both grammars, one pass) → pick the engine → the flags as observed →
``analyze_sglang`` / ``analyze_vllm`` (+ the catalog model's engine check) → the findings about the
log itself → the observed timeline (``engines/*/logs.py::rank_timelines``) → ``DoctorReport``.
"""

from __future__ import annotations

import io
import os
import re
from typing import IO, Any


from ..catalog import list_models
from ..engines.sglang import logs as sglang_logs
from ..engines.vllm import logs as vllm_logs
from ..errors import LogFormatError
from ..timeline import RankTimeline, Timeline
from .findings import NO_MEMORY_LINES, WARNING, Analysis, sort_findings
from .report import LOG_EXTRA, DoctorReport, with_comparison
from .rules_common import log_findings
from .scan import MAX_LOG_BYTES, LogStats, Scan, iter_lines, open_log, pick_engine, read_blocks, scan
from .sglang_rules import SglangFlags, analyze_sglang, cell_bytes_for, representative_release
from .vllm_rules import VllmObservedFlags, analyze_vllm, probe_dir_findings, vllm_model_checks

ENGINES = ("sglang", "vllm")


def diagnose_text(text: str, **kwargs: Any) -> DoctorReport:
    """Convenience for tests and the Python API: a log given as a string."""
    return diagnose_stream(io.BytesIO(text.encode("utf-8")), name="log", **kwargs)


def diagnose_path(path: str, **kwargs: Any) -> DoctorReport:
    """A log file (plain or gzip), ``-`` for stdin, or a probe directory."""
    if path != "-" and os.path.isdir(path):
        return diagnose_probe_dir(path, **kwargs)
    stream = open_log(path)
    try:
        return diagnose_stream(stream, name="stdin" if path == "-" else path, **kwargs)
    finally:
        if path != "-":
            stream.close()


def diagnose_stream(stream: IO[bytes], *, name: str = "log", engine: str | None = None,
                    model: str | None = None, against: Timeline | None = None,
                    assume: dict[str, Any] | None = None, max_bytes: int = MAX_LOG_BYTES) -> DoctorReport:
    """``assume``: flags the user knows but the log does not print (``{"tp_size": 4}``); the log wins.
    ``max_bytes``: the largest log read (decompressed); a larger one is refused."""
    s = scan(iter_lines(read_blocks(stream, name, max_bytes), name))
    if s.stats.lines == 0:
        raise LogFormatError(f"{name} is empty", field="PATH")
    if engine is None:
        engine = pick_engine(s, name)
    if engine not in ENGINES:
        raise LogFormatError(f"unknown engine {engine!r}", field="--engine", fix="use sglang or vllm")
    if engine == "sglang":
        report = _report_sglang(_assumed_sglang(s.sglang.result(), assume or {}), s, model)
    else:
        report = _report_vllm(_assumed_vllm(s.vllm.result(), assume or {}), s, model)
    return with_comparison(report, against) if against is not None else report


def _assumed_sglang(log: sglang_logs.SglangLog, assume: dict[str, Any]) -> sglang_logs.SglangLog:
    for k, v in assume.items():
        if k not in log.launch_flags and k not in log.server_args:
            log.launch_flags[k] = v
            log.assumed.add(k)
    return log


def _assumed_vllm(log: vllm_logs.VllmLog, assume: dict[str, Any]) -> vllm_logs.VllmLog:
    for k, v in assume.items():
        if k not in log.launch_flags and k not in log.non_default_args and k not in log.engine_config:
            log.launch_flags[k] = v
            log.assumed.add(k)
    return log


def _report_sglang(log: sglang_logs.SglangLog, s: Scan, model: str | None) -> DoctorReport:
    flags, sources = sglang_logs.effective_flags(log)
    observed = SglangFlags.build(flags, sources)
    model_name = model_from(flags, model)
    catalog = catalog_id_for(model_name)
    cell = cell_bytes_for(catalog or model_name, observed, log)
    an = analyze_sglang(log, observed, cell_bytes=cell, version=log.version_printed or representative_release(log))
    version, vextra = observed_version(log.version_printed, sglang_logs.version_specifier(log.version_markers))
    log_findings(an, s, log.starts_seen)
    if log.is_empty:
        an.add(NO_MEMORY_LINES, WARNING, "no SGLang memory lines found", (), None)
    if model_name is None:
        cls = next((ld.model_class for r in log.ranks.values() for ld in r.loads if ld.model_class), None)
        if cls:
            an.extra["model_class"] = cls
    ranks = sglang_logs.rank_timelines(log)
    _serving(an, log.events, s)
    return _build("sglang", version, vextra, model_name, an, ranks, flags, sources, s)


def _report_vllm(log: vllm_logs.VllmLog, s: Scan, model: str | None) -> DoctorReport:
    flags, sources = vllm_logs.effective_flags(log)
    observed = VllmObservedFlags.build(flags, sources)
    model_name = model_from(flags, model)
    spec = vllm_logs.version_specifier(log.version_markers)
    an = analyze_vllm(log, observed, log.version_printed, spec)
    catalog = catalog_id_for(model_name)
    vllm_model_checks(an, log, observed, catalog or model_name, log.version_printed, spec)
    version, vextra = observed_version(log.version_printed, spec)
    log_findings(an, s, log.starts_seen)
    if log.is_empty:
        an.add(NO_MEMORY_LINES, WARNING, "no vLLM memory lines found: nothing to check", tuple(s.samples[:3]), None)
    ranks = vllm_logs.rank_timelines(log)
    _serving(an, log.events, s)
    return _build("vllm", version, vextra, model_name, an, ranks, flags, sources, s)


def _serving(an: Analysis, events: dict[str, Any], s: Scan) -> None:
    """A start the log shows serving: its ready line, or request traffic after the figures."""
    if an.starts and (events.get("server_ready") or s.stats.request_lines):
        an.extra["serving_seen"] = True


def observed_version(printed: str | None, spec: str) -> tuple[str | None, dict[str, Any]]:
    """The version the log printed, else the range its line formats imply (or that they disagree)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only for logs without a printed version
    from packaging.version import Version

    extra: dict[str, Any] = {}
    if printed:
        return printed, {"engine_version_source": "printed"}
    if spec:
        try:
            s = SpecifierSet(spec)
        except InvalidSpecifier:
            return None, extra
        # a range no release satisfies (an edited or mixed log): say so instead of reporting it
        grid = [Version(f"0.{minor}.{patch}") for minor in range(1, 40) for patch in range(0, 30)]
        if any(v in s for v in grid):
            extra["engine_version_range"] = spec
            extra["engine_version_source"] = "inferred from log line formats"
        else:
            extra["engine_version_conflict"] = spec
            extra["engine_version_source"] = "log line formats disagree (edited or mixed log)"
    return None, extra


def catalog_id_for(model: str | None) -> str | None:
    """The bundled catalog id a log's model refers to: the id itself, or a local directory whose name is
    exactly one catalog model's name (``/path/to/Qwen3-14B`` -> ``Qwen/Qwen3-14B``; the HF cache form
    ``models--Qwen--Qwen3-14B`` too). ``None`` when unknown or ambiguous."""
    if not model:
        return None
    ids = list_models()
    lower = {i.lower(): i for i in ids}
    ref = model.strip().rstrip("/")
    if ref.lower() in lower:
        return lower[ref.lower()]
    base = ref.replace("\\", "/").split("/")[-1]
    m = re.match(r"models--([^/]+?)--(.+)$", base)
    if m and f"{m.group(1)}/{m.group(2)}".lower() in lower:
        return lower[f"{m.group(1)}/{m.group(2)}".lower()]
    hits = [i for i in ids if i.split("/")[-1].lower() == base.lower()]
    return hits[0] if len(hits) == 1 else None


def model_from(flags: dict[str, Any], model: str | None) -> str | None:
    """``--model``, else the model the log names (ServerArgs ``model_path``, vLLM ``model``)."""
    if model:
        return model
    for key in ("model_path", "model", "served_model_name"):
        v = flags.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def _build(engine: str, version: str | None, vextra: dict[str, Any], model: str | None, an: Analysis,
           ranks: list[RankTimeline], flags: dict[str, Any], sources: dict[str, str], s: Scan) -> DoctorReport:
    extra = dict(vextra)
    catalog = catalog_id_for(model)
    if catalog and catalog != model:
        extra["model_catalog_id"] = catalog  # the local directory's name matched this bundled model (assumed)
    extra.update(an.extra)
    estimated = tuple(k for k in ("kv_cell_bytes_estimated",) if k in extra)
    tl = Timeline(
        source="log", engine=engine, engine_version=version, model=model, gpu=None,
        starts=an.starts, error=an.error, kv_cache_tokens=an.kv_cache_tokens,
        max_running_requests=an.max_running_requests, kv_cell_bytes=an.kv_cell_bytes,
        kv_cache_bytes=an.kv_cache_bytes, weights_bytes=an.weights_bytes, ranks=tuple(ranks),
        fix=tuple(an.fix), extra=LOG_EXTRA[engine].from_items(extra.items()), estimated=estimated,
    )
    return DoctorReport(tl, tuple(sort_findings(an.findings)), tuple(an.checks), tuple(s.samples), s.stats,
                        flags=flags, flag_sources=sources)


def diagnose_probe_dir(path: str, *, against: Timeline | None = None, **_: Any) -> DoctorReport:
    """A ``kvscope probe`` output directory: its measured timeline, optionally against a plan."""
    from ..probe.timeline import timeline_from_probe_dir  # only for a probe directory

    tl = timeline_from_probe_dir(path)
    report = DoctorReport(tl, tuple(sort_findings(probe_dir_findings(tl))), (), (), LogStats(0, 0, 0, 0, 0, 0, 0.0))
    return with_comparison(report, against) if against is not None else report
