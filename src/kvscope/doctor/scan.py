"""Reading a log: streaming, bounded, both grammars fed at once; which engine printed it.

Streaming and bounded: the log is read in blocks of bytes (gzip unpacked on the fly, ``MAX_LOG_BYTES``
in all, ``MAX_LINE_BYTES`` per line); what a line is (traffic, startup trigger, traceback, memory-looking)
is decided once per shape of line (``verdict``), and only trigger lines are decoded and parsed. What is
kept does not grow with the log: per-rank figures, a few evidence lines per kind of event, and at most
``MAX_UNPARSED_SAMPLES`` lines it did not understand.
"""

from __future__ import annotations

import re
import sys
import time
import zlib
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Iterator

from ..engines.sglang import logs as sglang_logs
from ..engines.vllm import logs as vllm_logs
from ..errors import LogFormatError
from ..logs.grammar import clean, evidence

MAX_LINE_BYTES = 1 << 20  # a longer line is cut here (and counted); the rest of it is skipped
MAX_UNPARSED_SAMPLES = 20
MAX_STARTUP_LINES = 50_000  # figure lines read in full (runtime events such as a full KV pool are only counted)
SNIFF_BYTES = 8192
ENGINES = ("sglang", "vllm")

TRIGGER = re.compile(
    (sglang_logs.TRIGGER_RE.pattern + "|" + vllm_logs.TRIGGER_RE.pattern).encode("utf-8"))
# Lines about serving traffic: recognised, counted, not memory figures. These patterns read a line
# without its digits (see ``verdict``).
REQUEST_LINE = re.compile(
    rb"Prefill batch|Decode batch|Avg prompt throughput|\"(?:GET|POST) /|HTTP/\.\" |"
    rb"Received request|Finished request|Added request|Aborted request|Engine :(?! vllm cache_config_info)")
# Python tracebacks: the header, the frames and the indented source lines (after any log prefix) are
# counted apart; the exception line that ends a traceback is not indented, so it is read as usual.
TB_START = re.compile(rb"Traceback \(most recent call last\)")
TB_FRAME = re.compile(rb'File "[^"\n]{1,400}", line ')
TB_BODY = re.compile(rb'^(?:[^"\n]{0,160}?[\])] )?\s{2,}\S|^[^\w\n]{0,160}?[\^~]{3,}\s*$')
# A line we did not understand is reported only if it looks memory-related, or is a warning or an error.
MEMORYISH = re.compile(
    rb"(?i)\bmem(?:ory)?\b|\bGiB\b|\bGB\b|\bKV\b|\bOOM\b|out of memory|cuda ?graph|#tokens|"
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
    b"page_size from", b"Capturing ", b"num tokens (", b"on startup.", b"User-specified", b"validation error",
    b"initialization failed", b"CUDA Error: ", b"CUDA error: ", b"Scheduler hit",
)
MEMORYISH_ANCHORS = (b"mem", b"Mem", b"MEM", b"GiB", b"GB", b"KV", b"OOM", b"graph", b"Error", b"ERROR", b"WARN",
                     b"Traceback", b"page", b"gpu_memory")


def _any_in(anchors: tuple[bytes, ...]) -> Callable[[bytes], bool]:
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
    skipped_startup_lines: int = 0  # startup-looking lines past MAX_STARTUP_LINES, counted but not read

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "bytes": self.bytes, "recognised": self.recognised,
                "request_lines": self.request_lines, "unparsed": self.unparsed, "cut_lines": self.cut_lines,
                "traceback_lines": self.traceback_lines,
                "skipped_startup_lines": self.skipped_startup_lines, "seconds": round(self.seconds, 3)}


MAX_LOG_BYTES = 1 << 30  # default cap on the (decompressed) log size: --max-log-gib raises it
BLOCK_BYTES = 1 << 20
MAX_GZIP_MEMBERS = 4096  # concatenated gzip members (logrotate appends); more is not a log
MAX_GZIP_RATIO = 200  # real logs gzip 10-30:1 (timestamps, numbers); past 64 MiB out, 200:1 is a bomb
GZIP_MAGIC = b"\x1f\x8b"
GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer
CUT_MARK = b" \xe2\x80\xa6[cut]"  # " …[cut]" ends a line cut at MAX_LINE_BYTES


