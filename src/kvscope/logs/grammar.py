"""The line grammar both engines' log parsers share, and the rules common to both.

A parser is a table of ``Rule(trigger, pattern, handle)``: ``trigger`` is a phrase (a regex
fragment without capturing groups) whose presence makes a line worth reading, ``pattern`` the
regex that must then match the line (``None``: the handler reads the line itself), ``handle`` what
to record. ``LineGrammar`` joins the triggers, in table order, into one alternation of named
groups: one search per line finds the phrase, and the group's name picks the rule (a dict lookup,
no if-chain). A handler returns ``False`` when the line is not what it looks for after all;
anything else means the line was recognised.

Memory is bounded: at most ``MAX_RANKS`` ranks / workers, ``MAX_OBS_PER_RANK`` observations of a
kind per rank and ``MAX_EVENTS_PER_KIND`` evidence lines per kind of event are kept, whatever the
log length.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Optional, Protocol

MAX_RANKS = 1024
MAX_EVENTS_PER_KIND = 8
MAX_OBS_PER_RANK = 16  # load / KV-pool / graph-capture observations kept per rank and start
MAX_EVIDENCE_CHARS = 400

# real escapes, and the caret notation ("^[[0;36m") that terminals/pagers leave in pasted logs
ANSI_RE = re.compile(r"(?:\x1b|\^\[)\[[0-9;?]*[ -/]*[@-~]")
RE_DEVICE_NAME = re.compile(r"device_name=([A-Za-z][\w-]*?)(?:[,.\s]|\.json|$)")


def clean(line: str) -> str:
    """Strip ANSI colours and line endings (CRLF logs from Windows included)."""
    if "\x1b" in line or "^[[" in line:
        line = ANSI_RE.sub("", line)
    return line.rstrip("\r\n")


def bounded_append(lst: list[Any], item: Any) -> Any:
    """Append ``item``, or replace the last entry once ``MAX_OBS_PER_RANK`` are kept: a log that repeats a
    figure line without end (no new start between) costs no memory, and the latest figure still wins."""
    if len(lst) < MAX_OBS_PER_RANK:
        lst.append(item)
    else:
        lst[-1] = item
    return item


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
class Event:
    """One recognised log event: its kind, values and the evidence line."""

    kind: str
    values: dict[str, Any]
    evidence: str


# ---------------------------------------------------------------------------------------------
# Values as printed
# ---------------------------------------------------------------------------------------------

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


def parse_launch_flags(argv_text: str, aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``--tp 8 --mem-fraction-static 0.55 --trust-remote-code`` -> snake_case names (``aliases``
    maps a spelling to the engine's field name: ``tp`` -> ``tp_size``)."""
    aliases = aliases or {}
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
            key = aliases.get(key, key)
            if eq:
                out[key] = literal(value)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                out[key] = literal(tokens[i + 1])
                i += 1
            else:
                out[key] = True
        i += 1
    return out


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


def version_specifier(markers: set[str], table: Mapping[str, str]) -> str:
    """The PEP 440 range the log's line formats imply (``""`` when nothing is known).
    ``table`` maps a line-format marker to the range it implies (each engine's ``VERSION_MARKERS``)."""
    specs: list[str] = []
    for m in sorted(markers):
        spec = table.get(m)
        if spec:
            specs.extend(spec.split(","))
    return ",".join(sorted(set(specs)))


# ---------------------------------------------------------------------------------------------
# The rule table and the parser skeleton
# ---------------------------------------------------------------------------------------------

class ParsedLog(Protocol):
    """What every engine's log record carries (``SglangLog``, ``VllmLog``)."""

    events: dict[str, list[Event]]
    event_counts: dict[str, int]
    launch_flags: dict[str, Any]
    launch_evidence: str | None
    version_printed: str | None
    device_name: str | None
    matched_lines: int
    starts_seen: int


@dataclass(frozen=True)
class Line:
    """A line a trigger phrase was found in."""

    lineno: int
    text: str  # cleaned (no ANSI colours, no line ending)
    key: str  # the trigger phrase as printed
    pos: int  # where the phrase starts: the log prefix (rank / worker tags) is before it
    ev: str  # the evidence string ("L12: …")


Handler = Callable[[Any, Optional["re.Match[str]"], Line], Optional[bool]]


@dataclass(frozen=True)
class Rule:
    """``trigger``: the phrase (regex fragment, no capturing groups); ``pattern``: must match the
    line, its match is handed to ``handle`` (``None``: ``handle`` gets ``None`` and reads the line);
    ``handle(parser, match, line)`` records what the line says, ``False`` = not recognised."""

    trigger: str
    pattern: re.Pattern[str] | None
    handle: Handler
    event: str | None = None  # the event kind, when recording that event is all the rule does


