"""SGLang's startup-log grammar -> per-rank observations (what the log printed, nothing inferred).

Line formats are those of ``python/sglang/srt`` in the released wheels, version by version
(see ../shared/specs/sglang.md §5; checked against the 0.5.6, 0.5.9, 0.5.14 and 0.5.23 wheels):

* prefix ``[2025-03-08 12:29:13 TP0] `` / ``[… DP0 TP3] `` / ``[… PP1 TP0 EP0] `` / ``[…] WARNING file.py:12: ``
* every memory figure is ``%.2f`` GiB labelled "GB" (``get_available_gpu_memory`` returns bytes / 2**30);
* "avail mem" figures are *local* to the rank; the sizing formula uses the MIN across ranks.

The parser is lenient: it searches for the message anywhere in the line (docker / journald / Ray
prefixes, ANSI colours are tolerated), keeps every figure with the line it came from, and reports
which lines it recognised. Memory is bounded: at most ``MAX_RANKS`` ranks and ``MAX_EVENTS_PER_KIND``
evidence lines per kind of event are kept, whatever the log length.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

ENGINE = "sglang"
MAX_RANKS = 1024
MAX_EVENTS_PER_KIND = 8
MAX_EVIDENCE_CHARS = 400

# real escapes, and the caret notation ("^[[0;36m") that terminals/pagers leave in pasted logs
ANSI_RE = re.compile(r"(?:\x1b|\^\[)\[[0-9;?]*[ -/]*[@-~]")
PREFIX_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: [A-Z][A-Z_]*\d+)*)\]")
TAG_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
RE_GPU_PREFIX = re.compile(r"\[gpu(?:_id)?=(\d+)\]")
RE_TAGS_ONLY = re.compile(r"\[((?:DP|TP|PP|EP|CP)\d+(?: (?:DP|TP|PP|EP|CP)\d+)*)\]")
NUM = r"(-?\d+(?:\.\d+)?)"
GB = r"\s*Gi?B"

# One search per line: a line is looked at further only if it holds one of these phrases.
TRIGGER_RE = re.compile(
    r"Init torch distributed|Init parallel|Memory baseline taken|Load weight (?:begin|end)|"
    r"KV Cache is allocated|KV Cache VA upper bound|Memory pool end|[Cc]apture .{0,60}?(?:cuda|CUDA) graph|"
    r"max_total_num_tokens=|is larger than the profiled value|memory capacity is unbalanced|"
    r"Not enough memory|Loaded weights leave no GPU memory|Use sliding window memory pool|"
    r"Mamba Cache is allocated|Reserving .{0,20}GB of the KV budget|Post-capture KV sizing|"
    r"server_args=ServerArgs|sglang\.launch_server|sglang serve|Custom allreduce is disabled|"
    r"out of memory|OutOfMemoryError|KV cache pool is full|fired up and ready|"
    r"max_running_requests was reduced|Using KV cache dtype|Automatically reduce --mem-fraction-static|"
    r"Automatically adjust --mem-fraction-static|Scheduler hit an exception|sglang(?:==| version)|"
    r"Disable (?:prefill|decode) CUDA graph because|piecewise cuda graph is enabled|device_name=|"
    r"changing page_size from|Capturing batches \(|Capturing num tokens \(|Compiling num tokens \("
)

RE_INIT_END = re.compile(r"Init torch distributed ends\.(?: elapsed=" + NUM + r" s,)? mem usage=" + NUM + GB)
RE_INIT_PARALLEL_END = re.compile(r"Init parallel ends\. elapsed=" + NUM)
RE_BASELINE = re.compile(r"Memory baseline taken\. mem usage=" + NUM + GB)
RE_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=" + NUM + GB)
RE_LOAD_END = re.compile(
    r"Load weight end\.(?: elapsed=" + NUM + r" s,)?(?: type=(\w+),)?(?: dtype=([\w.]+),)?(.*?)"
    r"avail mem=" + NUM + GB + r"(?:, mem usage=" + NUM + GB + ")?"  # no "mem usage" before ~0.4.1 (Dec 2024 logs)
)
RE_LOAD_END_COMMITTED = re.compile(r"Load weight end\. Committed real weights")
RE_KV_ALLOC = re.compile(
    r"(?:(\w[\w ]*?) )?KV Cache (is allocated|VA upper bound)\.(?: dtype: ([\w.]+),)? #tokens: (\d+), "
    r"(?:K size: " + NUM + GB + r", V size: " + NUM + GB + r"|KV size: " + NUM + GB + ")"
)
RE_POOL_END = re.compile(r"Memory pool end\. avail mem=" + NUM + GB)
RE_CAPTURE = re.compile(r"[Cc]apture (.{0,60}?)(?:cuda|CUDA) graph (begin|end)")
RE_CAPTURE_BS = re.compile(r"[Cc]apture (.{0,60}?)(?:cuda|CUDA) graph (?:bs|num tokens) \[([\d,\s.…]*)\]?")
RE_PAGE_CHANGE = re.compile(r"changing page_size from (\w+) to (\d+)")
RE_AVAIL = re.compile(r"avail mem=" + NUM + GB)
RE_USAGE = re.compile(r"mem usage=" + NUM + GB)
RE_SUMMARY = re.compile(r"max_total_num_tokens=(-?\d+)")
RE_SUMMARY_FIELD = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?)")
RE_MAX_TOTAL = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")
RE_UNBALANCED_VALS = re.compile(r"(min_per_gpu_memory|pre_model_load_memory|local_gpu_memory)=" + NUM)
RE_NOT_ENOUGH = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static\.(?:.*?mem_fraction_static=" + NUM + ")?")
RE_NO_KV_MEM = re.compile(
    r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=" + NUM +
    r"(?:.*?above " + NUM + r")?(?:.*?= " + NUM + r"\))?"
)
RE_SWA = re.compile(r"Use sliding window memory pool\.(?: \(all SWA\)\.)?(?: full_layer_tokens=(\d+),)? swa_layer_tokens=(\d+)")
RE_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: " + NUM + GB + r", ssm_state size: " + NUM + GB)
RE_MM_RESERVE = re.compile(r"Reserving " + NUM + GB + r" of the KV budget")
RE_RUNNING_REDUCED = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")
RE_KV_DTYPE = re.compile(r"Using KV cache dtype: ([\w.]+)")
RE_MFS_AUTO = re.compile(r"Automatically (?:reduce|adjust) --mem-fraction-static to " + NUM)
RE_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)?\s*$")
RE_LAUNCH = re.compile(r"(?:python[\d.]*\s+-m\s+)?sglang(?:\.launch_server| serve)\b(.*)$")
RE_VERSION = re.compile(r"sglang(?:==| version[: ]\s*v?)(\d+\.\d+[\w.+-]*)")
RE_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|HIP out of memory|out of memory")
RE_DEVICE_NAME = re.compile(r"device_name=([A-Za-z][\w-]*?)(?:[,.\s]|\.json|$)")

# Launch-flag spellings -> ServerArgs field names.
FLAG_ALIASES = {
    "model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size",
    "data_parallel_size": "dp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size", "ep": "ep_size",
    "expert_parallel_size": "ep_size", "mem_frac": "mem_fraction_static",
}

# Version markers: (line feature, PEP 440 specifier it implies), from the wheels compared in the spec.
VERSION_MARKERS = {
    "init_end_no_elapsed": "<0.5.9",
    "init_end_elapsed": ">0.5.6",
    "init_parallel": ">0.5.20",
    "baseline_taken": ">0.5.20",
    "load_end_no_elapsed": "<0.5.9",
    "load_end_elapsed_dtype": ">0.5.6,<0.5.10",
    "load_end_no_dtype": ">0.5.9",
    "load_end_committed": ">0.5.15",
    "kv_alloc_dtype": ">0.5.9",
    "kv_alloc_no_dtype": "<0.5.14",
    "capture_legacy": "<0.5.14",
    "capture_backend": ">0.5.13",
    "no_kv_mem_error": ">0.5.13",
    "mm_reserve": ">0.5.15",
    "summary_no_avail": "<0.5.3",
    "summary_avail": ">0.4.10.post2",
    "unbalanced_min_per_gpu": "<0.5.10",
    "unbalanced_pre_model_load": ">0.5.9",
}


def clean(line: str) -> str:
    """Strip ANSI colours and line endings (CRLF logs from Windows included)."""
    if "\x1b" in line or "^[[" in line:
        line = ANSI_RE.sub("", line)
    return line.rstrip("\r\n")


def evidence(lineno: int, text: str) -> str:
    text = text.strip()
    if len(text) > MAX_EVIDENCE_CHARS:
        text = text[: MAX_EVIDENCE_CHARS - 1] + "…"
    return f"L{lineno}: {text}"


@dataclass(frozen=True)
class Figure:
    """One number as the engine printed it (GiB for memory figures) and where."""

    value: float
    evidence: str


@dataclass
class LoadObs:
    begin_avail_gib: Figure | None = None
    end_avail_gib: Figure | None = None
    usage_gib: Figure | None = None
    model_class: str | None = None
    dtype: str | None = None


@dataclass
class KvAllocObs:
    tokens: Figure
    k_size_gib: float | None
    v_size_gib: float | None
    kv_size_gib: float | None
    dtype: str | None
    label: str | None
    va_upper_bound: bool = False

    @property
    def size_gib(self) -> float:
        if self.kv_size_gib is not None:
            return self.kv_size_gib
        return (self.k_size_gib or 0.0) + (self.v_size_gib or 0.0)


@dataclass
class GraphObs:
    role: str
    begin_avail_gib: Figure | None = None
    end_avail_gib: Figure | None = None
    usage_gib: Figure | None = None


@dataclass
class SglangRank:
    """What one rank (``TP3``, ``DP0 TP3`` …) printed, in order of appearance."""

    label: str
    tags: dict[str, int]
    init_mem_usage_gib: Figure | None = None
    baseline_mem_usage_gib: Figure | None = None
    loads: list[LoadObs] = field(default_factory=list)  # [0] target, [1] draft (when present)
    kv_allocs: list[KvAllocObs] = field(default_factory=list)  # [0] target pool, then draft
    pool_end_avail_gib: list[Figure] = field(default_factory=list)
    graphs: list[GraphObs] = field(default_factory=list)
    graph_bs: list[int] = field(default_factory=list)  # "Capture cuda graph bs [1, 2, 4, …]"
    swa_tokens: tuple[int | None, int] | None = None
    mamba: tuple[int, float, float] | None = None
    mm_reserve_gib: Figure | None = None

    @property
    def rank_index(self) -> int | None:
        return self.tags.get("TP")


@dataclass
class Event:
    kind: str
    values: dict[str, Any]
    evidence: str


@dataclass
class SglangLog:
    """Everything the SGLang grammar recognised in one log (the last start when it restarted)."""

    ranks: dict[str, SglangRank] = field(default_factory=dict)
    server_args: dict[str, Any] = field(default_factory=dict)
    server_args_evidence: str | None = None
    launch_flags: dict[str, Any] = field(default_factory=dict)
    launch_evidence: str | None = None
    summary: dict[str, float] = field(default_factory=dict)
    summary_evidence: str | None = None
    events: dict[str, list[Event]] = field(default_factory=dict)
    event_counts: dict[str, int] = field(default_factory=dict)
    version_printed: str | None = None
    version_markers: set[str] = field(default_factory=set)
    kv_dtype: str | None = None
    device_name: str | None = None  # from MoE kernel-config file names (device_name=NVIDIA_H100_80GB_HBM3)
    page_size_forced: int | None = None  # "… changing page_size from None to 64." (attention-backend rule)
    matched_lines: int = 0
    starts_seen: int = 0
    assumed: set[str] = field(default_factory=set)  # flags given with --set, not in the log

    def first(self, kind: str) -> Event | None:
        evs = self.events.get(kind)
        return evs[0] if evs else None

    @property
    def is_empty(self) -> bool:
        return self.matched_lines == 0


def split_top_level(body: str, sep: str = ",") -> list[str]:
    """Split ``a=1, b='x, y', c=[1, 2]`` at top-level separators (quotes and brackets respected)."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def literal(text: str) -> Any:
    """A Python repr value (``0.88``, ``'x'``, ``None``, ``[1, 2]``) or the raw text."""
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


