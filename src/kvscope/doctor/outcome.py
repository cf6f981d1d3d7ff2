"""Failed starts, both engines: the phase that failed, the engine's own error line, the figures it
printed and the fix for that phase (the fixes go opposite ways: weights that do not fit want more
GPUs, a graph capture that runs out wants a smaller memory fraction).

The phase is the one the log had reached when the error was printed (``LineGrammar.phase_now``), or
the one the message itself names (SGLang's "Capture cuda graph failed", vLLM's config validation).
Rules as data: one row per (engine, phase).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..logs.grammar import PHASES, Event
from .findings import ERROR, STARTUP_FAILED, Analysis

# the most telling first: a line that names the cause before the exception that carried it
FAILURE_EVENTS = ("max_model_len_invalid", "config_invalid", "graph_capture_failed", "oom", "cuda_error",
                  "scheduler_exception")


@dataclass(frozen=True)
class PhaseFailure:
    code: str  # the finding's code
    what: str  # the phase, as the report names it
    fix: str


UNKNOWN_PHASE = PhaseFailure(
    "startup-oom", "start-up (the log shows no phase line before the error)",
    "the phase decides the fix: out of memory while loading weights wants more GPUs or a quantized checkpoint; "
    "after the KV cache was sized, a smaller --mem-fraction-static / --gpu-memory-utilization")

FAILURES: dict[tuple[str, str], PhaseFailure] = {
    ("sglang", "unknown"): UNKNOWN_PHASE,
    ("vllm", "unknown"): UNKNOWN_PHASE,
    ("sglang", "init"): PhaseFailure(
        "init-oom", "initialisation (before the weights)",
        "another process holds GPU memory (nvidia-smi), or the communicators do not fit: free the GPUs"),
    ("sglang", "load_weights"): PhaseFailure(
        "load-oom", "weight load",
        "the weights do not fit: use more GPUs (--tp), a quantized checkpoint, or free the GPUs"),
    ("sglang", "kv_alloc"): PhaseFailure(
        "kv-alloc-oom", "KV cache allocation",
        "the pool was sized from free memory that was gone when it was allocated: lower --mem-fraction-static "
        "(e.g. by 0.05), or stop other processes on the GPUs"),
    ("sglang", "cuda_graph"): PhaseFailure(
        "cuda-graph-oom", "CUDA graph capture",
        "SGLang's own advice (cuda_graph_runner.py): set --mem-fraction-static to a smaller value (e.g. 0.8 or "
        "0.7), or --cuda-graph-max-bs to a smaller value (e.g. 16); --disable-cuda-graph as a last resort"),
    ("sglang", "warmup"): PhaseFailure(
        "warmup-oom", "warm-up (the first request)",
        "the slack left for activations is too small: lower --mem-fraction-static (e.g. by 0.05) or "
        "--chunked-prefill-size"),
    ("vllm", "config_validation"): PhaseFailure(
        "config-invalid", "config validation (before any GPU work)",
        "set --max-model-len at or below the model's limit, or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model "
        "really supports more (rope scaling)"),
    ("vllm", "init"): PhaseFailure(
        "init-oom", "initialisation (before the weights)",
        "another process holds GPU memory (nvidia-smi), or the communicators do not fit: free the GPUs"),
    ("vllm", "load_weights"): PhaseFailure(
        "load-oom", "weight load",
        "the weights do not fit: use more GPUs (--tensor-parallel-size), a quantized checkpoint, or free the GPUs"),
    ("vllm", "kv_sizing"): PhaseFailure(
        "profile-oom", "memory profiling (the dummy forward pass)",
        "the profiling pass's activations do not fit: lower --max-num-batched-tokens or --max-num-seqs, "
        "or use more GPUs"),
    ("vllm", "kv_alloc"): PhaseFailure(
        "kv-alloc-oom", "KV cache allocation",
        "the cache was sized from free memory that was gone when it was allocated: lower "
        "--gpu-memory-utilization (e.g. by 0.05), or stop other processes on the GPUs"),
    ("vllm", "cuda_graph"): PhaseFailure(
        "cuda-graph-oom", "CUDA graph capture",
        "lower --gpu-memory-utilization (graphs come out of what it leaves), --max-num-seqs or the capture "
        "sizes, or --enforce-eager"),
    ("vllm", "warmup"): PhaseFailure(
        "warmup-oom", "warm-up (sampler / first request)",
        "vLLM's own advice (gpu_model_runner.py): lower --max-num-seqs or --gpu-memory-utilization"),
}


def line_number(e: Event) -> int:
    """The line an event was read from (its evidence begins ``L<n>:``)."""
    head = e.evidence.split(":", 1)[0]
    return int(head[1:]) if head[1:].isdigit() else 0


def first_failure(events: dict[str, list[Event]], reached: str) -> Event | None:
    """The failure the log printed first before the server was serving (a later one is a runtime error),
    in the last phase the log ``reached`` (an error the engine got past was not fatal); of that
    phase's lines, the most specific (``FAILURE_EVENTS`` order)."""
    last = PHASES.index(reached)
    found = [e for kind in FAILURE_EVENTS for e in events.get(kind, ())
             if e.values.get("phase") not in (None, "serving") and PHASES.index(e.values["phase"]) >= last]
    if not found:
        return None
    phase = min(found, key=line_number).values["phase"]  # the first phase that failed; its most telling line
    return min((e for e in found if e.values["phase"] == phase),
               key=lambda e: (FAILURE_EVENTS.index(e.kind), line_number(e)))


def _figures(e: Event) -> str:
    v = e.values
    if "tried_gib" in v:
        return (f": GPU {v['gpu']} tried to allocate {v['tried_gib']:g} GiB with {v['free_gib']:g} GiB free "
                f"of {v['total_gib']:g} GiB")
    if e.kind == "max_model_len_invalid" and v.get("max_model_len"):
        return (f": max_model_len {int(v['max_model_len']):,} > the model's {v['derived_key']}="
                f"{v['derived']}")
    return ""


def failed_start(an: Analysis, engine: str, events: dict[str, list[Event]], counts: dict[str, Any],
                 reached: str) -> bool:
    """The fatal failure before serving, as a finding naming the phase; sets ``starts`` / ``failed_at``."""
    e = first_failure(events, reached)
    if e is None:
        return False
    phase = e.values["phase"]
    row = FAILURES.get((engine, phase)) or FAILURES[(engine, "init")]
    more = counts.get(e.kind, 1) - 1
    again = f" ({more} more such line(s))" if more > 0 else ""
    if e.values.get("oom"):  # oom_rule lines, and failure lines whose text is out of memory
        an.add(row.code, ERROR, f"{engine_name(engine)} failed at {row.what}: out of memory{_figures(e)}{again}",
               [e.evidence], row.fix)
    elif e.kind in ("max_model_len_invalid", "config_invalid"):
        an.add(row.code, ERROR, f"{engine_name(engine)} failed at {row.what}: refused its configuration{_figures(e)}",
               [e.evidence], row.fix)
    else:  # an exception that is not about memory: the traceback's last line says what
        an.add(STARTUP_FAILED, ERROR, f"{engine_name(engine)} failed at {row.what}: an error that is not out of "
               f"memory{again}", [e.evidence], "read the exception at the end of the traceback in the log")
    an.starts = False
    an.error = an.error or e.evidence
    an.extra["failed_at"] = phase
    return True


def engine_name(engine: str) -> str:
    return {"sglang": "SGLang", "vllm": "vLLM"}.get(engine, engine)
