"""SGLang's startup-log grammar -> per-rank observations (what the log printed, nothing inferred).

Line formats are those of ``python/sglang/srt`` in the released wheels, version by version
(see ../shared/specs/sglang.md §5; checked against the 0.5.6, 0.5.9, 0.5.14 and 0.5.23 wheels):

* prefix ``[2025-03-08 12:29:13 TP0] `` / ``[… DP0 TP3] `` / ``[… PP1 TP0 EP0] `` / ``[…] WARNING file.py:12: ``
* every memory figure is ``%.2f`` GiB labelled "GB" (``get_available_gpu_memory`` returns bytes / 2**30);
* "avail mem" figures are *local* to the rank; the sizing formula uses the MIN across ranks.

The parser is lenient: it searches for the message anywhere in the line (docker / journald / Ray
prefixes, ANSI colours are tolerated), keeps every figure with the line it came from, and reports
which lines it recognised. The line machinery is ``kvscope.logs.grammar``; this module holds
SGLang's ``RULES`` (one per phrase), what they record (``SglangLog``) and the observed timeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...logs.grammar import (
    CUDA_ERROR_RULE,
    CUSTOM_AR_RULE,
    DEVICE_NAME_RULE,
    MAX_RANKS,
    PHASES,
    Event,
    Figure,
    Line,
    LineGrammar,
    Rule,
    bounded_append,
    event_rule,
    failure_rule,
    launch_rule,
    oom_rule,
    parse_kv_repr,
    parse_launch_flags,
    trigger_pattern,
    version_rule,
)
from ...logs.grammar import version_specifier as _version_specifier
from ...logs.observed import ObservedRecord
from ...record import Record
from ...timeline import (
    PHASE_CUDA_GRAPH,
    PHASE_INIT,
    PHASE_KV_ALLOC,
    PHASE_LOAD_DRAFT,
    PHASE_LOAD_WEIGHTS,
    PHASE_REQ_POOL,
    Phase,
    RankTimeline,
)
from ...units import gib_to_bytes
from .release import TRAITS

ENGINE = "sglang"

PREFIX_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: [A-Z][A-Z_]*\d+)*)\]")
TAG_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
RE_GPU_PREFIX = re.compile(r"\[gpu(?:_id)?=(\d+)\]")
RE_TAGS_ONLY = re.compile(r"\[((?:DP|TP|PP|EP|CP)\d+(?: (?:DP|TP|PP|EP|CP)\d+)*)\]")
NUM = r"(-?\d+(?:\.\d+)?)"
GB = r"\s*Gi?B"

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
    r"(?:(\w[\w ]*?) )?KV Cache (?:is allocated|VA upper bound)\.(?: dtype: ([\w.]+),)? #tokens: (\d+), "
    r"(?:K size: " + NUM + GB + r", V size: " + NUM + GB + r"|KV size: " + NUM + GB + ")"
)
RE_POOL_END = re.compile(r"Memory pool end\. avail mem=" + NUM + GB)
RE_CAPTURE = re.compile(r"[Cc]apture (.{0,60}?)(?:cuda|CUDA) graph (begin|end)")
RE_CAPTURE_BS = re.compile(r"[Cc]apture (.{0,60}?)(?:cuda|CUDA) graph (?:bs|num tokens) \[([\d,\s.…]*)\]?")
RE_PAGE_CHANGE = re.compile(r"changing page_size from (\w+) to (\d+)")
RE_AVAIL = re.compile(r"avail mem=" + NUM + GB)
RE_USAGE = re.compile(r"mem usage=" + NUM + GB)
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
RE_LAUNCH = re.compile(r"(?:python[\d.]*\s+-m\s+)?sglang(?:\.launch_server| serve)\b(.*)$")
RE_VERSION = re.compile(r"sglang(?:==| version[: ]\s*v?)(\d+\.\d+[\w.+-]*)")
RE_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|HIP out of memory|out of memory")

# Launch-flag spellings -> ServerArgs field names.
FLAG_ALIASES = {
    "model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size",
    "data_parallel_size": "dp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size", "ep": "ep_size",
    "expert_parallel_size": "ep_size", "mem_frac": "mem_fraction_static",
}

# Version markers: line feature -> the PEP 440 range it implies. The ranges are the release table's
# "log line formats" traits (release.TRAITS["log_<marker>"], each with the wheel that pins it).
VERSION_MARKERS = {m: TRAITS[f"log_{m}"].spec for m in (
    "init_end_no_elapsed", "init_end_elapsed", "init_parallel", "baseline_taken", "load_end_no_elapsed",
    "load_end_elapsed_dtype", "load_end_no_dtype", "load_end_committed", "kv_alloc_dtype",
    "kv_alloc_no_dtype", "capture_legacy", "capture_backend", "no_kv_mem_error", "mm_reserve",
    "summary_no_avail", "summary_avail", "unbalanced_min_per_gpu", "unbalanced_pre_model_load",
)}


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
    loads: list[LoadObs] = field(default_factory=list)  # [0] target, [1] draft (when present)
    kv_allocs: list[KvAllocObs] = field(default_factory=list)  # [0] target pool, then draft
    pool_end_avail_gib: list[Figure] = field(default_factory=list)
    graphs: list[GraphObs] = field(default_factory=list)
    graph_bs: list[int] = field(default_factory=list)  # "Capture cuda graph bs [1, 2, 4, …]"
    swa_tokens: tuple[int | None, int] | None = None
    mamba: tuple[int, float, float] | None = None
    mm_reserve_gib: Figure | None = None


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


# ---------------------------------------------------------------------------------------------
# The grammar: one handler per phrase, then the RULES table
# ---------------------------------------------------------------------------------------------
# A handler gets the parser, the match of its rule's pattern (or None) and the Line; it returns
# False when the line is not recognised after all.

def _init(p: SglangLogParser, _m: Any, ln: Line) -> bool:
    m = RE_INIT_END.search(ln.text)
    if m:
        p.log.version_markers.add("init_end_elapsed" if m.group(1) else "init_end_no_elapsed")
        p.rank(ln).init_mem_usage_gib = Figure(float(m.group(2)), ln.ev)
        return True
    if ln.key.startswith("Init parallel"):
        p.log.version_markers.add("init_parallel")
    return "begin" in ln.text or bool(RE_INIT_PARALLEL_END.search(ln.text))


def _baseline(p: SglangLogParser, _m: Any, ln: Line) -> None:
    p.log.version_markers.add("baseline_taken")
    p.rank(ln)  # the rank exists from this line on (its figure is not used)


def _load_begin(p: SglangLogParser, m: Any, ln: Line) -> None:
    bounded_append(p.rank(ln).loads, LoadObs(begin_avail_gib=Figure(float(m.group(1)), ln.ev)))
    p.saw_figures = True


def _load_end_marker(elapsed: str | None, cls: str | None, dtype: str | None) -> str | None:
    if elapsed is None:  # the old "Load weight end. type=…, dtype=…" shape, not a user's trimmed copy
        return "load_end_no_elapsed" if cls is not None else None
    return "load_end_elapsed_dtype" if dtype else "load_end_no_dtype"


def _load_end(p: SglangLogParser, m: Any, ln: Line) -> None:
    elapsed, cls, dtype, _quant, avail, usage = m.groups()
    marker = _load_end_marker(elapsed, cls, dtype)
    if marker:
        p.log.version_markers.add(marker)
    rank = p.rank(ln)
    if not rank.loads or rank.loads[-1].end_avail_gib is not None:
        bounded_append(rank.loads, LoadObs())
    obs = rank.loads[-1]
    obs.end_avail_gib = Figure(float(avail), ln.ev)
    obs.usage_gib = Figure(float(usage), ln.ev) if usage is not None else None
    obs.model_class = cls
    obs.dtype = dtype
    p.saw_figures = True


def _load(p: SglangLogParser, _m: Any, ln: Line) -> bool:
    p.rank(ln)  # the rank exists from its first "Load weight" line on, recognised or not
    for pattern, handle in ((RE_LOAD_BEGIN, _load_begin), (RE_LOAD_END, _load_end)):
        m = pattern.search(ln.text)
        if m:
            handle(p, m, ln)
            return True
    if RE_LOAD_END_COMMITTED.search(ln.text):
        p.log.version_markers.add("load_end_committed")
        return True
    return False


def _kv_alloc(p: SglangLogParser, m: Any, ln: Line) -> None:
    label, dtype, tokens, k, v, kv = m.groups()
    p.log.version_markers.add("kv_alloc_dtype" if dtype else "kv_alloc_no_dtype")
    bounded_append(p.rank(ln).kv_allocs, KvAllocObs(
        tokens=Figure(int(tokens), ln.ev), k_size_gib=float(k) if k else None,
        v_size_gib=float(v) if v else None, kv_size_gib=float(kv) if kv else None,
        dtype=dtype, label=label.strip() if label else None))
    p.saw_figures = True


def _pool_end(p: SglangLogParser, m: Any, ln: Line) -> None:
    bounded_append(p.rank(ln).pool_end_avail_gib, Figure(float(m.group(1)), ln.ev))


def _capture_sizes(p: SglangLogParser, ln: Line) -> bool:
    b = RE_CAPTURE_BS.search(ln.text)
    if not b:
        return False
    sizes = [int(x) for x in re.findall(r"\d+", b.group(2))]
    if sizes and " bs " in b.group(0):
        p.rank(ln).graph_bs = sizes[:4096]
    return True


def _capture(p: SglangLogParser, _m: Any, ln: Line) -> bool:
    m = RE_CAPTURE.search(ln.text)
    if not m:
        return _capture_sizes(p, ln)
    role = m.group(1).strip() or "decode"
    role = "decode" if role.lower() in ("", "cuda") else role
    if "backend=" in ln.text:
        p.log.version_markers.add("capture_backend")
    elif "cuda graph" in ln.text:  # lower-case "cuda": the ≤0.5.13 decode-graph lines
        p.log.version_markers.add("capture_legacy")
    rank = p.rank(ln)
    avail = RE_AVAIL.search(ln.text)
    if m.group(2) == "begin":
        bounded_append(rank.graphs, GraphObs(role=role, begin_avail_gib=Figure(float(avail.group(1)), ln.ev) if avail else None))
        return True
    last = rank.graphs[-1] if rank.graphs else None
    g = last if last is not None and last.end_avail_gib is None and last.role == role else None
    if g is None:
        g = bounded_append(rank.graphs, GraphObs(role=role))
    usage = RE_USAGE.search(ln.text)
    g.end_avail_gib = Figure(float(avail.group(1)), ln.ev) if avail else None
    g.usage_gib = Figure(float(usage.group(1)), ln.ev) if usage else None
    return True


def _summary(p: SglangLogParser, _m: Any, ln: Line) -> bool:
    tail = ln.text[ln.pos:]
    fields = {k: float(v) for k, v in RE_SUMMARY_FIELD.findall(tail)}
    if "max_total_num_tokens" not in fields:
        return False
    p.log.summary = fields
    p.log.summary_evidence = ln.ev
    if "available_gpu_mem" in fields:
        p.log.version_markers.add("summary_avail")
    elif not re.search(r"\.\.\.|…", tail):  # an elided summary says nothing about the field
        p.log.version_markers.add("summary_no_avail")
    return True


def _max_total_capped(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.event("max_total_tokens_capped", {"user": int(m.group(1)), "profiled": int(m.group(2)),
                                        "rank": p.rank(ln).label}, ln.ev)
    p.saw_figures = True


def _unbalanced(p: SglangLogParser, _m: Any, ln: Line) -> None:
    vals = {k: float(v) for k, v in RE_UNBALANCED_VALS.findall(ln.text)}
    if "min_per_gpu_memory" in vals:
        p.log.version_markers.add("unbalanced_min_per_gpu")
    elif "pre_model_load_memory" in vals:
        p.log.version_markers.add("unbalanced_pre_model_load")
    p.event("unbalanced", vals, ln.ev)


def _not_enough(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.event("not_enough_memory", {"mem_fraction_static": float(m.group(1)) if m.group(1) else None}, ln.ev)


def _no_kv_memory(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.log.version_markers.add("no_kv_mem_error")
    p.event("no_kv_memory", {
        "mem_fraction_static": float(m.group(1)),
        "raise_above": float(m.group(2)) if m.group(2) else None,
        "min_mem_fraction_static": float(m.group(3)) if m.group(3) else None,
    }, ln.ev)


def _swa(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.rank(ln).swa_tokens = (int(m.group(1)) if m.group(1) else None, int(m.group(2)))


def _mamba(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.rank(ln).mamba = (int(m.group(1)), float(m.group(2)), float(m.group(3)))


def _mm_reserve(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.log.version_markers.add("mm_reserve")
    p.rank(ln).mm_reserve_gib = Figure(float(m.group(1)), ln.ev)


def _server_args(p: SglangLogParser, _m: Any, ln: Line) -> None:
    p.begin_start()
    body = ln.text[ln.pos + len("server_args=ServerArgs("):]
    body = body[:-1] if body.rstrip().endswith(")") else body
    p.log.server_args = parse_kv_repr(body.rstrip().rstrip(")"))
    p.log.server_args_evidence = ln.ev


def _running_reduced(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.event("max_running_reduced", {"requested": int(m.group(1)), "now": int(m.group(2))}, ln.ev)


def _kv_dtype(p: SglangLogParser, m: Any, _ln: Line) -> None:
    p.log.kv_dtype = m.group(1)


def _mfs_auto(p: SglangLogParser, m: Any, ln: Line) -> None:
    p.event("mfs_auto_adjusted", {"mem_fraction_static": float(m.group(1))}, ln.ev)


def _graph_disabled(p: SglangLogParser, _m: Any, ln: Line) -> None:
    p.event("graph_disabled", {"role": ln.key.split()[1]}, ln.ev)


def _page_size(p: SglangLogParser, m: Any, _ln: Line) -> None:
    p.log.page_size_forced = int(m.group(2))


def _progress_bar(_p: SglangLogParser, _m: Any, _ln: Line) -> None:
    """Capture / compile progress bars (tqdm): the begin/end lines carry the figures."""


def _parse_launch(argv_text: str) -> dict[str, Any]:
    return parse_launch_flags(argv_text, FLAG_ALIASES)


# The phrases in the order the trigger alternation tries them (the first alternative that matches
# at the leftmost position wins, as in one regex).
RULES: tuple[Rule, ...] = (
    Rule(r"Init torch distributed|Init parallel", None, _init),
    Rule(r"Memory baseline taken", RE_BASELINE, _baseline),
    Rule(r"Load weight (?:begin|end)", None, _load),
    Rule(r"KV Cache is allocated|KV Cache VA upper bound", RE_KV_ALLOC, _kv_alloc),
    Rule(r"Memory pool end", RE_POOL_END, _pool_end),
    failure_rule(r"Capture cuda graph failed", "graph_capture_failed", "cuda_graph"),  # cuda_graph_runner.py
    Rule(r"[Cc]apture .{0,60}?(?:cuda|CUDA) graph", None, _capture),
    Rule(r"max_total_num_tokens=", None, _summary),
    Rule(r"is larger than the profiled value", RE_MAX_TOTAL, _max_total_capped),
    Rule(r"memory capacity is unbalanced", None, _unbalanced),
    Rule(r"Not enough memory", RE_NOT_ENOUGH, _not_enough),
    Rule(r"Loaded weights leave no GPU memory", RE_NO_KV_MEM, _no_kv_memory),
    Rule(r"Use sliding window memory pool", RE_SWA, _swa),
    Rule(r"Mamba Cache is allocated", RE_MAMBA, _mamba),
    Rule(r"Reserving .{0,20}GB of the KV budget", RE_MM_RESERVE, _mm_reserve),
    event_rule(r"Post-capture KV sizing", "post_capture_kv_sizing"),
    Rule(r"server_args=ServerArgs", None, _server_args),
    launch_rule(r"sglang\.launch_server|sglang serve", RE_LAUNCH, _parse_launch),
    CUSTOM_AR_RULE,
    oom_rule(RE_OOM),
    event_rule(r"KV cache pool is full", "kv_pool_full"),
    event_rule(r"fired up and ready", "server_ready"),
    Rule(r"max_running_requests was reduced", RE_RUNNING_REDUCED, _running_reduced),
    Rule(r"Using KV cache dtype", RE_KV_DTYPE, _kv_dtype),
    Rule(r"Automatically reduce --mem-fraction-static|Automatically adjust --mem-fraction-static", RE_MFS_AUTO, _mfs_auto),
    failure_rule(r"Scheduler hit an exception", "scheduler_exception"),
    CUDA_ERROR_RULE,
    version_rule(r"sglang(?:==| version)", RE_VERSION, strip=".,"),
    Rule(r"Disable (?:prefill|decode) CUDA graph because", None, _graph_disabled),
    event_rule(r"piecewise cuda graph is enabled", "piecewise_cuda_graph"),
    DEVICE_NAME_RULE,
    Rule(r"changing page_size from", RE_PAGE_CHANGE, _page_size),
    Rule(r"Capturing batches \(|Capturing num tokens \(|Compiling num tokens \(", None, _progress_bar),
)

# One search per line: a line is looked at further only if it holds one of these phrases.
TRIGGER_RE = trigger_pattern(RULES)


def phase_of(log: SglangLog) -> str:
    """The phase the log had reached: the least advanced rank's (a rank that failed holds the others at
    the next collective); the server's own lines first: ready = serving, the scheduler's summary =
    warm-up. "unknown" when no rank printed a phase line."""
    if log.events.get("server_ready"):
        return "serving"
    if log.summary:
        return "warmup"
    return min((_rank_phase(r) for r in log.ranks.values()), key=PHASES.index, default="unknown")


def _rank_phase(r: SglangRank) -> str:
    """The phase one rank had reached, from what it printed (``model_runner.py``: load, then the KV
    pools, then CUDA graph capture; the scheduler's summary line follows the last capture)."""
    if r.graphs:
        return "cuda_graph"
    if r.kv_allocs or r.pool_end_avail_gib or any(obs.end_avail_gib is not None for obs in r.loads):
        return "kv_alloc"
    return "load_weights" if r.loads else "init"


class SglangLogParser(LineGrammar):
    """Feed lines one at a time (``feed``); ``result()`` returns what was understood."""

    engine = ENGINE
    RULES = RULES
    TIMESTAMP = PREFIX_RE  # "YYYY-MM-DD HH:MM:SS"
    log: SglangLog

    def new_log(self, starts_seen: int = 0, matched_lines: int = 0) -> SglangLog:
        return SglangLog(starts_seen=starts_seen, matched_lines=matched_lines)

    def phase_now(self) -> str:
        return phase_of(self.log)

    def rank(self, ln: Line) -> SglangRank:
        """The rank whose prefix is before the phrase (``[… TP3]``, ``[gpu=0]``, ``[TP3]``)."""
        m = PREFIX_RE.search(ln.text, 0, ln.pos + 1)
        tags_text = m.group(2).strip() if m else ""
        if m is None:
            g = RE_GPU_PREFIX.search(ln.text, 0, ln.pos + 1)  # 0.1-0.2 era "[gpu=0] " / "[gpu_id=0] "
            if g:
                tags_text = f"TP{g.group(1)}"
            else:
                g = RE_TAGS_ONLY.search(ln.text, 0, ln.pos + 1)  # a copy whose timestamps were cut: "[TP3] "
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

    def result(self) -> SglangLog:
        return self.log


def version_specifier(markers: set[str]) -> str:
    """The SGLang version range the log's line formats imply (``""`` when nothing is known)."""
    return _version_specifier(markers, VERSION_MARKERS)


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


@dataclass(frozen=True)
class GraphCapture(Record):
    """One CUDA-graph capture a rank printed (bytes; None where the line has no figure)."""

    role: str  # "decode", or the capture's kind as printed ("prefill", "piecewise" …)
    free_bytes_before: int | None  # avail mem on the capture-begin line
    free_bytes_after: int | None  # avail mem on the capture-end line
    used_bytes: int | None  # mem usage on the capture-end line


@dataclass(frozen=True)
class SglangLogDecision(ObservedRecord):
    """What one SGLang rank printed, in bytes: the observed counterpart of the plan's decision."""

    rank_label: str  # the rank's log prefix ("TP3", "DP0 TP3"), "rank" when the log has none
    pre_model_load_memory_bytes: int | None = None  # free before the weights ("Load weight begin" avail mem)
    pre_model_load_memory_is_local: bool | None = None  # true: this rank's figure; SGLang sizes by the MIN over ranks
    post_load_free_bytes: int | None = None  # free after the last weights (target, or draft)
    weights_bytes: int | None = None  # the target's "Load weight end" mem usage
    draft_weights_bytes: int | None = None  # the speculative draft's mem usage
    max_total_num_tokens: int | None = None  # #tokens of the target KV pool
    kv_cache_bytes: int | None = None  # the KV pools' printed sizes, summed
    kv_cache_dtype: str | None = None  # as the KV line printed it
    init_mem_usage_bytes: int | None = None  # "Init torch distributed ends" mem usage
    mm_reservation_bytes: int | None = None  # "Reserving X GB of the KV budget" (multimodal)
    full_layer_tokens: int | None = None  # SWA pool: full-attention layers' tokens (null: all-SWA)
    swa_layer_tokens: int | None = None  # SWA pool: sliding-window layers' tokens
    cuda_graph_bs_max: int | None = None  # the largest captured batch size
    cuda_graph_bs_count: int | None = None  # how many batch sizes were captured
    cuda_graphs: tuple[GraphCapture, ...] | None = None
    mem_fraction_static: Any = None  # the flag in effect, as the log printed it
    free_bytes_at_end: int | None = None  # free after the last step the rank printed


def _phases_to_kv(rank: SglangRank, target: LoadObs | None, draft: LoadObs | None) -> list[Phase]:
    """init, load_weights, load_draft: free memory before and after each load (as printed)."""
    phases = []
    base, base_derived = baseline_gib(target)
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
    return phases


def _kv_bytes(rank: SglangRank) -> int | None:
    return gib_to_bytes(sum(a.size_gib for a in rank.kv_allocs)) if rank.kv_allocs else None


def _pool_phases(rank: SglangRank) -> list[Phase]:
    """kv_alloc and req_to_token_pool: from the post-load figure when the rank printed it, else
    what the rank did print (an excerpt without its load lines)."""
    post = post_load_gib(rank)
    kv = rank.kv_allocs[0] if rank.kv_allocs else None
    kv_bytes = _kv_bytes(rank)
    end = _bytes(rank.pool_end_avail_gib[0]) if rank.pool_end_avail_gib else None
    if kv is not None and post is not None:
        kv_after = gib_to_bytes(post) - (kv_bytes or 0)
        phases = [Phase(PHASE_KV_ALLOC, gib_to_bytes(post), kv_after, note="after = before − printed KV size")]
        if rank.pool_end_avail_gib:
            phases.append(Phase(PHASE_REQ_POOL, kv_after, end,
                                note="rest of the memory-pool step (req_to_token pool, allocator)"))
        return phases
    if kv is not None:
        return [Phase(PHASE_KV_ALLOC, None if end is None else end + (kv_bytes or 0), end,
                      note="printed KV size; before ≥ Memory pool end + KV size (derived; the req_to_token pool is not included)"
                      if end is not None else "printed KV size (no free-memory figure on this rank)")]
    if rank.pool_end_avail_gib:
        return [Phase(PHASE_REQ_POOL, None, end, note="Memory pool end (no KV line on this rank)")]
    return []


def _graphs(rank: SglangRank) -> list[GraphObs]:
    return [g for g in rank.graphs if g.begin_avail_gib or g.end_avail_gib]


def _graph_phase(graphs: list[GraphObs]) -> list[Phase]:
    if not graphs:
        return []
    first = next((g.begin_avail_gib for g in graphs if g.begin_avail_gib), None)
    last = next((g.end_avail_gib for g in reversed(graphs) if g.end_avail_gib), None)
    return [Phase(PHASE_CUDA_GRAPH, _bytes(first), _bytes(last), note=", ".join(g.role for g in graphs))]


def _decision(rank: SglangRank, flags: dict[str, Any]) -> SglangLogDecision:
    """The rank's printed figures as a decision record (only what the log gave, in this order)."""
    target, draft = target_and_draft(rank)
    base, _ = baseline_gib(target)
    post = post_load_gib(rank)
    kv = rank.kv_allocs[0] if rank.kv_allocs else None
    graphs = _graphs(rank)
    items: list[tuple[str, Any]] = [("rank_label", rank.label)]
    if base is not None:
        items += [("pre_model_load_memory_bytes", gib_to_bytes(base)), ("pre_model_load_memory_is_local", True)]
    if post is not None:
        items.append(("post_load_free_bytes", gib_to_bytes(post)))
    if target is not None and target.usage_gib is not None:
        items.append(("weights_bytes", _bytes(target.usage_gib)))
    if draft is not None and draft.usage_gib is not None:
        items.append(("draft_weights_bytes", _bytes(draft.usage_gib)))
    if kv is not None:
        items += [("max_total_num_tokens", int(kv.tokens.value)), ("kv_cache_bytes", _kv_bytes(rank))]
        items += [("kv_cache_dtype", kv.dtype)] if kv.dtype else []
    if rank.init_mem_usage_gib is not None:
        items.append(("init_mem_usage_bytes", _bytes(rank.init_mem_usage_gib)))
    if rank.mm_reserve_gib is not None:
        items.append(("mm_reservation_bytes", _bytes(rank.mm_reserve_gib)))
    if rank.swa_tokens is not None:
        items += [("full_layer_tokens", rank.swa_tokens[0]), ("swa_layer_tokens", rank.swa_tokens[1])]
    if rank.graph_bs:
        items += [("cuda_graph_bs_max", max(rank.graph_bs)), ("cuda_graph_bs_count", len(rank.graph_bs))]
    if graphs:
        items.append(("cuda_graphs", tuple(GraphCapture(g.role, _bytes(g.begin_avail_gib), _bytes(g.end_avail_gib),
                                                        _bytes(g.usage_gib)) for g in graphs)))
    if "mem_fraction_static" in flags:
        items.append(("mem_fraction_static", flags["mem_fraction_static"]))
    final = (graphs and next((g.end_avail_gib for g in reversed(graphs) if g.end_avail_gib), None)) or \
        (rank.pool_end_avail_gib[-1] if rank.pool_end_avail_gib else None)
    if final is not None:
        items.append(("free_bytes_at_end", _bytes(final)))
    return SglangLogDecision.from_items(items)


def rank_timelines(log: SglangLog) -> list[RankTimeline]:
    """What each rank printed, as the shared RankTimeline (figures are ``%.2f`` GiB -> bytes)."""
    flags, _ = effective_flags(log)
    tp_ids = [r.tags.get("TP") for r in log.ranks.values()]
    tp_unique = None not in tp_ids and len(set(tp_ids)) == len(tp_ids)
    out = []
    for idx, rank in enumerate(sorted(log.ranks.values(), key=_rank_sort_key)):
        phases = _phases_to_kv(rank, *target_and_draft(rank)) + _pool_phases(rank) + _graph_phase(_graphs(rank))
        out.append(RankTimeline(rank=rank.tags["TP"] if tp_unique and "TP" in rank.tags else idx,
                                phases=tuple(phases), decision=_decision(rank, flags)))
    return out