def parse_kv_repr(body: str) -> dict[str, Any]:
    """``key=value, …`` as printed by a dataclass repr; ``...`` elisions are skipped."""
    out: dict[str, Any] = {}
    for part in split_top_level(body):
        if "=" not in part:
            continue
        key, _, value = part.partition("=")
        key = key.strip().lstrip(".…").strip()
        value = re.sub(r"\s*(?:\.\.\.|…)\s*$", "", value)  # "tp_size=8 ...": an elision in a quoted log
        if key.isidentifier():
            out[key] = literal(value)
    return out


def parse_launch_flags(argv_text: str) -> dict[str, Any]:
    """``--tp 8 --mem-fraction-static 0.55 --trust-remote-code`` -> ServerArgs-style names."""
    try:
        tokens = shlex.split(argv_text)
    except ValueError:
        tokens = argv_text.split()
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and len(tok) > 2:
            name, eq, value = tok[2:].partition("=")
            key = name.replace("-", "_")
            key = FLAG_ALIASES.get(key, key)
            if eq:
                out[key] = literal(value)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                out[key] = literal(tokens[i + 1])
                i += 1
            else:
                out[key] = True
        i += 1
    return out


class LineGrammar:
    """What both engines' log parsers share: find a trigger phrase (raw line first, then the cleaned
    one), note the line's timestamp, hand the line to the subclass's ``_dispatch``, and keep the
    latest timestamp seen since the figures began (restart detection). Subclasses set
    ``TRIGGER`` and ``TIMESTAMP`` (group 1 = the timestamp)."""

    TRIGGER: re.Pattern = re.compile(r"(?!)")
    TIMESTAMP: re.Pattern = re.compile(r"(?!)")

    def feed(self, lineno: int, raw: str) -> bool:
        """Returns True when the line was recognised."""
        if self.TRIGGER.search(raw) is None:
            return False
        line = clean(raw)
        t = self.TRIGGER.search(line)
        if t is None:
            return False
        ts = self.TIMESTAMP.search(line, 0, t.start() + 1)
        self._ts = ts.group(1) if ts else None
        if self._dispatch(lineno, line, t.group(0), t.start()):
            self.log.matched_lines += 1
            if self._saw_figures and self._ts is not None and (self._figures_ts is None or self._ts > self._figures_ts):
                self._figures_ts = self._ts
            return True
        return False

    def _dispatch(self, lineno: int, line: str, key: str, pos: int) -> bool:
        raise NotImplementedError