class LineGrammar:
    """What both engines' log parsers share: find a trigger phrase in the cleaned line (no ANSI colours,
    no line end), note the line's timestamp, hand the line to the rule of that phrase, and keep the latest
    timestamp seen since the figures began (restart detection). Subclasses set ``RULES`` and
    ``TIMESTAMP`` (group 1 = the timestamp) and implement ``new_log``."""

    RULES: ClassVar[tuple[Rule, ...]] = ()
    TIMESTAMP: ClassVar[re.Pattern[str]] = re.compile(r"(?!)")
    _trigger: ClassVar[re.Pattern[str]] = re.compile(r"(?!)")  # the plain alternation: fast to search
    _named: ClassVar[re.Pattern[str]] = re.compile(r"(?!)")  # the same, one named group per rule
    _by_group: ClassVar[dict[str, Rule]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.RULES:
            cls._trigger = trigger_pattern(cls.RULES)
            cls._named, cls._by_group = compile_rules(cls.RULES)

    def __init__(self) -> None:
        self.log: Any = self.new_log()
        self.saw_figures = False
        self._ts: str | None = None  # the timestamp of the line being read (as printed; compared as text)
        self._figures_ts: str | None = None  # the latest timestamp read since the figures began
        self.last_event: str | None = None  # the event kind of the rule the last recognised line went to

    def new_log(self, starts_seen: int = 0, matched_lines: int = 0) -> Any:
        raise NotImplementedError

    def phase_now(self) -> str:
        """The startup phase (``PHASES``) the log has reached: where an error printed now happened."""
        return "unknown"

    def feed(self, lineno: int, raw: str) -> bool:
        """Returns True when the line was recognised."""
        line = clean(raw)
        t = self._trigger.search(line)
        if t is None:
            return False
        ts = self.TIMESTAMP.search(line, 0, t.start() + 1)
        self._ts = ts.group(1) if ts else None
        if self._dispatch(lineno, line, t):
            self._matched()
            return True
        return False

    def _matched(self) -> None:
        self.log.matched_lines += 1
        if self.saw_figures and self._ts is not None and (self._figures_ts is None or self._ts > self._figures_ts):
            self._figures_ts = self._ts

    def events_full(self, kind: str | None) -> bool:
        """No more evidence is kept for this event kind (``None``: a line this grammar does not read)."""
        return kind is None or len(self.log.events.get(kind, ())) >= MAX_EVENTS_PER_KIND

    def count_event(self, kind: str | None, raw: str) -> None:
        """A line already known to be event ``kind`` (its shape was read in full before) once the kind's
        evidence is full: what ``feed`` would record, without the grammar's search."""
        if kind is None:
            return
        counts = self.log.event_counts
        counts[kind] = counts.get(kind, 0) + 1
        ts = self.TIMESTAMP.search(raw)
        self._ts = ts.group(1) if ts else None
        self._matched()

    def _dispatch(self, lineno: int, line: str, t: re.Match[str]) -> bool:
        # the same alternatives tried in the same order at the same place: the same phrase, now named
        # (capturing groups slow a search of the whole line down; an anchored match is cheap)
        named = self._named.match(line, t.start())
        rule = self._by_group[named.lastgroup or ""] if named else None
        if rule is None:
            return False
        ln = Line(lineno, line, t.group(0), t.start(), evidence(lineno, line))
        self.last_event = rule.event
        return self.apply(rule, ln)

    def apply(self, rule: Rule, ln: Line) -> bool:
        m = None
        if rule.pattern is not None:
            m = rule.pattern.search(ln.text)
            if m is None:
                return False
        return rule.handle(self, m, ln) is not False

    # -- what handlers use ---------------------------------------------------------------
    def event(self, kind: str, values: dict[str, Any], ev: str) -> None:
        counts = self.log.event_counts
        counts[kind] = counts.get(kind, 0) + 1
        lst = self.log.events.setdefault(kind, [])
        if len(lst) < MAX_EVENTS_PER_KIND:
            lst.append(Event(kind, values, ev))

    def restart(self) -> bool:
        """A start line (launch command, ServerArgs dump, non-default args) after figures: the server
        restarted; keep the last start. True when this line begins a new start (or no figures were read
        yet); False when the line is older than the figures already read (a paste out of order)."""
        if not self.saw_figures:
            return True
        if self._ts is not None and self._figures_ts is not None and self._ts < self._figures_ts:
            return False
        self.log = self.new_log(self.log.starts_seen, self.log.matched_lines)
        self.saw_figures = False
        self._figures_ts = None
        self._on_restart()
        return True

    def _on_restart(self) -> None:
        """Per-parser state to drop on a restart."""

    def begin_start(self) -> None:
        """A line printed once per start (ServerArgs dump, non-default args): count the start."""
        if self.restart() or self.log.starts_seen == 0:
            self.log.starts_seen += 1


def compile_rules(rules: tuple[Rule, ...]) -> tuple[re.Pattern[str], dict[str, Rule]]:
    """One alternation of the triggers, in table order, each in its own named group (``r0``, ``r1`` …)."""
    names = {f"r{i}": rule for i, rule in enumerate(rules)}
    pattern = re.compile("|".join(f"(?P<{name}>{rule.trigger})" for name, rule in names.items()))
    if pattern.groups != len(rules):
        raise ValueError("a trigger holds a capturing group; use (?:…)")
    return pattern, names


def trigger_pattern(rules: tuple[Rule, ...]) -> re.Pattern[str]:
    """The triggers as one plain alternation (no groups): what a line must hold to be read."""
    return re.compile("|".join(rule.trigger for rule in rules))


# ---------------------------------------------------------------------------------------------
# Rules both engines print the same way
# ---------------------------------------------------------------------------------------------

def event_rule(trigger: str, kind: str) -> Rule:
    """The phrase alone is the event (``server_ready``, ``kv_pool_full``, …)."""

    def handle(p: LineGrammar, _m: Any, ln: Line) -> None:
        p.event(kind, {}, ln.ev)

    return Rule(trigger, None, handle, kind)


# The startup phases in the order both engines run them; a failure is placed in the phase the log
# had reached when the error was printed (``LineGrammar.phase_now``).
PHASES = ("unknown", "config_validation", "init", "load_weights", "kv_sizing", "kv_alloc", "cuda_graph", "warmup",
          "serving")  # "unknown": the log shows no phase before the error

# torch's OOM text: "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free."
RE_OOM_FIGURES = re.compile(
    r"Tried to allocate (\d+(?:\.\d+)?) (GiB|MiB|KiB|B)\b.*?GPU (\d+) has a total capac\w* of (\d+(?:\.\d+)?) "
    r"(GiB|MiB) of which (\d+(?:\.\d+)?) (GiB|MiB|KiB|B) is free")
RE_OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError", re.I)
_UNIT_GIB = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "B": 1 / 1024**3}