def open_log(path: str) -> IO[bytes]:
    """A binary stream for ``path`` (``-`` = stdin); :func:`read_blocks` unpacks gzip."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        raise LogFormatError(f"no such file: {path}", field="PATH") from None
    except IsADirectoryError:
        raise LogFormatError(f"{path} is a directory", field="PATH") from None
    except OSError as exc:
        raise LogFormatError(f"cannot read {path}: {exc.strerror}", field="PATH") from None


def _read(stream: IO[bytes], n: int, name: str) -> bytes:
    try:
        return stream.read(n)
    except OSError as exc:
        raise LogFormatError(f"{name}: cannot read: {exc}", field="PATH") from None


def read_blocks(stream: IO[bytes], name: str = "log", max_bytes: int = MAX_LOG_BYTES) -> Iterator[bytes]:
    """The log as blocks of bytes, gzip unpacked on the fly (streaming: memory stays flat).

    Bounded whatever the input: at most ``max_bytes`` of log (decompressed), at most
    ``MAX_GZIP_MEMBERS`` gzip members, no gzip inside gzip, no deflate ratio beyond what deflate can
    produce from a real text; a corrupt or cut gzip stream is a one-line error, never a traceback."""
    first = _read(stream, BLOCK_BYTES, name)
    blocks = _gunzip(stream, first, name) if first[:2] == GZIP_MAGIC else _plain(stream, first, name)
    total = 0
    for block in blocks:
        total += len(block)
        if total > max_bytes:
            raise LogFormatError(
                f"{name}: the log is larger than {max_bytes / 2**30:g} GiB (the --max-log-gib limit)",
                field="--max-log-gib", fix="raise --max-log-gib, or pass the part of the log with the startup")
        yield block


def _plain(stream: IO[bytes], first: bytes, name: str) -> Iterator[bytes]:
    block = first
    while block:
        yield block
        block = _read(stream, BLOCK_BYTES, name)


def _gunzip(stream: IO[bytes], first: bytes, name: str) -> Iterator[bytes]:
    d = zlib.decompressobj(GZIP_WBITS)
    members, consumed, produced = 1, 0, 0
    for chunk in _plain(stream, first, name):
        consumed += len(chunk)
        while chunk:
            if d.eof:
                if not chunk.strip(b"\x00"):
                    break  # zero padding after the last member
                members += 1
                if members > MAX_GZIP_MEMBERS:
                    raise LogFormatError(f"{name}: more than {MAX_GZIP_MEMBERS:,} gzip members", field="PATH")
                d = zlib.decompressobj(GZIP_WBITS)
            try:
                out = d.decompress(chunk, BLOCK_BYTES)
            except zlib.error as exc:
                raise LogFormatError(f"{name}: corrupt gzip data ({exc})", field="PATH") from None
            chunk = d.unused_data if d.eof else d.unconsumed_tail
            if not out:
                continue
            if produced == 0 and out[:2] == GZIP_MAGIC:
                raise LogFormatError(f"{name}: a gzip file inside a gzip file; unpack the outer one first", field="PATH")
            produced += len(out)
            if produced > 64 << 20 and produced > MAX_GZIP_RATIO * consumed:
                raise LogFormatError(f"{name}: gzip data expands more than {MAX_GZIP_RATIO}:1, which no real log "
                                     "does (a gzip bomb?)", field="PATH",
                                     fix="gunzip it yourself and pass the plain log (with --max-log-gib if large)")
            yield out
    if not d.eof:
        raise LogFormatError(f"{name}: the gzip data ends early (a cut or unfinished file)", field="PATH")


def iter_lines(blocks: Iterable[bytes], name: str = "log") -> Iterator[list[bytes]]:
    """Batches of lines (without their line ends) from blocks of bytes. A line longer than
    ``MAX_LINE_BYTES`` is cut there (the cut part is marked by ending in ``CUT_MARK``); binary input is
    refused. Batches, not single lines: the scan loop stays in one frame."""
    carry = b""
    skipping = False  # inside the unread rest of an over-long line
    first = True
    for block in blocks:
        if first:
            first = False
            if b"\x00" in block[:SNIFF_BYTES]:
                raise LogFormatError(f"{name} is a binary file, not a text log", field="PATH")
        lines = block.split(b"\n")
        if skipping:
            if len(lines) == 1:
                continue
            lines[0] = b""
            skipping = False
            del lines[0]
        elif carry:
            lines[0] = carry + lines[0]
        carry = lines.pop()
        if len(carry) >= MAX_LINE_BYTES:
            lines.append(carry[:MAX_LINE_BYTES] + CUT_MARK)
            carry, skipping = b"", True
        if lines:
            yield lines
    if carry:
        yield [carry]


@dataclass
class Scan:
    """Both grammars after one pass over the log, with the pass's statistics."""

    sglang: sglang_logs.SglangLogParser
    vllm: vllm_logs.VllmLogParser
    stats: LogStats
    samples: list[str]


# What a line is, decided once per shape of line: the verdict cache's key is the line with its digits
# removed, and the verdict is computed on that key (REQUEST_LINE, TB_FRAME and MEMORYISH are written
# for digit-free text; the trigger phrases hold no digit). Deleting digits only ever makes a phrase
# easier to find, so no startup line is missed; the parsers then read the real line.
REQUEST, TRIGGER_HIT, TB_HEAD, TB_BODY_HIT, MEMORYISH_HIT = 1, 2, 4, 8, 16
DIGITS = b"0123456789"
MAX_VERDICTS = 1 << 14