class SglangLogParser(LineGrammar):
    """Feed lines one at a time (``feed``); ``result()`` returns what was understood."""

    engine = ENGINE
    TRIGGER = TRIGGER_RE
    TIMESTAMP = PREFIX_RE

    def __init__(self) -> None:
        self.log = SglangLog()
        self._saw_figures = False
        self._ts: str | None = None  # "YYYY-MM-DD HH:MM:SS" of the line being read
        self._figures_ts: str | None = None  # the latest timestamp read since the figures began

    # -- helpers -------------------------------------------------------------------------
    def _rank(self, line: str, msg_start: int) -> SglangRank:
        m = PREFIX_RE.search(line, 0, msg_start + 1) if msg_start >= 0 else None
        tags_text = m.group(2).strip() if m else ""
        if m is None and msg_start >= 0:
            g = RE_GPU_PREFIX.search(line, 0, msg_start + 1)  # 0.1-0.2 era "[gpu=0] " / "[gpu_id=0] "
            if g:
                tags_text = f"TP{g.group(1)}"
            else:
                g = RE_TAGS_ONLY.search(line, 0, msg_start + 1)  # a copy whose timestamps were cut: "[TP3] "
                if g:
                    tags_text = g.group(1)
        ranks = self.log.ranks
        r = ranks.get(tags_text)
        if r is None:
            if len(ranks) >= MAX_RANKS:
                tags_text = "other"
                r = ranks.get(tags_text)
                if r is not None:
                    return r
            tags = {k: int(v) for k, v in TAG_RE.findall(tags_text)} if tags_text != "other" else {}
            r = ranks[tags_text] = SglangRank(label=tags_text or "rank", tags=tags)
        return r

    def _event(self, kind: str, values: dict[str, Any], ev: str) -> None:
        counts = self.log.event_counts
        counts[kind] = counts.get(kind, 0) + 1
        lst = self.log.events.setdefault(kind, [])
        if len(lst) < MAX_EVENTS_PER_KIND:
            lst.append(Event(kind, values, ev))

    def _restart(self) -> bool:
        """A new ServerArgs / launch line after figures: the server restarted; keep the last start.
        Not when the line is older than the figures already read (a paste out of order): False then."""
        if self._ts is not None and self._figures_ts is not None and self._ts < self._figures_ts:
            return False
        self._figures_ts = None
        starts = self.log.starts_seen
        matched = self.log.matched_lines
        self.log = SglangLog(starts_seen=starts, matched_lines=matched)
        self._saw_figures = False
        return True

    # -- the grammar ---------------------------------------------------------------------
    def _dispatch(self, lineno: int, line: str, key: str, pos: int) -> bool:  # noqa: C901 - a table
        lg = self.log
        ev = evidence(lineno, line)
        if key.startswith("Load weight"):
            return self._load(lineno, line, pos, ev)
        if "KV Cache" in key and ("allocated" in key or "VA upper" in key):
            m = RE_KV_ALLOC.search(line)
            if not m:
                return False
            label, kind, dtype, tokens, k, v, kv = m.groups()
            lg.version_markers.add("kv_alloc_dtype" if dtype else "kv_alloc_no_dtype")
            rank = self._rank(line, pos)
            rank.kv_allocs.append(KvAllocObs(
                tokens=Figure(int(tokens), ev), k_size_gib=float(k) if k else None,
                v_size_gib=float(v) if v else None, kv_size_gib=float(kv) if kv else None,
                dtype=dtype, label=label.strip() if label else None, va_upper_bound=kind == "VA upper bound"))
            self._saw_figures = True
            return True
        if key == "Memory pool end":
            m = RE_POOL_END.search(line)
            if not m:
                return False
            self._rank(line, pos).pool_end_avail_gib.append(Figure(float(m.group(1)), ev))
            return True
        if "graph" in key.lower() and key.lower().startswith("capture"):
            return self._capture(line, pos, ev)
        if key.startswith("Init torch distributed") or key.startswith("Init parallel"):
            m = RE_INIT_END.search(line)
            if m:
                lg.version_markers.add("init_end_elapsed" if m.group(1) else "init_end_no_elapsed")
                self._rank(line, pos).init_mem_usage_gib = Figure(float(m.group(2)), ev)
                return True
            if key.startswith("Init parallel"):
                lg.version_markers.add("init_parallel")
            return "begin" in line or bool(RE_INIT_PARALLEL_END.search(line))
        if key == "Memory baseline taken":
            m = RE_BASELINE.search(line)
            if not m:
                return False
            lg.version_markers.add("baseline_taken")
            self._rank(line, pos).baseline_mem_usage_gib = Figure(float(m.group(1)), ev)
            return True
        if key == "max_total_num_tokens=":
            fields = {k: float(v) for k, v in RE_SUMMARY_FIELD.findall(line[pos:])}
            if "max_total_num_tokens" not in fields:
                return False
            lg.summary = fields
            lg.summary_evidence = ev
            if "available_gpu_mem" in fields:
                lg.version_markers.add("summary_avail")
            elif not re.search(r"\.\.\.|…", line[pos:]):  # an elided summary says nothing about the field
                lg.version_markers.add("summary_no_avail")
            return True
        if key == "is larger than the profiled value":
            m = RE_MAX_TOTAL.search(line)
            if not m:
                return False
            self._rank(line, pos)
            self._event("max_total_tokens_capped", {"user": int(m.group(1)), "profiled": int(m.group(2)),
                                                    "rank": self._rank(line, pos).label}, ev)
            self._saw_figures = True
            return True
        if key == "memory capacity is unbalanced":
            vals = {k: float(v) for k, v in RE_UNBALANCED_VALS.findall(line)}
            lg.version_markers.add("unbalanced_min_per_gpu" if "min_per_gpu_memory" in vals else
                                   "unbalanced_pre_model_load" if "pre_model_load_memory" in vals else "")
            lg.version_markers.discard("")
            self._event("unbalanced", vals, ev)
            return True
        if key == "Not enough memory":
            m = RE_NOT_ENOUGH.search(line)
            if not m:
                return False
            self._event("not_enough_memory", {"mem_fraction_static": float(m.group(1)) if m.group(1) else None}, ev)
            return True
        if key == "Loaded weights leave no GPU memory":
            m = RE_NO_KV_MEM.search(line)
            if not m:
                return False
            lg.version_markers.add("no_kv_mem_error")
            self._event("no_kv_memory", {
                "mem_fraction_static": float(m.group(1)),
                "raise_above": float(m.group(2)) if m.group(2) else None,
                "min_mem_fraction_static": float(m.group(3)) if m.group(3) else None,
            }, ev)
            return True
        if key == "Use sliding window memory pool":
            m = RE_SWA.search(line)
            if not m:
                return False
            self._rank(line, pos).swa_tokens = (int(m.group(1)) if m.group(1) else None, int(m.group(2)))
            return True
        if key == "Mamba Cache is allocated":
            m = RE_MAMBA.search(line)
            if not m:
                return False
            self._rank(line, pos).mamba = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
            return True
        if key.startswith("Reserving"):
            m = RE_MM_RESERVE.search(line)
            if not m:
                return False
            lg.version_markers.add("mm_reserve")
            self._rank(line, pos).mm_reserve_gib = Figure(float(m.group(1)), ev)
            return True
        if key == "Post-capture KV sizing":
            self._event("post_capture_kv_sizing", {}, ev)
            return True
        if key == "server_args=ServerArgs":
            new_start = self._restart() if self._saw_figures else True
            lg = self.log
            if new_start or lg.starts_seen == 0:
                lg.starts_seen += 1
            body = line[pos + len("server_args=ServerArgs("):]
            body = body[:-1] if body.rstrip().endswith(")") else body
            lg.server_args = parse_kv_repr(body.rstrip().rstrip(")"))
            lg.server_args_evidence = ev
            return True
        if key in ("sglang.launch_server", "sglang serve"):
            m = RE_LAUNCH.search(line)
            if not m:
                return False
            if self._saw_figures:
                self._restart()
                lg = self.log
            lg.launch_flags = parse_launch_flags(m.group(1))
            lg.launch_evidence = ev
            return True
        if key == "Custom allreduce is disabled":
            self._event("custom_ar_disabled", {"reason": custom_ar_disabled_reason(line)}, ev)
            return True
        if key in ("out of memory", "OutOfMemoryError"):
            if not RE_OOM.search(line):
                return False
            self._event("oom", {"after_start": bool(lg.events.get("server_ready"))}, ev)
            return True
        if key == "KV cache pool is full":
            self._event("kv_pool_full", {}, ev)
            return True
        if key == "fired up and ready":
            self._event("server_ready", {}, ev)
            return True
        if key == "max_running_requests was reduced":
            m = RE_RUNNING_REDUCED.search(line)
            if not m:
                return False
            self._event("max_running_reduced", {"requested": int(m.group(1)), "now": int(m.group(2))}, ev)
            return True
        if key == "Using KV cache dtype":
            m = RE_KV_DTYPE.search(line)
            if not m:
                return False
            lg.kv_dtype = m.group(1)
            return True
        if key.startswith("Automatically"):
            m = RE_MFS_AUTO.search(line)
            if not m:
                return False
            self._event("mfs_auto_adjusted", {"mem_fraction_static": float(m.group(1))}, ev)
            return True
        if key.startswith("Disable ") and "CUDA graph because" in key:
            self._event("graph_disabled", {"role": key.split()[1]}, ev)
            return True
        if key == "changing page_size from":
            m = RE_PAGE_CHANGE.search(line)
            if not m:
                return False
            lg.page_size_forced = int(m.group(2))
            return True
        if key.endswith("num tokens (") or key == "Capturing batches (":
            return True  # capture / compile progress bars (tqdm): the begin/end lines carry the figures
        if key == "device_name=":
            name = device_name_in(line)
            if name is None:
                return False
            lg.device_name = name
            return True
        if key == "piecewise cuda graph is enabled":
            self._event("piecewise_cuda_graph", {}, ev)
            return True
        if key == "Scheduler hit an exception":
            self._event("scheduler_exception", {}, ev)
            return True
        if key.startswith("sglang"):
            m = RE_VERSION.search(line)
            if not m:
                return False
            lg.version_printed = m.group(1).rstrip(".,")
            return True
        return False

    def _load(self, lineno: int, line: str, pos: int, ev: str) -> bool:
        rank = self._rank(line, pos)
        m = RE_LOAD_BEGIN.search(line)
        if m:
            rank.loads.append(LoadObs(begin_avail_gib=Figure(float(m.group(1)), ev)))
            self._saw_figures = True
            return True
        m = RE_LOAD_END.search(line)
        if m:
            elapsed, cls, dtype, _quant, avail, usage = m.groups()
            markers = self.log.version_markers
            if elapsed is None:
                if cls is not None:  # the old "Load weight end. type=…, dtype=…" shape, not a user's trimmed copy
                    markers.add("load_end_no_elapsed")
            elif dtype:
                markers.add("load_end_elapsed_dtype")
            else:
                markers.add("load_end_no_dtype")
            if not rank.loads or rank.loads[-1].end_avail_gib is not None:
                rank.loads.append(LoadObs())
            obs = rank.loads[-1]
            obs.end_avail_gib = Figure(float(avail), ev)
            obs.usage_gib = Figure(float(usage), ev) if usage is not None else None
            obs.model_class = cls
            obs.dtype = dtype
            self._saw_figures = True
            return True
        if RE_LOAD_END_COMMITTED.search(line):
            self.log.version_markers.add("load_end_committed")
            return True
        return False

    def _capture(self, line: str, pos: int, ev: str) -> bool:
        m = RE_CAPTURE.search(line)
        if not m:
            b = RE_CAPTURE_BS.search(line)
            if not b:
                return False
            sizes = [int(x) for x in re.findall(r"\d+", b.group(2))]
            if sizes and " bs " in b.group(0):
                self._rank(line, pos).graph_bs = sizes[:4096]
            return True
        role = m.group(1).strip() or "decode"
        role = "decode" if role.lower() in ("", "cuda") else role
        phase = m.group(2)
        if "backend=" in line:
            self.log.version_markers.add("capture_backend")
        elif "cuda graph" in line:  # lower-case "cuda": the ≤0.5.13 decode-graph lines
            self.log.version_markers.add("capture_legacy")
        rank = self._rank(line, pos)
        avail = RE_AVAIL.search(line)
        if phase == "begin":
            rank.graphs.append(GraphObs(role=role, begin_avail_gib=Figure(float(avail.group(1)), ev) if avail else None))
            return True
        g = rank.graphs[-1] if rank.graphs and rank.graphs[-1].end_avail_gib is None and rank.graphs[-1].role == role else None
        if g is None:
            g = GraphObs(role=role)
            rank.graphs.append(g)
        usage = RE_USAGE.search(line)
        g.end_avail_gib = Figure(float(avail.group(1)), ev) if avail else None
        g.usage_gib = Figure(float(usage.group(1)), ev) if usage else None
        return True

    def result(self) -> SglangLog:
        return self.log


