"""Rules both engines share: the flags as observed, custom all-reduce on PCIe, and the findings
about the log itself (unparsed lines, restarts, cut lines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..hardware.gpus import GPU, get_gpu
from ..logs.grammar import ParsedLog
from .findings import CUSTOM_ALLREDUCE, INFO, RESTARTS, UNPARSED_LINES, WARNING, Analysis, as_float, as_int
from .scan import MAX_LINE_BYTES, MAX_STARTUP_LINES, Scan

_TRUE = (True, "True", "true", 1)


@dataclass(frozen=True)
class ObservedFlags:
    """The flags a log shows (or ``--set`` assumed), typed once; engine subclasses add theirs.
    ``source``: where each flag came from; ``present``: the flags the log (or --set) holds."""

    source: Mapping[str, str]
    present: frozenset[str]
    gpu: str | None  # ``--set gpu=…`` (a hardware-catalog name)
    disable_custom_all_reduce: bool

    @staticmethod
    def common(flags: Mapping[str, Any], source: Mapping[str, str]) -> dict[str, Any]:
        """The base fields, for the engine subclasses' builders."""
        gpu = flags.get("gpu")
        return {"source": dict(source), "present": frozenset(flags), "gpu": str(gpu) if gpu else None,
                "disable_custom_all_reduce": flags.get("disable_custom_all_reduce") in _TRUE}


def int_flag(flags: Mapping[str, Any], key: str) -> int | None:
    return as_int(flags.get(key))


def float_flag(flags: Mapping[str, Any], key: str) -> float | None:
    return as_float(flags.get(key))


def text_flag(flags: Mapping[str, Any], key: str) -> str | None:
    """The flag as text, ``None`` when absent or empty (``--kv-cache-dtype`` …)."""
    value = flags.get(key)
    return str(value) if value else None


def pcie_only_gpu(flags: ObservedFlags, device_name: str | None) -> GPU | None:
    """The GPU (hardware catalog) when the log or ``--set gpu=…`` names one without full NVLink, else None."""
    for name in (flags.gpu, device_name):
        if not name:
            continue
        try:
            g = get_gpu(str(name))
        except Exception:  # noqa: BLE001 - an unknown name just means no topology
            continue
        return None if g.interconnect.is_full_nvlink else g
    return None


def custom_allreduce_forced(an: Analysis, log: ParsedLog, flags: ObservedFlags, world: int | None,
                            reached_init: bool, engine: str) -> None:
    """Custom all-reduce on >2 PCIe-only GPUs: both engines turn it off there ("Custom allreduce is
    disabled because it's not supported on more than two PCIe-only GPUs"), so a start that got past
    that point on such GPUs without the warning and without --disable-custom-all-reduce ran with it
    forced on (a patched gate or an env override; vllm-project/vllm#56128)."""
    if not world or world <= 2 or not reached_init or log.events.get("custom_ar_disabled"):
        return
    if flags.disable_custom_all_reduce:
        return
    g = pcie_only_gpu(flags, log.device_name)
    if g is None:
        return
    src = "--set gpu" if flags.gpu else "the MoE kernel-config name in the log"
    an.add(CUSTOM_ALLREDUCE, WARNING,
           f"custom all-reduce looks forced on over {world} PCIe-only {g.name} GPUs (GPU from {src}): "
           f"{'SGLang' if engine == 'sglang' else 'vLLM'} turns it off on more than two PCIe-only GPUs and prints "
           "'Custom allreduce is disabled …', which this start did not; on PCIe it contends for the bus (slower than NCCL "
           "beyond small messages) and its IPC buffers take memory outside the KV budget",
           [], "drop the patch / env override, or pass --disable-custom-all-reduce (NCCL is faster here)")


def custom_allreduce_disabled(an: Analysis, log: ParsedLog, pcie_note: str) -> None:
    """The engine printed that it turned custom all-reduce off (the first such line)."""
    for e in log.events.get("custom_ar_disabled", [])[:1]:
        reason = e.values.get("reason")
        an.add(CUSTOM_ALLREDUCE, INFO,
               "custom all-reduce is disabled" + (f" on more than two PCIe-only GPUs ({pcie_note})"
                                                  if reason == "pcie" else f" ({reason})"),
               e.evidence, None)


def log_findings(an: Analysis, s: Scan, starts_seen: int) -> None:
    """What the doctor says about the log itself."""
    if s.stats.unparsed:
        an.add(UNPARSED_LINES, INFO, f"{s.stats.unparsed:,} memory-related line(s) were not understood; see 'unparsed'",
               tuple(s.samples[:3]), None)
    if starts_seen > 1:
        an.add(RESTARTS, INFO, f"the log holds {starts_seen} server starts; the figures are from the last one", (), None)
    if s.stats.skipped_startup_lines:
        an.add(UNPARSED_LINES, WARNING, f"{s.stats.skipped_startup_lines:,} startup-looking line(s) after the first "
               f"{MAX_STARTUP_LINES:,} were counted, not read: the figures and event counts are those of the first "
               f"{MAX_STARTUP_LINES:,}", (), None)
    if s.stats.cut_lines:
        an.add(UNPARSED_LINES, WARNING, f"{s.stats.cut_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were cut", (), None)
