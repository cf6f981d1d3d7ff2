"""The JSON Schema of kvscope's ``--json`` output (plan, doctor, fit, probe), built from the typed records.

The shipped file ``kvscope/data/output.schema.json`` is this function's output; a test keeps the two
equal and validates real outputs of both engines against it. Regenerate with
``python -m kvscope.schema > src/kvscope/data/output.schema.json``.

One top-level shape for both engines: a Timeline always carries the same required keys; the
engine- and source-specific figures (``extra`` in the Python object) are optional top-level keys
whose types come from the engine's extra record, and each rank's ``decision`` follows the engine's
decision record. Unknown keys are refused (``unevaluatedProperties: false``), so a key added without
a typed field fails the schema test.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import typing
from typing import Any

from .doctor import DoctorReport, report_records
from .engines.sglang.decision import SGLangDecision, SGLangPlanExtra
from .engines.sglang.logs import SglangLogDecision
from .engines.vllm.decision import VllmDecision, VllmPlanExtra
from .engines.vllm.logs import VllmLogDecision
from .fit import FitResult
from .record import Loose, Record
from .timeline import Fix, Phase, Timeline

SCHEMA_ID = "https://kvscope.invalid/output.schema.json"

# (engine, source) -> (decision record, extra records) of the Timelines kvscope produces
TIMELINE_RECORDS: dict[tuple[str, str], tuple[type, tuple[type, ...]]] = {
    ("sglang", "plan"): (SGLangDecision, (SGLangPlanExtra,)),
    ("vllm", "plan"): (VllmDecision, (VllmPlanExtra,)),
    ("sglang", "log"): (SglangLogDecision, report_records("sglang")),
    ("vllm", "log"): (VllmLogDecision, report_records("vllm")),
    ("sglang", "probe"): (Loose, (Loose,)),  # the probe records what the engine's functions received
    ("vllm", "probe"): (Loose, (Loose,)),
}

_SCALARS = {"int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"},
            "bool": {"type": "boolean"}, "None": {"type": "null"}, "Any": {}, "object": {}}


def _split_top(text: str, sep: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _type(ann: str, defs: dict[str, Any], module: Any) -> dict[str, Any]:
    """A JSON Schema for one annotation string (``int | None``, ``tuple[str, ...]``, a record name)."""
    parts = _split_top(ann, "|")
    if len(parts) > 1:
        return {"anyOf": [_type(p, defs, module) for p in parts]}
    ann = parts[0].strip("'\"")
    m = re.fullmatch(r"(\w+(?:\.\w+)?)\[(.*)\]", ann)
    if m:
        head, inner = m.group(1).split(".")[-1], m.group(2)
        if head in ("Optional",):
            return {"anyOf": [_type(inner, defs, module), {"type": "null"}]}
        if head in ("Literal",):
            return {"enum": [json.loads(x.replace("'", '"')) for x in _split_top(inner, ",")]}
        if head in ("tuple", "list", "Sequence"):
            args = _split_top(inner, ",")
            item = args[0] if len(args) == 1 or args[-1] == "..." else None
            return {"type": "array", "items": _type(item, defs, module)} if item else {"type": "array"}
        if head in ("dict", "Mapping"):
            args = _split_top(inner, ",")
            return {"type": "object", "additionalProperties": _type(args[1], defs, module)}
    if ann in _SCALARS:
        return dict(_SCALARS[ann])
    if ann in ("dict", "Mapping", "list", "tuple"):
        return {"type": "object" if ann in ("dict", "Mapping") else "array"}
    target = getattr(module, ann, None)
    if isinstance(target, type) and hasattr(target, "_KEYS"):
        if target.__name__ not in defs:
            defs[target.__name__] = {}
            defs[target.__name__] = _json_class(target, defs)
        return {"$ref": f"#/$defs/{target.__name__}"}
    if isinstance(target, type) and dataclasses.is_dataclass(target):
        return _ref(target, defs)
    alias = typing.get_origin(target) if target is not None else None
    if target is not None and alias is typing.Literal:
        return {"enum": list(typing.get_args(target))}
    return {}


def _field_docs(cls: type) -> dict[str, str]:
    """The trailing ``# comment`` of each field line in the class body: the field's description."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out = {}
    for m in re.finditer(r"^\s+(\w+):[^#\n]*#\s*(.+)$", src, re.M):
        out.setdefault(m.group(1), m.group(2).strip())
    return out