def device_name_in(line: str) -> str | None:
    """The GPU named by a MoE kernel-config line (``device_name=NVIDIA_H100_80GB_HBM3``), as nvidia-smi
    spells it; both engines print these."""
    m = RE_DEVICE_NAME.search(line)
    return m.group(1).replace("_", " ") if m else None


def custom_ar_disabled_reason(line: str) -> str:
    """Why "Custom allreduce is disabled" (same warning texts in SGLang's and vLLM's
    custom_all_reduce.py): more than two PCIe-only GPUs, no P2P, world size, several nodes."""
    return ("pcie" if "PCIe-only" in line else "p2p" if "P2P" in line else
            "world_size" if "world size" in line else "nodes" if "nodes" in line else "other")


def version_specifier(markers: set[str], table: dict[str, str] | None = None) -> str:
    """The PEP 440 range the log's line formats imply (``""`` when nothing is known).
    ``table`` maps a marker to its range (default: SGLang's ``VERSION_MARKERS``)."""
    table = VERSION_MARKERS if table is None else table
    specs: list[str] = []
    for m in sorted(markers):
        spec = table.get(m)
        if spec:
            specs.extend(spec.split(","))
    return ",".join(sorted(set(specs)))


# ---------------------------------------------------------------------------------------------
# Observed timeline
# ---------------------------------------------------------------------------------------------