def verdict(key: bytes) -> int:
    """The classes a line of this shape (its text without digits) belongs to."""
    if REQUEST_LINE.search(key):
        return REQUEST
    v = 0
    if has_trigger_anchor(key) and TRIGGER.search(key):
        v |= TRIGGER_HIT
    if (b"Traceback" in key and TB_START.search(key)) or (b"File" in key and TB_FRAME.search(key)):
        v |= TB_HEAD
    if TB_BODY.search(key):
        v |= TB_BODY_HIT
    if has_memoryish_anchor(key) and MEMORYISH.search(key):
        v |= MEMORYISH_HIT
    return v


def scan(batches: Iterable[list[bytes]]) -> Scan:
    """Feed every startup-looking line to both grammars; count the rest by the verdict of its shape."""
    sg, vl = sglang_logs.SglangLogParser(), vllm_logs.VllmLogParser()
    n = nbytes = recognised = requests = unparsed = cut = tb_lines = fed = skipped = 0
    in_tb = False
    samples: list[str] = []
    verdicts: dict[bytes, int] = {}
    event_shapes: dict[bytes, tuple[str | None, str | None]] = {}  # shapes read in full as pure events
    t0 = time.perf_counter()
    for batch in batches:
        for raw in batch:
            n += 1
            size = len(raw)
            nbytes += size + 1
            if size > MAX_LINE_BYTES:
                cut += 1
            key = raw.translate(None, DIGITS)
            v = verdicts.get(key)
            if v is None:
                if len(verdicts) >= MAX_VERDICTS:
                    verdicts.clear()
                v = verdicts[key] = verdict(key)
            if v == REQUEST:  # first: the bulk of a long log, and never a startup line
                requests += 1
                continue
            if not v:
                in_tb = False
                continue
            if v & TRIGGER_HIT:
                kinds = event_shapes.get(key)
                if kinds is not None and sg.events_full(kinds[0]) and vl.events_full(kinds[1]):
                    text = raw.decode("utf-8", "replace")  # a runtime event line seen before: count it
                    sg.count_event(kinds[0], text)
                    vl.count_event(kinds[1], text)
                    recognised += 1
                    in_tb = False
                    continue
                fed += 1
                if fed > MAX_STARTUP_LINES:
                    skipped += 1
                    continue
                text = raw.decode("utf-8", "replace")
                a = sg.feed(n, text)
                b = vl.feed(n, text)
                if a or b:
                    recognised += 1
                    in_tb = False
                    kinds = (sg.last_event if a else None, vl.last_event if b else None)
                    if (a and kinds[0] is None) or (b and kinds[1] is None):
                        event_shapes.pop(key, None)  # a figure line: always read in full
                    elif len(event_shapes) < MAX_VERDICTS:
                        event_shapes[key] = kinds
                    continue
            if v & TB_HEAD:
                in_tb = True  # a frame starts one too: excerpts often begin in the middle of a traceback
                tb_lines += 1
                continue
            if in_tb:
                if v & TB_BODY_HIT:
                    tb_lines += 1
                    continue
                in_tb = False
            if v & MEMORYISH_HIT:
                unparsed += 1
                if len(samples) < MAX_UNPARSED_SAMPLES:
                    samples.append(evidence(n, clean(raw.decode("utf-8", "replace"))))
    stats = LogStats(n, nbytes, recognised, requests, unparsed, cut, time.perf_counter() - t0, tb_lines, skipped)
    return Scan(sg, vl, stats, samples)


def score(log: sglang_logs.SglangLog | vllm_logs.VllmLog) -> int:
    """How much of the log this engine's grammar recognised (the doctor picks the higher)."""
    if isinstance(log, sglang_logs.SglangLog):
        strong = 5 * bool(log.server_args or log.launch_flags) + 2 * len(log.ranks)
    else:
        strong = 5 * bool(log.non_default_args or log.engine_config or log.launch_flags or log.version_printed) + 2 * len(log.workers)
    return log.matched_lines + strong


def pick_engine(s: Scan, name: str) -> str:
    """The engine whose grammar recognised more (SGLang on a tie); refuses a log neither knows."""
    sg_log, vl_log = s.sglang.result(), s.vllm.result()
    if sg_log.is_empty and vl_log.is_empty:
        raise LogFormatError(
            f"{name}: no SGLang or vLLM startup lines found in {s.stats.lines:,} lines "
            "(expected e.g. 'Load weight end. … avail mem=' or 'Available KV cache memory:')",
            field="PATH", fix="pass --engine sglang|vllm to read it anyway")
    return "sglang" if score(sg_log) >= score(vl_log) else "vllm"
