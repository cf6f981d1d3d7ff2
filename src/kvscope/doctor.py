"""``kvscope doctor``: read an SGLang or vLLM log once, rebuild the startup timeline it printed,
recompute the engine's numbers from it, and say what went wrong and how to fix it.

Streaming and bounded: the log is read line by line as bytes (``MAX_LINE_BYTES`` per line at most),
each line is tested against one combined trigger pattern, and only matching lines are decoded and
parsed. What is kept does not grow with the log: per-rank figures, a few evidence lines per kind of
event, and at most ``MAX_UNPARSED_SAMPLES`` lines it did not understand.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Iterator

from .engines.sglang import logs as sglang_logs
from .engines.vllm import logs as vllm_logs
from .errors import LogFormatError
from .findings import (
    INFO,
    NO_MEMORY_LINES,
    RESTARTS,
    UNPARSED_LINES,
    WARNING,
    Analysis,
    Check,
    Finding,
    analyze_sglang,
    analyze_vllm,
    sort_findings,
    vllm_model_checks,
)
from .timeline import Fix, Timeline, timeline_from_dict

MAX_LINE_BYTES = 1 << 20  # a longer line is cut here (and counted); the rest of it is skipped
MAX_UNPARSED_SAMPLES = 20
SNIFF_BYTES = 8192
ENGINES = ("sglang", "vllm")

TRIGGER = re.compile(
    (sglang_logs.TRIGGER_RE.pattern + "|" + vllm_logs.TRIGGER_RE.pattern).encode("utf-8"))
# Lines about serving traffic: recognised, counted, not memory figures.
REQUEST_LINE = re.compile(
    rb"Prefill batch|Decode batch|Avg prompt throughput|\"(?:GET|POST) /|HTTP/1\.[01]\" \d{3}|"
    rb"Received request|Finished request|Added request|Aborted request|Engine \d{3}:(?! vllm cache_config_info)")
# Python tracebacks: the header, the frames and the indented source lines (after any log prefix) are
# counted apart; the exception line that ends a traceback is not indented, so it is read as usual.
TB_START = re.compile(rb"Traceback \(most recent call last\)")
TB_FRAME = re.compile(rb'File "[^"\n]{1,400}", line \d+')
TB_BODY = re.compile(rb'^(?:[^"\n]{0,160}?[\])] )?\s{2,}\S|^[^\w\n]{0,160}?[\^~]{3,}\s*$')
# A line we did not understand is reported only if it looks memory-related, or is a warning or an error.
MEMORYISH = re.compile(
    rb"(?i)\bmem(?:ory)?\b|\bGiB\b|\d\s?GB\b|\bKV\b|\bOOM\b|out of memory|cuda ?graph|#tokens|"
    rb"\bError\b|\bERROR\b|\bWARNING\b|Traceback|mem_fraction|gpu_memory_utilization|page.size")


# Literal anchors: every trigger phrase of both grammars contains one of them. ``x in line`` is a C
# memmem, far cheaper than the trigger regex (whose ~90 branches defeat sre's first-character
# skip), so the regex runs only on lines that hold an anchor. Keep in sync with the TRIGGER_REs
# (tests/doctor/test_fuzz.py checks every recognised seed line passes the anchors).
TRIGGER_ANCHORS = (
    b"mem", b"Mem", b"KV", b"Load weight", b"took", b"max_total_", b"server_args=", b"sglang", b"vllm", b"vLLM",
    b"llreduce", b"fired up", b"was reduced", b"Scheduler hit", b"Mamba", b"concurrency", b"blocks: ",
    b"CUDA graph", b"max seq len", b"To serve", b"uto-fit", b"non-default", b"LLM engine", b"startup complete",
    b"kv_cache_tokens", b"num_gpu_blocks", b"platform", b"block size", b"Preemption", b"Init ", b"model weights take",
    b"cuda graph", b"failed to start", b"to load model", b"Cudagraph is", b"died, exit code", b"device_name=",
    b"page_size from", b"Capturing ", b"num tokens (", b"on startup.",
)
MEMORYISH_ANCHORS = (b"mem", b"Mem", b"MEM", b"GiB", b"GB", b"KV", b"OOM", b"graph", b"Error", b"ERROR", b"WARN",
                     b"Traceback", b"page", b"gpu_memory")


def _any_in(anchors: tuple[bytes, ...]) -> Any:
    """``lambda line: a1 in line or a2 in line or …`` built once: 3-4× faster than ``any(...)``."""
    body = " or ".join(f"{a!r} in line" for a in anchors)
    namespace: dict[str, Any] = {}
    exec(f"def hit(line):\n    return {body}\n", namespace)  # noqa: S102 - literals generated above
    return namespace["hit"]


has_trigger_anchor = _any_in(TRIGGER_ANCHORS)
has_memoryish_anchor = _any_in(MEMORYISH_ANCHORS)


@dataclass(frozen=True)
class LogStats:
    lines: int
    bytes: int
    recognised: int
    request_lines: int
    unparsed: int
    cut_lines: int
    seconds: float
    traceback_lines: int = 0  # frames and code lines of Python tracebacks (the exception line itself is read)

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "bytes": self.bytes, "recognised": self.recognised,
                "request_lines": self.request_lines, "unparsed": self.unparsed, "cut_lines": self.cut_lines,
                "traceback_lines": self.traceback_lines, "seconds": round(self.seconds, 3)}


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


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def open_log(path: str) -> IO[bytes]:
    """A binary stream for ``path`` (``-`` = stdin); gzip is unpacked on the fly."""
    if path == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
        except FileNotFoundError:
            raise LogFormatError(f"no such file: {path}", field="PATH") from None
        except IsADirectoryError:
            raise LogFormatError(f"{path} is a directory", field="PATH") from None
        except OSError as exc:
            raise LogFormatError(f"cannot read {path}: {exc.strerror}", field="PATH") from None
    return ungzip(raw)


def ungzip(raw: IO[bytes]) -> IO[bytes]:
    """The stream itself, or its gzip-decompressed view when it starts with the gzip magic."""
    buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[arg-type]
    head = buffered.peek(2)[:2]  # type: ignore[attr-defined]
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=buffered)  # type: ignore[return-value]
    return buffered  # type: ignore[return-value]


def iter_lines(stream: IO[bytes], name: str = "log") -> Iterator[tuple[bytes, bool]]:
    """Yield (line, was_cut). Reads ``MAX_LINE_BYTES`` per line at most; refuses binary input."""
    first = True
    while True:
        try:
            line = stream.readline(MAX_LINE_BYTES)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise LogFormatError(f"{name}: cannot read: {exc}", field="PATH") from None
        if not line:
            return
        if first:
            first = False
            if b"\x00" in line[:SNIFF_BYTES]:
                raise LogFormatError(f"{name} is a binary file, not a text log", field="PATH")
        cut = False
        if len(line) >= MAX_LINE_BYTES and not line.endswith(b"\n"):
            cut = True
            while True:  # skip the rest of an over-long line, in bounded chunks
                rest = stream.readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line, cut


@dataclass
class _Scan:
    sglang: sglang_logs.SglangLogParser
    vllm: vllm_logs.VllmLogParser
    stats: LogStats
    samples: list[str]


def scan(lines: Iterable[tuple[bytes, bool]]) -> _Scan:
    """Feed every line to both grammars (cheap: one trigger search per line)."""
    sg, vl = sglang_logs.SglangLogParser(), vllm_logs.VllmLogParser()
    n = nbytes = recognised = requests = unparsed = cut = tb_lines = 0
    in_tb = False
    samples: list[str] = []
    t0 = time.perf_counter()
    for n, (raw, was_cut) in enumerate(lines, 1):
        nbytes += len(raw)
        cut += was_cut
        if REQUEST_LINE.search(raw):  # first: the bulk of a long log, and never a startup line
            requests += 1
            continue
        if has_trigger_anchor(raw) and TRIGGER.search(raw):
            text = raw.decode("utf-8", "replace")
            a = sg.feed(n, text)
            b = vl.feed(n, text)
            if a or b:
                recognised += 1
                in_tb = False
                continue
        if (b"Traceback" in raw and TB_START.search(raw)) or (b"File" in raw and TB_FRAME.search(raw)):
            in_tb = True  # a frame starts one too: excerpts often begin in the middle of a traceback
            tb_lines += 1
            continue
        if in_tb:
            if TB_BODY.search(raw):
                tb_lines += 1
                continue
            in_tb = False
        if has_memoryish_anchor(raw) and MEMORYISH.search(raw):
            unparsed += 1
            if len(samples) < MAX_UNPARSED_SAMPLES:
                samples.append(sglang_logs.evidence(n, sglang_logs.clean(raw.decode("utf-8", "replace"))))
    stats = LogStats(n, nbytes, recognised, requests, unparsed, cut, time.perf_counter() - t0, tb_lines)
    return _Scan(sg, vl, stats, samples)


# ---------------------------------------------------------------------------------------------
# The use-case
# ---------------------------------------------------------------------------------------------

def diagnose_text(text: str, **kwargs: Any) -> DoctorReport:
    """Convenience for tests and the Python API: a log given as a string."""
    return diagnose_stream(io.BytesIO(text.encode("utf-8")), name="log", **kwargs)


def diagnose_path(path: str, **kwargs: Any) -> DoctorReport:
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
                    assume: dict[str, Any] | None = None) -> DoctorReport:
    """``assume``: flags the user knows but the log does not print (``{"tp_size": 4}``); the log wins."""
    s = scan(iter_lines(ungzip(stream), name))
    if s.stats.lines == 0:
        raise LogFormatError(f"{name} is empty", field="PATH")
    sg_log, vl_log = s.sglang.result(), s.vllm.result()
    if engine is None:
        if sg_log.is_empty and vl_log.is_empty:
            raise LogFormatError(
                f"{name}: no SGLang or vLLM startup lines found in {s.stats.lines:,} lines "
                "(expected e.g. 'Load weight end. … avail mem=' or 'Available KV cache memory:')",
                field="PATH", fix="pass --engine sglang|vllm to read it anyway")
        engine = "sglang" if _score(sg_log) >= _score(vl_log) else "vllm"
    if engine not in ENGINES:
        raise LogFormatError(f"unknown engine {engine!r}", field="--engine", fix="use sglang or vllm")
    assume = dict(assume or {})
    if engine == "sglang":
        for k, v in assume.items():
            if k not in sg_log.launch_flags and k not in sg_log.server_args:
                sg_log.launch_flags[k] = v
                sg_log.assumed.add(k)
        report = _report_sglang(sg_log, s, model)
    else:
        for k, v in assume.items():
            if k not in vl_log.launch_flags and k not in vl_log.non_default_args and k not in vl_log.engine_config:
                vl_log.launch_flags[k] = v
                vl_log.assumed.add(k)
        report = _report_vllm(vl_log, s, model)
    if against is not None:
        report = _with_comparison(report, against)
    return report


def _score(log: Any) -> int:
    strong = 0
    if isinstance(log, sglang_logs.SglangLog):
        strong = 5 * bool(log.server_args or log.launch_flags) + 2 * len(log.ranks)
    else:
        strong = 5 * bool(log.non_default_args or log.engine_config or log.launch_flags or log.version_printed) + 2 * len(log.workers)
    return log.matched_lines + strong


def _version(printed: str | None, spec: str) -> tuple[str | None, dict[str, Any]]:
    extra: dict[str, Any] = {}
    if printed:
        return printed, {"engine_version_source": "printed"}
    if spec:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import Version

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


def _common_findings(an: Analysis, s: _Scan, starts_seen: int) -> None:
    if s.stats.unparsed:
        an.add(UNPARSED_LINES, INFO, f"{s.stats.unparsed:,} memory-related line(s) were not understood; see 'unparsed'",
               tuple(s.samples[:3]), None)
    if starts_seen > 1:
        an.add(RESTARTS, INFO, f"the log holds {starts_seen} server starts; the figures are from the last one", (), None)
    if s.stats.cut_lines:
        an.add(UNPARSED_LINES, WARNING, f"{s.stats.cut_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were cut", (), None)


def catalog_id_for(model: str | None) -> str | None:
    """The bundled catalog id a log's model refers to: the id itself, or a local directory whose name is
    exactly one catalog model's name (``/path/to/Qwen3-14B`` -> ``Qwen/Qwen3-14B``; the HF cache form
    ``models--Qwen--Qwen3-14B`` too). ``None`` when unknown or ambiguous."""
    if not model:
        return None
    try:
        from .catalog import list_models
    except ImportError:  # pragma: no cover
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


def _model_from(flags: dict[str, Any], model: str | None) -> str | None:
    if model:
        return model
    for key in ("model_path", "model", "served_model_name"):
        v = flags.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def _build(engine: str, version: str | None, vextra: dict, model: str | None, an: Analysis, ranks: list,
           flags: dict, sources: dict, s: _Scan) -> DoctorReport:
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
        fix=tuple(Fix(f, v, why) for f, v, why in an.fix), extra=extra, estimated=estimated,
    )
    return DoctorReport(tl, tuple(sort_findings(an.findings)), tuple(an.checks), tuple(s.samples), s.stats,
                        flags=flags, flag_sources=sources)


def _report_sglang(log: sglang_logs.SglangLog, s: _Scan, model: str | None) -> DoctorReport:
    flags, sources = sglang_logs.effective_flags(log)
    model_name = _model_from(flags, model)
    catalog = catalog_id_for(model_name)
    cell = _sglang_cell_bytes(catalog or model_name, flags, log)
    an = analyze_sglang(log, cell_bytes=cell, version=log.version_printed or _representative(log))
    version, vextra = _version(log.version_printed, sglang_logs.version_specifier(log.version_markers))
    _common_findings(an, s, log.starts_seen)
    if log.is_empty:
        an.add(NO_MEMORY_LINES, WARNING, "no SGLang memory lines found", (), None)
    if model_name is None:
        cls = next((ld.model_class for r in log.ranks.values() for ld in r.loads if ld.model_class), None)
        if cls:
            an.extra["model_class"] = cls
    ranks = sglang_logs.rank_timelines(log)
    return _build("sglang", version, vextra, model_name, an, ranks, flags, sources, s)


def _report_vllm(log: vllm_logs.VllmLog, s: _Scan, model: str | None) -> DoctorReport:
    flags, sources = vllm_logs.effective_flags(log)
    model_name = _model_from(flags, model)
    spec = vllm_logs.version_specifier(log.version_markers)
    an = analyze_vllm(log, log.version_printed, spec)
    catalog = catalog_id_for(model_name)
    vllm_model_checks(an, log, catalog or model_name, log.version_printed, spec)
    version, vextra = _version(log.version_printed, spec)
    _common_findings(an, s, log.starts_seen)
    if log.is_empty:
        an.add(NO_MEMORY_LINES, WARNING, "no vLLM memory lines found: nothing to check", tuple(s.samples[:3]), None)
    ranks = vllm_logs.rank_timelines(log)
    return _build("vllm", version, vextra, model_name, an, ranks, flags, sources, s)


def _sglang_cell_bytes(model: str | None, flags: dict, log: Any) -> int | None:
    """Exact KV bytes per token per rank for a model the catalog knows, through the SGLang engine
    module (``engines/sglang/memory.py::cell_size``); ``None`` when the model is unknown (the doctor
    then estimates the cell from the printed sizes and says so)."""
    if not model:
        return None
    try:
        from packaging.version import Version

        from .engines.sglang.memory import cell_size, kv_cache_dtype
        from .model.load import load_spec

        spec, _ = load_spec(model)
        version = Version(log.version_printed) if log.version_printed else Version(_representative(log))
        tp = int(flags.get("tp_size") or 1)
        dp = int(flags.get("dp_size") or 1)
        attn_tp = max(1, tp // dp) if flags.get("enable_dp_attention") else tp
        kv_flag = str(flags.get("kv_cache_dtype") or "auto")
        _, e = kv_cache_dtype(spec, kv_flag)
        return cell_size(spec, version, attn_tp=attn_tp, kv_bytes=e, kv_flag=kv_flag).cell_bytes
    except Exception:  # noqa: BLE001 - an unknown model or version just means no exact cell size
        return None


def _representative(log: Any) -> str:
    """A released version inside the range the log's formats imply (for version-dependent formulas)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    known = ["0.4.6.post5", "0.4.10.post2", "0.5.3", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11",
             "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.18", "0.5.20", "0.5.23"]
    try:
        s = SpecifierSet(sglang_logs.version_specifier(log.version_markers))
    except Exception:  # noqa: BLE001
        return "0.5.9"
    fits = [v for v in known if Version(v) in s]
    return fits[-1] if fits else "0.5.9"