MEMORY_FLAGS = (
    "model_path", "tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention", "mem_fraction_static",
    "max_total_tokens", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "context_length",
    "cuda_graph_max_bs", "disable_cuda_graph", "kv_cache_dtype", "page_size", "attention_backend",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_draft_tokens",
    "disable_custom_all_reduce", "enable_p2p_check", "quantization", "dtype", "disable_radix_cache",
)


def effective_flags(log: SglangLog) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags in effect and where each came from: the ServerArgs dump wins over the launch command."""
    flags: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key, value in log.launch_flags.items():
        flags[key] = value
        source[key] = "assumed (--set)" if key in log.assumed else "launch command"
    for key, value in log.server_args.items():
        flags[key] = value
        source[key] = "server_args"
    if log.page_size_forced is not None and flags.get("page_size") in (None, "None"):
        flags["page_size"] = log.page_size_forced
        source["page_size"] = "attention-backend rule printed in the log"
    return flags, source


def _bytes(fig: Figure | None) -> int | None:
    from ...units import gib_to_bytes

    return None if fig is None else gib_to_bytes(fig.value)


def _rank_sort_key(r: SglangRank) -> tuple:
    t = r.tags
    return (t.get("PP", 0), t.get("DP", 0), t.get("TP", 0), t.get("EP", 0), r.label)


def target_and_draft(rank: SglangRank) -> tuple[LoadObs | None, LoadObs | None]:
    target = rank.loads[0] if rank.loads else None
    draft = rank.loads[1] if len(rank.loads) > 1 else None
    return target, draft


def baseline_gib(load: LoadObs | None) -> tuple[float | None, bool]:
    """Free memory before weights (the local proxy of ``pre_model_load_memory``); derived when only
    the end line survived: avail after + mem usage (``mem usage`` is before − after on that rank)."""
    if load is None:
        return None, False
    if load.begin_avail_gib is not None:
        return load.begin_avail_gib.value, False
    if load.end_avail_gib is not None and load.usage_gib is not None:
        return round(load.end_avail_gib.value + load.usage_gib.value, 2), True
    return None, False


def post_load_gib(rank: SglangRank) -> float | None:
    """Free memory after the last weights before the KV profile (target, or draft in ≥0.5.14)."""
    for load in reversed(rank.loads):
        if load.end_avail_gib is not None:
            return load.end_avail_gib.value
    return None


def rank_timelines(log: SglangLog) -> list:
    """What each rank printed, as the shared RankTimeline (figures are ``%.2f`` GiB -> bytes)."""
    from ...timeline import (
        PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_DRAFT, PHASE_LOAD_WEIGHTS, PHASE_REQ_POOL,
        Phase, RankTimeline,
    )
    from ...units import gib_to_bytes

    flags, _ = effective_flags(log)
    tp_ids = [r.tags.get("TP") for r in log.ranks.values()]
    tp_unique = None not in tp_ids and len(set(tp_ids)) == len(tp_ids)
    ranks_out = []
    for idx, rank in enumerate(sorted(log.ranks.values(), key=_rank_sort_key)):
        target, draft = target_and_draft(rank)
        base, base_derived = baseline_gib(target)
        phases = []
        if base is not None:
            phases.append(Phase(PHASE_INIT, None, gib_to_bytes(base), note="free after init = Load weight begin avail mem"
                                + (" (derived: avail after + mem usage)" if base_derived else "")))
        if target is not None and target.end_avail_gib is not None:
            phases.append(Phase(PHASE_LOAD_WEIGHTS, None if base is None else gib_to_bytes(base),
                                _bytes(target.end_avail_gib), note=target.model_class or ""))
        if draft is not None:
            d_base, _ = baseline_gib(draft)
            phases.append(Phase(PHASE_LOAD_DRAFT, None if d_base is None else gib_to_bytes(d_base),
                                _bytes(draft.end_avail_gib), note=draft.model_class or ""))
        post = post_load_gib(rank)
        kv = rank.kv_allocs[0] if rank.kv_allocs else None
        kv_bytes = gib_to_bytes(sum(a.size_gib for a in rank.kv_allocs)) if rank.kv_allocs else None
        if kv is not None and post is not None:
            kv_after = gib_to_bytes(post) - (kv_bytes or 0)
            phases.append(Phase(PHASE_KV_ALLOC, gib_to_bytes(post), kv_after,
                                note="after = before − printed KV size"))
            if rank.pool_end_avail_gib:
                phases.append(Phase(PHASE_REQ_POOL, kv_after, _bytes(rank.pool_end_avail_gib[0]),
                                    note="rest of the memory-pool step (req_to_token pool, allocator)"))
        elif kv is not None or rank.pool_end_avail_gib:
            # this rank's load lines are not in the log (an excerpt): keep what it did print
            end = _bytes(rank.pool_end_avail_gib[0]) if rank.pool_end_avail_gib else None
            if kv is not None:
                phases.append(Phase(PHASE_KV_ALLOC, None if end is None else end + (kv_bytes or 0), end,
                                    note="printed KV size; before ≥ Memory pool end + KV size (derived; the req_to_token pool is not included)"
                                    if end is not None else "printed KV size (no free-memory figure on this rank)"))
            else:
                phases.append(Phase(PHASE_REQ_POOL, None, end, note="Memory pool end (no KV line on this rank)"))
        graphs = [g for g in rank.graphs if g.begin_avail_gib or g.end_avail_gib]
        if graphs:
            first = next((g.begin_avail_gib for g in graphs if g.begin_avail_gib), None)
            last = next((g.end_avail_gib for g in reversed(graphs) if g.end_avail_gib), None)
            phases.append(Phase(PHASE_CUDA_GRAPH, _bytes(first), _bytes(last),
                                note=", ".join(g.role for g in graphs)))
        decision: dict[str, Any] = {"rank_label": rank.label}
        if base is not None:
            decision["pre_model_load_memory_bytes"] = gib_to_bytes(base)
            decision["pre_model_load_memory_is_local"] = True
        if post is not None:
            decision["post_load_free_bytes"] = gib_to_bytes(post)
        if target is not None and target.usage_gib is not None:
            decision["weights_bytes"] = _bytes(target.usage_gib)
        if draft is not None and draft.usage_gib is not None:
            decision["draft_weights_bytes"] = _bytes(draft.usage_gib)
        if kv is not None:
            decision["max_total_num_tokens"] = int(kv.tokens.value)
            decision["kv_cache_bytes"] = kv_bytes
            if kv.dtype:
                decision["kv_cache_dtype"] = kv.dtype
        if rank.init_mem_usage_gib is not None:
            decision["init_mem_usage_bytes"] = _bytes(rank.init_mem_usage_gib)
        if rank.mm_reserve_gib is not None:
            decision["mm_reservation_bytes"] = _bytes(rank.mm_reserve_gib)
        if rank.swa_tokens is not None:
            decision["full_layer_tokens"], decision["swa_layer_tokens"] = rank.swa_tokens
        if rank.graph_bs:
            decision["cuda_graph_bs_max"] = max(rank.graph_bs)
            decision["cuda_graph_bs_count"] = len(rank.graph_bs)
        if graphs:
            decision["cuda_graphs"] = [
                {"role": g.role, "free_bytes_before": _bytes(g.begin_avail_gib), "free_bytes_after": _bytes(g.end_avail_gib),
                 "used_bytes": _bytes(g.usage_gib)} for g in graphs]
        if "mem_fraction_static" in flags:
            decision["mem_fraction_static"] = flags["mem_fraction_static"]
        final = (graphs and next((g.end_avail_gib for g in reversed(graphs) if g.end_avail_gib), None)) or \
            (rank.pool_end_avail_gib[-1] if rank.pool_end_avail_gib else None)
        if final is not None:
            decision["free_bytes_at_end"] = _bytes(final)
        ranks_out.append(RankTimeline(rank=rank.tags["TP"] if tp_unique and "TP" in rank.tags else idx,
                                      phases=tuple(phases), decision=decision))
    return ranks_out
