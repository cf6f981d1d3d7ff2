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

from ..sglang.logs import (
    MAX_EVENTS_PER_KIND,
    MAX_RANKS,
    Event,
    Figure,
    clean,
    evidence,
    literal,
    parse_kv_repr,
)
from ..sglang.logs import LineGrammar, custom_ar_disabled_reason, device_name_in
from ..sglang.logs import version_specifier as _version_specifier

ENGINE = "vllm"
NUM = r"(-?\d+(?:\.\d+)?)"
INT = r"(\d[\d,]*)"

# "(EngineCore_DP0 pid=1)", "(Worker_TP1 pid=2)", "(VllmWorker TP1 pid=3)", "(VllmWorker rank=0 pid=4)", "(RayWorkerWrapper pid=5, ip=…)"
PREFIX_RE = re.compile(r"\(([A-Za-z][\w-]*?(?: (?:TP|DP|PP|EP)\d+| rank=\d+)*) pid=(\d+)(?:, ip=[\w.:-]+)?\)")
TAG_RE = re.compile(r"(TP|DP|PP|EP)(\d+)")

TRIGGER_RE = re.compile(
    r"Model loading took|Loading model weights took|Memory profiling results|Memory profiling takes|"
    r"the current vLLM instance can use|model weights take|Initial free memory|"
    r"Available KV cache memory|KV cache size: |Maximum concurrency for|(?:GPU|cuda|CUDA|rocm|ROCm|xpu|XPU|npu|NPU|hpu|HPU|tpu|TPU) blocks: |num_gpu_blocks is: |"
    r"EngineCore failed to start|Starting to load model|Cudagraph is disabled|Capturing CUDA graphs \(|died, exit code|"
    r"device_name=|on startup\. Desired GPU memory utilization|"
    r"Estimated CUDA graph memory|Graph capturing finished|CUDA graph pool memory|"
    r"CUDA graph memory profiling is|max seq len|To serve at least one request|"
    r"No available memory for the cache blocks|on startup is less than desired GPU memory utilization|"
    r"Error in memory profiling|auto-fit max_model_len|Auto-fit max_model_len|"
    r"non-default args|LLM engine \(v|LLM engine with config|API server version|vLLM server version|vllm serve|"
    r"vllm\.entrypoints\.openai\.api_server|Custom allreduce is disabled|out of memory|OutOfMemoryError|"
    r"Application startup complete|\"kv_cache_tokens\"|Overriding num_gpu_blocks|as specified by kv_cache_memory_bytes|"
    r"Automatically detected platform|Setting kv cache block size|preempted by PreemptionMode"
)

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
RE_LAUNCH = re.compile(r"(?:vllm serve|vllm\.entrypoints\.openai\.api_server)\s*(.*)$")
RE_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|HIP out of memory")
RE_OVERRIDE_BLOCKS = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
RE_KV_BYTES_FLAG = re.compile(r"reserved " + NUM + r"\s*GiB memory for KV Cache as specified by kv_cache_memory_bytes")
RE_BLOCK_SIZE = re.compile(r"Setting kv cache block size to (\d+)")
RE_TIMESTAMP = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG|WARN|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)")

FLAG_ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
                "model_tag": "model"}