# ---------------------------------------------------------------------------------------------
# Probe directories and --against
# ---------------------------------------------------------------------------------------------

def diagnose_probe_dir(path: str, *, against: Timeline | None = None, **_: Any) -> DoctorReport:
    try:
        from .probe.timeline import timeline_from_probe_dir  # type: ignore[import-not-found]
    except ImportError:
        raise LogFormatError(f"{path} is a directory, and reading probe records needs kvscope.probe.timeline, "
                             "which this install lacks", field="PATH") from None
    tl = timeline_from_probe_dir(path)
    stats = LogStats(0, 0, 0, 0, 0, 0, 0.0)
    report = DoctorReport(tl, (), (), (), stats)
    return _with_comparison(report, against) if against is not None else report


def load_against(path: str) -> Timeline:
    import json

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


def compare(observed: Timeline, predicted: Timeline) -> list[dict[str, Any]]:
    """Phase by phase and figure by figure: observed (log) vs predicted (plan), bytes and delta."""
    rows: list[dict[str, Any]] = []
    for key in ("kv_cache_tokens", "kv_cache_bytes", "weights_bytes", "max_running_requests", "kv_cell_bytes"):
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
            for attr in ("free_bytes_before", "free_bytes_after", "used_bytes"):
                o = getattr(ph, attr)
                p = getattr(pp, attr) if pp is not None else None
                if o is None and p is None:
                    continue
                rows.append({"what": f"{ph.name}.{attr}", "rank": r.rank, "observed": o, "predicted": p,
                             "delta": None if o is None or p is None else o - p,
                             "estimated": bool(pp.estimated) if pp is not None else None})
    return rows


def _with_comparison(report: DoctorReport, against: Timeline) -> DoctorReport:
    rows = compare(report.timeline, against)
    findings = list(report.findings)
    for row in rows:
        if row["what"] in ("kv_cache_tokens",) and row["delta"] is not None and row["predicted"]:
            rel = row["delta"] / row["predicted"]
            if abs(rel) > 0.02:
                findings.append(Finding("plan-disagrees", WARNING,
                                        f"the log's KV pool ({row['observed']:,} tokens) differs from the plan "
                                        f"({row['predicted']:,}) by {rel:+.1%}", (), None))
    return DoctorReport(report.timeline, tuple(sort_findings(findings)), report.checks, report.unparsed_samples,
                        report.stats, report.flags, report.flag_sources, tuple(rows))
