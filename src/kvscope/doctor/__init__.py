"""``kvscope doctor``: explain an SGLang or vLLM startup log.

Modules: ``scan`` (reading, both grammars in one pass, which engine), ``findings`` (the value
types), ``rules_common`` / ``sglang_rules`` / ``vllm_rules`` (what the figures mean), ``report``
(``DoctorReport``, ``--against``), ``diagnose`` (the use-case that composes them).
"""

from .._callable import make_callable
from .diagnose import (
    catalog_id_for,
    diagnose_path,
    diagnose_probe_dir,
    diagnose_stream,
    diagnose_text,
)
from .report import DoctorReport, SglangLogExtra, VllmLogExtra, compare, load_against, report_records
from .scan import MAX_UNPARSED_SAMPLES, TRIGGER, LogStats, has_trigger_anchor

__all__ = [
    "MAX_UNPARSED_SAMPLES", "TRIGGER", "DoctorReport", "LogStats", "catalog_id_for", "compare",
    "diagnose_path", "diagnose_probe_dir", "diagnose_stream", "diagnose_text", "has_trigger_anchor",
    "load_against", "report_records", "SglangLogExtra", "VllmLogExtra",
]


make_callable(__name__, diagnose_path)  # kvscope.doctor(path, **kw) is diagnose_path(path, **kw)