# Line feature -> PEP 440 range (see the module docstring and the spec's §11 history table).
VERSION_MARKERS = {
    "v0_profile": "<0.11.0",
    "v0_blocks": "<0.11.0",
    "v0_weights_gb": "<0.11.0",
    "weights_4dp": "<0.14.0",
    "weights_memory_word": ">0.11.0",  # 0.13.0 prints "took 16.8574 GiB memory and"
    "merged_capacity": ">=0.28.0",
    "split_capacity": "<0.28.0",
    "cg_estimate": ">=0.18.0",
    "can_use_summary": "<0.11.0",
    "v1_profile_debug": ">=0.11.0",
    # the "To serve at least one request" error text (kv_cache_utils.py / kv_cache_planning.py per release)
    "serve_one_models_s": "<0.22.0",   # "with the models's max seq len"
    "serve_one_model_s": ">=0.22.0",   # fixed spelling, with the CPU-backend hint
    "serve_one_docs_link": ">=0.14.0",  # "… See https://docs.vllm.ai/…/conserving_memory/"
    "serve_one_no_docs_link": "<0.14.0",
    "v0_max_seq_error": "<0.11.0",     # V0 raise_if_cache_size_invalid
}


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
    cuda_graph_pool_actual_gib: Figure | None = None
    consumed_gib: Figure | None = None  # "consumed memory (weights + non-torch)" of the startup summary
    kv_fit_bytes: int | None = None  # the summary's --kv-cache-memory that fits the requested memory
    v0_profile: dict[str, float] = field(default_factory=dict)
    v0_profile_evidence: str | None = None


@dataclass
class VllmLog:
    workers: dict[str, VllmWorker] = field(default_factory=dict)
    kv_cache_tokens: Figure | None = None
    num_gpu_blocks: Figure | None = None
    num_cpu_blocks: int | None = None
    final_num_gpu_blocks: Figure | None = None  # APIServer "… after num_gpu_blocks is: N"
    loading_model: str | None = None  # "Starting to load model X..."
    device_name: str | None = None  # from MoE kernel-config file names (device_name=NVIDIA_H100_80GB_HBM3)
    max_concurrency: Figure | None = None
    max_model_len_printed: int | None = None
    non_default_args: dict[str, Any] = field(default_factory=dict)
    non_default_evidence: str | None = None
    engine_config: dict[str, Any] = field(default_factory=dict)
    engine_config_evidence: str | None = None
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


def parse_launch_flags(argv_text: str) -> dict[str, Any]:
    from ..sglang.logs import parse_launch_flags as _flags

    out = _flags(argv_text)
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