def oom_figures(text: str) -> dict[str, Any]:
    """What torch's out-of-memory message says (GiB), when the line holds it."""
    m = RE_OOM_FIGURES.search(text)
    if m is None:
        return {}
    return {"tried_gib": round(float(m.group(1)) * _UNIT_GIB[m.group(2)], 3), "gpu": int(m.group(3)),
            "total_gib": round(float(m.group(4)) * _UNIT_GIB[m.group(5)], 3),
            "free_gib": round(float(m.group(6)) * _UNIT_GIB[m.group(7)], 3)}


def oom_rule(pattern: re.Pattern[str]) -> Rule:
    """A CUDA/HIP out-of-memory line: the phase the log had reached, and torch's figures when printed;
    ``after_start``: the server had said it was ready."""

    def handle(p: LineGrammar, _m: Any, ln: Line) -> None:
        p.event("oom", {"after_start": bool(p.log.events.get("server_ready")), "phase": p.phase_now(), "oom": True,
                        **oom_figures(ln.text)}, ln.ev)

    return Rule("out of memory|OutOfMemoryError", pattern, handle)


def failure_rule(trigger: str, kind: str, phase: str | None = None, pattern: re.Pattern[str] | None = None,
                 fields: tuple[str, ...] = ()) -> Rule:
    """An error line the engine prints when a start fails: its kind, the phase (fixed by the message, or
    the one the log had reached) and the named groups of ``pattern`` (``fields``, as printed)."""

    def handle(p: LineGrammar, m: Any, ln: Line) -> None:
        values: dict[str, Any] = {"phase": phase or p.phase_now(), "oom": bool(RE_OUT_OF_MEMORY.search(ln.text)),
                                  **oom_figures(ln.text)}
        if m is not None:
            values.update(zip(fields, m.groups()))
        p.event(kind, values, ln.ev)

    return Rule(trigger, pattern, handle)


CUDA_ERROR_RULE = failure_rule(r"CUDA [Ee]rror: ", "cuda_error")  # "CUDA Error: no kernel image …", torch's "CUDA error: …"


def _custom_ar(p: LineGrammar, _m: Any, ln: Line) -> None:
    p.event("custom_ar_disabled", {"reason": custom_ar_disabled_reason(ln.text)}, ln.ev)


CUSTOM_AR_RULE = Rule("Custom allreduce is disabled", None, _custom_ar)


def _device_name(p: LineGrammar, _m: Any, ln: Line) -> bool:
    name = device_name_in(ln.text)
    if name is None:
        return False
    p.log.device_name = name
    return True


DEVICE_NAME_RULE = Rule("device_name=", None, _device_name)


def launch_rule(trigger: str, pattern: re.Pattern[str], parse: Callable[[str], dict[str, Any]]) -> Rule:
    """The launch command (group 1 = its arguments): after figures it begins a new start."""

    def handle(p: LineGrammar, m: Any, ln: Line) -> None:
        p.restart()
        p.log.launch_flags = parse(m.group(1))
        p.log.launch_evidence = ln.ev

    return Rule(trigger, pattern, handle)


def version_rule(trigger: str, pattern: re.Pattern[str], *, strip: str = "", first_start_only: bool = False) -> Rule:
    """The engine's printed version (group 1). ``first_start_only``: a later line keeps an earlier
    version once figures were read (the API server's banner of another start)."""

    def handle(p: LineGrammar, m: Any, ln: Line) -> None:
        if first_start_only and p.log.version_printed is not None and p.saw_figures:
            return
        p.log.version_printed = m.group(1).rstrip(strip) if strip else m.group(1)

    return Rule(trigger, pattern, handle)
