"""docs/accuracy.md is generated from the real starts in tests/accuracy/starts.jsonl, is current, and
the accuracy it publishes holds: measured mode 100 % within the print rounding, predictions over the
modelled rows median <= 1 % and p90 <= 3 %; no row is dropped."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_LOGS = ROOT.parent / "shared" / "logs" / "cases.jsonl"


def _load_accuracy():
    spec = importlib.util.spec_from_file_location("kvscope_bench_accuracy", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


acc = _load_accuracy()


@pytest.fixture(scope="module")
def results():
    return acc.evaluate(acc.load_rows())


def test_doc_and_chart_are_current(results):
    assert (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8") == acc.render_md(results), \
        "docs/accuracy.md is stale: run python benchmarks/accuracy.py"
    assert (ROOT / "docs" / "accuracy.svg").read_text(encoding="utf-8") == acc.render_svg(results), \
        "docs/accuracy.svg is stale: run python benchmarks/accuracy.py"


def test_thresholds(results):
    modelled = acc.summarize("modelled", results)
    assert modelled.predicted >= 10
    assert modelled.median <= 1.0, modelled
    assert modelled.p90 <= 3.0, modelled
    meas = [r for r in results if r.measured_ok is not None]
    assert len(meas) >= 15
    bad = {r.row["id"] for r in meas if not r.measured_ok}
    explained = {r.row["id"] for r in meas if r.row.get("known_measured_miss")}
    # an open measured-mode miss must be named in its row (with its hypothesis); none is open now
    assert bad == explained == set(), bad


def test_every_row_is_in_the_table_and_unmodelled_rows_say_why(results):
    md = acc.render_md(results)
    rows = acc.load_rows()
    assert len(rows) >= 50
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate start ids"
    table = md.split("## Rows", 1)[1]
    for r in results:
        assert f"[{r.row['id']}]" in table or f"| {r.row['id']} (" in table, r.row["id"]
        if r.predicted_starts is None:
            assert r.predicted_note, r.row["id"]
            assert "not modelled: " + r.predicted_note.split(":")[0] in table
        if r.known_miss:
            assert "not yet modelled: " in table


def _source_text(ref: str) -> str:
    path, _, rid = ref.partition("#")
    file = SHARED_LOGS if path.startswith("shared/") else ROOT / path
    if not file.exists():  # shared/ is not part of the repository; tests/sglang/cases.jsonl mirrors it
        file = ROOT / "tests" / "sglang" / "cases.jsonl"
    for line in file.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("id") == rid:
            text = line
            if rec.get("fixture"):
                text += (file.parent / rec["fixture"]).read_text(encoding="utf-8")
            return text
    raise AssertionError(f"{ref}: no record {rid!r} in {file}")


def test_observed_figures_are_copied_from_their_sources():
    """Every printed figure a row compares against appears verbatim in the record or log it cites."""
    for row in acc.load_rows():
        assert row["source"], row["id"]
        texts = [_source_text(ref) for ref in row.get("refs", [])] + [row.get("log_excerpt", "")]
        assert any(texts), f"{row['id']}: neither refs nor log_excerpt"
        printed = row["observed"].get("as_printed")
        if printed is None:
            assert "none" in row["observed"], row["id"]
            continue
        joined = "\n".join(texts)
        assert printed in joined or printed.replace(",", "") in joined.replace(",", ""), (row["id"], printed)
        if "kv_tokens" in row["observed"] and "blocks" not in row["observed"]:
            digits = re.sub(r"\D", "", printed)
            assert str(row["observed"]["kv_tokens"]) == digits, (row["id"], printed)


def test_percentile_and_error_arithmetic():
    assert acc.p90([float(x) for x in range(1, 11)]) == 9.0
    assert acc.p90([5.0]) == 5.0
    r = acc.Result({"observed": {"kv_tokens": 1000}, "measured_ranks": "all"}, predicted_tokens=1010,
                   predicted_starts=True)
    assert r.predicted_err_pct == pytest.approx(1.0)
    r.predicted_starts = False
    assert r.predicted_err_pct == -100.0