class VllmLogParser(LineGrammar):
    engine = ENGINE
    TRIGGER = TRIGGER_RE
    TIMESTAMP = RE_TIMESTAMP

    def __init__(self) -> None:
        self.log = VllmLog()
        self._last_worker: VllmWorker | None = None
        self._saw_figures = False
        self._ts: str | None = None  # "MM-DD HH:MM:SS" of the line being read (same-year logs compare as text)
        self._figures_ts: str | None = None  # the latest timestamp of a line read since the figures began

    def _worker(self, line: str, msg_start: int) -> VllmWorker:
        m = PREFIX_RE.search(line, 0, max(msg_start, 0) + 1)
        if m is None:
            # a continuation line of a multi-line message, or an unprefixed single-process log
            if self._last_worker is not None and not re.match(r"\s*(INFO|DEBUG|WARNING|ERROR)\b", line):
                return self._last_worker
            label = ""
        else:
            name, pid = m.group(1), m.group(2)
            tags = TAG_RE.findall(name)
            rank = re.search(r"rank=(\d+)", name)
            if any(t == "TP" for t, _ in tags):
                label = " ".join(f"{t}{n}" for t, n in tags)
            elif rank:
                label = f"rank{rank.group(1)}"  # "(VllmWorker rank=3 pid=…)": the worker's global rank
            elif name.startswith("EngineCore") or name in ("APIServer", "MainProcess"):
                label = ""  # the engine core runs the (only) worker in-process at TP1
            else:
                label = f"{name} pid={pid}"
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

    def _event(self, kind: str, values: dict[str, Any], ev: str) -> None:
        counts = self.log.event_counts
        counts[kind] = counts.get(kind, 0) + 1
        lst = self.log.events.setdefault(kind, [])
        if len(lst) < MAX_EVENTS_PER_KIND:
            lst.append(Event(kind, values, ev))

    def _restart_if_needed(self) -> bool:
        """True when this start line begins a new start (the figures so far belonged to an earlier one)."""
        if self._saw_figures:
            if self._ts is not None and self._figures_ts is not None and self._ts < self._figures_ts:
                return False  # printed before the figures already read: a paste out of order, not a new start
            starts, matched = self.log.starts_seen, self.log.matched_lines
            self.log = VllmLog(starts_seen=starts, matched_lines=matched)
            self._last_worker = None
            self._saw_figures = False
            self._figures_ts = None
        return True

    def _dispatch(self, lineno: int, line: str, key: str, pos: int) -> bool:  # noqa: C901 - a table
        lg = self.log
        ev = evidence(lineno, line)
        if key in ("Model loading took", "Loading model weights took"):
            m = RE_WEIGHTS.search(line)
            if not m:
                return False
            if m.group(2) == "GB":
                lg.version_markers.add("v0_weights_gb")
            elif m.group(3):
                lg.version_markers.add("weights_memory_word")
            elif "." in m.group(1) and len(m.group(1).split(".")[1]) == 4:
                lg.version_markers.add("weights_4dp")
            self._worker(line, pos).weights_gib = Figure(float(m.group(1)), ev)
            self._saw_figures = True
            return True
        if key == "Available KV cache memory":
            m = RE_AVAILABLE_KV.search(line)
            if not m:
                return False
            self._worker(line, pos).available_kv_gib = Figure(float(m.group(1)), ev)
            self._saw_figures = True
            return True
        if key == "KV cache size: ":
            m = RE_KV_TOKENS.search(line)
            if not m:
                return False
            lg.kv_cache_tokens = Figure(_int(m.group(2)), ev)
            c = RE_CONCURRENCY.search(line)
            if c:
                lg.version_markers.add("merged_capacity")
                lg.max_model_len_printed = _int(c.group(1))
                lg.max_concurrency = Figure(float(c.group(2)), ev)
            else:
                lg.version_markers.add("split_capacity")
            self._saw_figures = True
            return True
        if key == "Maximum concurrency for":
            m = RE_CONCURRENCY.search(line)
            if not m:
                return False
            lg.max_model_len_printed = _int(m.group(1))
            lg.max_concurrency = Figure(float(m.group(2)), ev)
            return True
        if key.endswith(" blocks: "):
            m = RE_BLOCKS.search(line)
            if not m:
                return False
            lg.version_markers.add("v0_blocks")
            lg.num_gpu_blocks = Figure(int(m.group(1)), ev)
            lg.num_cpu_blocks = int(m.group(2)) if m.group(2) else None
            self._saw_figures = True
            return True
        if key == "num_gpu_blocks is: ":
            m = RE_FINAL_BLOCKS.search(line)
            if not m:
                return False
            lg.final_num_gpu_blocks = Figure(int(m.group(1)), ev)
            return True
        if key == "EngineCore failed to start":
            self._event("engine_failed", {}, ev)
            return True
        if key == "Starting to load model":
            m = RE_LOADING_MODEL.search(line)
            if m:
                lg.loading_model = m.group(1)
            return True
        if key == "Capturing CUDA graphs (":
            m = re.search(r"Capturing CUDA graphs \(([^)]*)\)", line)
            self._event("cuda_graph_capture", {"mode": m.group(1) if m else ""}, ev)
            return True
        if key == "on startup. Desired GPU memory utilization":
            m = RE_STARTUP_SUMMARY.search(line)
            if not m:
                return False
            free, total, util, req, consumed, peak, cg, fit_b, _fit_g, _full_b, _full_g, in_use = m.groups()
            w = self._worker(line, pos)
            lg.version_markers.add("startup_summary")
            w.initial_free_gib = Figure(float(free), ev)
            w.total_gpu_gib = Figure(float(total), ev)
            w.requested_util = float(util)
            w.requested_gib = Figure(float(req), ev)
            w.consumed_gib = Figure(float(consumed), ev)
            w.torch_peak_increase_gib = Figure(float(peak), ev)
            w.cuda_graph_gib = Figure(float(cg), ev)
            w.kv_fit_bytes = int(fit_b) if fit_b else None
            if in_use is not None:
                w.available_kv_gib = Figure(float(in_use), ev)
            self._saw_figures = True
            return True
        if key == "device_name=":
            name = device_name_in(line)
            if name is None:
                return False
            lg.device_name = name
            return True
        if key == "died, exit code":
            self._event("worker_died", {}, ev)
            return True
        if key == "Cudagraph is disabled":
            self._event("cudagraph_disabled", {}, ev)
            return True
        if key == "Memory profiling results":
            w = self._worker(line, pos)
            w.v0_profile = {k: float(v) for k, v in RE_V0_PROFILE.findall(line)}
            u = RE_V0_UTIL.search(line)
            if u:
                w.v0_profile["gpu_memory_utilization"] = float(u.group(1))
            w.v0_profile_evidence = ev
            lg.version_markers.add("v0_profile")
            self._saw_figures = True
            return bool(w.v0_profile)
        if key == "Memory profiling takes":
            m = RE_PROFILE_V1.search(line)
            if not m:
                self._worker(line, pos)  # first line of the 3-line summary: remember the worker
                return True
            w = self._worker(line, pos)
            lg.version_markers.add("v1_profile_debug")
            w.non_kv_gib, w.torch_peak_increase_gib, w.non_torch_increase_gib, w.profile_weights_gib = (
                Figure(float(x), ev) for x in m.groups())
            return True
        if key == "the current vLLM instance can use":
            m = RE_CAN_USE.search(line)
            if not m:
                return False
            w = self._worker(line, pos)
            lg.version_markers.add("can_use_summary")
            w.total_gpu_gib = Figure(float(m.group(1)), ev)
            w.requested_util = float(m.group(2))
            w.requested_gib = Figure(float(m.group(3)), ev)
            return True
        if key == "model weights take":
            m = RE_TAKES.search(line)
            if not m:
                return False
            w = self._worker(line, pos)
            weights, non_torch, peak, rest = (float(x) for x in m.groups())
            w.profile_weights_gib = Figure(weights, ev)
            w.non_torch_increase_gib = Figure(non_torch, ev)
            w.torch_peak_increase_gib = Figure(peak, ev)
            w.available_kv_gib = Figure(rest, ev)
            self._saw_figures = True
            return True
        if key == "Initial free memory":
            m = RE_INITIAL_FREE.search(line)
            if m and m.group(2):
                w = self._worker(line, pos)
                w.initial_free_gib = Figure(float(m.group(1)), ev)
                w.requested_util = float(m.group(2))
                w.requested_gib = Figure(float(m.group(3)), ev)
                return True
            m = RE_PROFILING_ERROR.search(line)
            if m:
                self._event("profiling_error", {"initial_free_gib": float(m.group(1)),
                                                "current_free_gib": float(m.group(2))}, ev)
                return True
            if "as specified by kv_cache_memory_bytes" in line:
                return self._dispatch(lineno, line, "as specified by kv_cache_memory_bytes", pos)
            return False
        if key == "Estimated CUDA graph memory":
            m = RE_CG_ESTIMATE.search(line)
            if not m:
                return False
            lg.version_markers.add("cg_estimate")
            self._worker(line, pos).cuda_graph_estimate_gib = Figure(float(m.group(1)), ev)
            return True
        if key == "Graph capturing finished":
            m = RE_CG_TOOK.search(line)
            if not m:
                return False
            self._worker(line, pos).cuda_graph_gib = Figure(float(m.group(2)), ev)
            return True
        if key == "CUDA graph pool memory":
            m = RE_CG_POOL.search(line)
            if not m:
                return False
            self._worker(line, pos).cuda_graph_pool_actual_gib = Figure(float(m.group(1)), ev)
            return True
        if key == "CUDA graph memory profiling is":
            m = RE_CG_UTIL.search(line)
            self._event("cg_util_equivalent", {"util": float(m.group(1)), "equivalent": float(m.group(2))}
                        if m else {}, ev)
            return True
        if key == "max seq len":
            m = RE_V0_MAX_SEQ.search(line)
            if not m:
                return False
            lg.version_markers.add("v0_max_seq_error")
            self._event("max_seq_len_too_large", {"max_model_len": int(m.group(1)), "kv_tokens": int(m.group(2))}, ev)
            return True
        if key == "To serve at least one request":
            m = RE_SERVE_ONE.search(line)
            if not m:
                return False
            lg.version_markers.add("serve_one_models_s" if "models's" in line else "serve_one_model_s")
            if "conserving_memory" in line:
                lg.version_markers.add("serve_one_docs_link")
            elif re.search(r"when initializing the engine\.\s*$", line):
                lg.version_markers.add("serve_one_no_docs_link")
            self._event("serve_one_request", {
                "max_model_len": int(m.group(1)), "needed_gib": float(m.group(2)),
                "available_gib": float(m.group(3)),
                "estimated_max_model_len": int(m.group(4)) if m.group(4) else None}, ev)
            return True
        if key == "No available memory for the cache blocks":
            self._event("no_available_memory", {}, ev)
            return True
        if key == "on startup is less than desired GPU memory utilization":
            m = RE_FREE_LESS.search(line)
            if not m:
                return False
            self._event("free_less_than_util", {"free_gib": float(m.group(1)), "total_gib": float(m.group(2)),
                                                "util": float(m.group(3)), "requested_gib": float(m.group(4))}, ev)
            return True
        if key == "Error in memory profiling":
            m = RE_PROFILING_ERROR.search(line)
            self._event("profiling_error", {"initial_free_gib": float(m.group(1)), "current_free_gib": float(m.group(2))}
                        if m else {}, ev)
            return True
        if key in ("auto-fit max_model_len", "Auto-fit max_model_len"):
            m = RE_AUTOFIT.search(line)
            if m:
                self._event("auto_fit", {"from": int(m.group(1)), "to": int(m.group(2))}, ev)
            else:
                self._event("auto_fit_failed" if "Cannot" in line else "auto_fit", {}, ev)
            return True
        if key == "non-default args":
            m = RE_NON_DEFAULT.search(line)
            if not m:
                return False
            if self._restart_if_needed() or self.log.starts_seen == 0:
                self.log.starts_seen += 1
            self.log.non_default_args = parse_dict_repr(m.group(1))
            self.log.non_default_evidence = ev
            return True
        if key in ("LLM engine (v", "LLM engine with config"):
            v = RE_VERSION.search(line)
            if v:
                lg.version_printed = v.group(1)
            m = RE_ENGINE_CONFIG.search(line)
            if m:
                lg.engine_config = parse_kv_repr(m.group(1))
                lg.engine_config_evidence = ev
            return True
        if key in ("API server version", "vLLM server version"):
            v = RE_VERSION.search(line)
            if not v:
                return False
            if lg.version_printed is None or not self._saw_figures:
                lg.version_printed = v.group(1)
            return True
        if key in ("vllm serve", "vllm.entrypoints.openai.api_server"):
            m = RE_LAUNCH.search(line)
            if not m:
                return False
            self._restart_if_needed()
            self.log.launch_flags = parse_launch_flags(m.group(1))
            self.log.launch_evidence = ev
            return True
        if key == "Custom allreduce is disabled":
            self._event("custom_ar_disabled", {"reason": custom_ar_disabled_reason(line)}, ev)
            return True
        if key in ("out of memory", "OutOfMemoryError"):
            if not RE_OOM.search(line):
                return False
            self._event("oom", {"after_start": bool(lg.events.get("server_ready"))}, ev)
            return True
        if key == "Application startup complete":
            self._event("server_ready", {}, ev)
            return True
        if key == "preempted by PreemptionMode":
            self._event("preempted", {}, ev)
            return True
        if key == '"kv_cache_tokens"':
            try:
                rec = json.loads(line[line.index("{"): line.rindex("}") + 1])
            except (ValueError, RecursionError):
                return False
            if not isinstance(rec, dict):
                return False
            lg.record = rec
            lg.record_evidence = ev
            self._saw_figures = True
            return True
        if key == "Overriding num_gpu_blocks":
            m = RE_OVERRIDE_BLOCKS.search(line)
            if not m:
                return False
            self._event("num_gpu_blocks_override", {"computed": int(m.group(1)), "override": int(m.group(2))}, ev)
            return True
        if key == "as specified by kv_cache_memory_bytes":
            m = RE_KV_BYTES_FLAG.search(line)
            self._event("kv_cache_memory_bytes", {"reserved_gib": float(m.group(1))} if m else {}, ev)
            return True
        if key == "Setting kv cache block size":
            m = RE_BLOCK_SIZE.search(line)
            if not m:
                return False
            lg.block_size = int(m.group(1))
            return True
        if key == "Automatically detected platform":
            return True
        return False

    def result(self) -> VllmLog:
        return self.log