def _object(cls: type, defs: dict[str, Any], *, extra: dict[str, Any] | None = None, skip: tuple[str, ...] = (),
            closed: bool = True) -> dict[str, Any]:
    module = sys.modules[cls.__module__]
    docs = _field_docs(cls)
    props = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("key", f.name)
        if key in skip:
            continue
        props[key] = _type(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""), defs, module)
        if f.name in docs:
            props[key]["description"] = docs[f.name]
    props.update(extra or {})
    out: dict[str, Any] = {"type": "object", "properties": props}
    if closed:
        out["additionalProperties"] = False
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    return out


def _ref(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    name = cls.__name__
    if name not in defs:
        defs[name] = {}  # reserve (recursion)
        if cls is Loose:
            defs[name] = {"type": "object"}
        else:
            defs[name] = _object(cls, defs)
            if issubclass(cls, Record) and not cls.omit_none:
                defs[name]["required"] = list(cls.json_keys())
    return {"$ref": f"#/$defs/{name}"}


def _json_class(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    """A fit result type (``fit._Json``): its ``_KEYS`` are the JSON keys, fields or properties."""
    module = sys.modules[cls.__module__]
    field_types = {f.name: f.type for f in dataclasses.fields(cls)}
    props: dict[str, Any] = {}
    for key in cls._KEYS:  # type: ignore[attr-defined]
        ann = field_types.get(key) or getattr(getattr(cls, key), "fget").__annotations__.get("return", "")
        props[key] = _type(ann, defs, module)
    out = {"type": "object", "properties": props, "required": list(cls._KEYS),  # type: ignore[attr-defined]
           "additionalProperties": False}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    return out


def _timeline(defs: dict[str, Any]) -> dict[str, Any]:
    phase = _object(Phase, defs, extra={"used_bytes": {"type": ["integer", "null"]}})
    defs["Phase"] = phase
    defs["Fix"] = _object(Fix, defs, extra={"value": {}})
    common = _object(Timeline, defs, skip=("ranks", "fix", "extra", "warnings", "estimated"), closed=False)
    props = common["properties"]
    props["source"] = {"enum": ["plan", "log", "probe"]}
    props["engine"] = {"enum": ["sglang", "vllm"]}
    props["fix"] = {"type": "array", "items": {"$ref": "#/$defs/Fix"}}
    props["warnings"] = {"type": "array", "items": {"type": "string"}}
    props["estimated"] = {"type": "array", "items": {"type": "string"}}
    props["ranks"] = {"type": "array", "items": {"type": "object", "required": ["rank", "phases", "decision"],
                                                  "properties": {"rank": {"type": "integer"},
                                                                 "phases": {"type": "array",
                                                                            "items": {"$ref": "#/$defs/Phase"}},
                                                                 "decision": {"type": "object"}},
                                                  "additionalProperties": False}}
    common["required"] = list(props)
    cases = []
    for (engine, source), (decision, extras) in TIMELINE_RECORDS.items():
        extra_props: dict[str, Any] = {}
        for rec in extras:
            if rec is not Loose:
                extra_props.update(_object(rec, defs, closed=False)["properties"])
        then: dict[str, Any] = {"properties": {**extra_props,
                                               "ranks": {"items": {"properties": {"decision": _ref(decision, defs)}}}}}
        if Loose in extras:
            then["additionalProperties"] = True  # an open set of figures
        cases.append({"if": {"required": ["engine", "source"],
                             "properties": {"engine": {"const": engine}, "source": {"const": source}}},
                      "then": then})
    common["allOf"] = cases
    return common


def output_schema() -> dict[str, Any]:
    """The schema every ``--json`` output of kvscope validates against."""
    defs: dict[str, Any] = {}
    defs["Timeline"] = _timeline(defs)
    defs["TimelineOutput"] = {"$ref": "#/$defs/Timeline", "unevaluatedProperties": False}
    doctor = DoctorReport.json_properties(defs)
    defs["DoctorReport"] = {"allOf": [{"$ref": "#/$defs/Timeline"}], "properties": doctor,
                            "required": [k for k in doctor if k != "comparison"], "unevaluatedProperties": False}
    defs["FitResult"] = _json_class(FitResult, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "kvscope --json output: a Timeline (plan, probe), a DoctorReport (doctor) or a FitResult (fit)",
        "oneOf": [{"$ref": "#/$defs/TimelineOutput"}, {"$ref": "#/$defs/DoctorReport"}, {"$ref": "#/$defs/FitResult"}],
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """The shipped file's exact text."""
    return json.dumps(output_schema(), indent=1) + "\n"


def _md_type(t: dict[str, Any]) -> str:
    if "$ref" in t:
        return t["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in t:
        return " \\| ".join(_md_type(x) for x in t["anyOf"])
    if "enum" in t:
        return " \\| ".join(json.dumps(x) for x in t["enum"])
    if t.get("type") == "array":
        return f"array of {_md_type(t['items'])}" if "items" in t else "array"
    if t.get("type") == "object" and isinstance(t.get("additionalProperties"), dict):
        return f"object of {_md_type(t['additionalProperties'])}"
    typ = t.get("type", "any")
    return " \\| ".join(typ) if isinstance(typ, list) else typ


def _md_table(props: dict[str, Any]) -> list[str]:
    rows = ["| key | type | meaning |", "|---|---|---|"]
    for k, t in props.items():
        rows.append(f"| `{k}` | {_md_type(t)} | {t.get('description', '')} |")
    return rows


def markdown() -> str:
    """docs/json.md: every key of every record, from the same schema (a test keeps them equal)."""
    s = output_schema()
    defs = s["$defs"]
    out = ["# JSON output and its schema", "",
           "Generated by `python -m kvscope.schema --markdown` from the typed records; `tests/test_schema.py`",
           "checks that this page, the shipped `src/kvscope/data/output.schema.json` and the records agree,",
           "and that real outputs of both engines validate.", "",
           "Every `--json` output is one of: a **Timeline** (`kvscope plan`, `kvscope probe`), a",
           "**DoctorReport** (`kvscope doctor`: the observed Timeline plus findings) or a **FitResult**",
           "(`kvscope fit`). A Timeline has the same required top-level keys for both engines; the",
           "engine's own figures are further top-level keys, and each rank's `decision` is the engine's",
           "decision record.", "", "## Timeline (top level, both engines)", ""]
    out += _md_table(defs["Timeline"]["properties"])
    for case in defs["Timeline"]["allOf"]:
        cond = case["if"]["properties"]
        engine, source = cond["engine"]["const"], cond["source"]["const"]
        then = case["then"]["properties"]
        decision = _md_type(then["ranks"]["items"]["properties"]["decision"])
        extra = {k: v for k, v in then.items() if k != "ranks"}
        out += ["", f"## {engine} · source `{source}`", "", f"Rank decision: {decision}." + (
            " Further top-level keys: an open set (what the engine's hooked functions received)."
            if case["then"].get("additionalProperties") else " Further top-level keys:"), ""]
        if extra:
            out += _md_table(extra)
    for name in sorted(defs):
        d = defs[name]
        if name in ("Timeline", "TimelineOutput") or "properties" not in d:
            continue
        out += ["", f"## {name}", ""] + ([d["description"], ""] if d.get("description") else [])
        out += _md_table(d["properties"])
    return "\n".join(out) + "\n"


def main() -> None:  # pragma: no cover - the generator's edge
    sys.stdout.write(markdown() if "--markdown" in sys.argv else schema_text())


if __name__ == "__main__":  # pragma: no cover
    main()