def version_specifier(markers: set[str]) -> str:
    """The vLLM version range the log's line formats imply (the SGLang helper over vLLM's markers)."""
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
    from ...units import gib_to_bytes

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


def rank_timelines(log: VllmLog) -> list:
    """Each worker's printed figures as the shared RankTimeline.

    vLLM prints torch-allocated weights and profile increases, not device free memory after each
    step, so the phase boundaries after ``init`` are derived (before − printed use) and say so.
    """
    from ...timeline import PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_WEIGHTS, PHASE_PROFILE, Phase, RankTimeline
    from ...units import gib_to_bytes

    out = []
    workers = sorted(log.workers.values(), key=_worker_sort_key)
    tp_ids = [w.tags.get("TP") for w in workers]
    tp_unique = None not in tp_ids and len(set(tp_ids)) == len(tp_ids)
    for idx, w in enumerate(workers):
        p = worker_profile(w)
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
        prof_used = None
        if "non_kv_gib" in p and "weights_gib" in p:
            prof_used = gib_to_bytes(p["non_kv_gib"] - p["weights_gib"])
        elif "torch_peak_increase_gib" in p and "non_torch_increase_gib" in p:
            prof_used = gib_to_bytes(p["torch_peak_increase_gib"] + p["non_torch_increase_gib"])
        elif "consumed_gib" in p and "torch_peak_increase_gib" in p:
            prof_used = gib_to_bytes(p["torch_peak_increase_gib"])  # non-torch is inside "consumed"
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
        decision: dict[str, Any] = {"rank_label": w.label}
        names = {"initial_free_gib": "init_free_bytes", "requested_gib": "requested_memory_bytes",
                 "total_gpu_gib": "total_memory_bytes", "weights_gib": "weights_bytes",
                 "non_kv_gib": "non_kv_cache_memory_bytes", "torch_peak_increase_gib": "torch_peak_increase_bytes",
                 "non_torch_increase_gib": "non_torch_increase_bytes", "available_kv_gib": "available_kv_cache_bytes",
                 "cuda_graph_estimate_gib": "cudagraph_memory_estimate_bytes", "cuda_graph_gib": "cuda_graph_bytes",
                 "peak_torch_gib": "peak_torch_memory_bytes"}
        for k, v in p.items():
            if k in names:
                decision[names[k]] = gib_to_bytes(v)
        if "util" in p:
            decision["gpu_memory_utilization"] = p["util"]
        out.append(RankTimeline(rank=w.tags["TP"] if tp_unique else idx, phases=tuple(phases), decision=decision))
    return out
