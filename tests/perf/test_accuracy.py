"""Held-out accuracy of `kvscope perf` on the public benchmark set (benchmarks/perf_cases/).

Leave-one-source-out: every row is predicted by parameters refitted without its source (perf/calibrate.py).
``python benchmarks/perf_accuracy.py`` writes docs/perf-accuracy.md and benchmarks/perf_accuracy.json
(every held-out row, each fold's fitted parameters). The default tests assert the issue #19 thresholds on
that file and re-predict every row from its fold's parameters with today's model code (milliseconds),
so the file cannot drift from the model; the refits themselves (about a minute) are the ``slow`` tier
(``python -m pytest -m slow tests/perf``, .ci/tier_slow).
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from kvscope.hardware.gpus import get_gpu
from kvscope.perf.calibrate import (DECODE_METRICS, PREFILL_METRICS, Row, cross_validate_folds, load_cases,
                                    predict_all, prepare, signed_error, summary)

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "benchmarks" / "perf_cases"
RESULTS = ROOT / "benchmarks" / "perf_accuracy.json"


@pytest.fixture(scope="module")
def cases():
    return load_cases(CASES)


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())


def test_public_set_is_sourced_and_covers_the_space(cases):
    assert len(cases) >= 60
    sources = [json.loads(p.read_text()) for p in CASES.glob("*.json")]
    for s in sources:
        assert s["url"] and s["engine"] in ("sglang", "vllm") and s["engine_version"] and s["setting"]
        get_gpu(s["gpu"])  # a catalog GPU
    assert all(c.observed > 0 and c.metric in DECODE_METRICS + PREFILL_METRICS for c in cases)
    assert {c.engine for c in cases} == {"sglang", "vllm"}
    assert {get_gpu(c.gpu).vendor for c in cases} == {"nvidia", "amd"}
    assert min(c.concurrency for c in cases) == 1 and max(c.concurrency for c in cases) >= 256
    assert {(c.spec or {}).get("algorithm") for c in cases} >= {"EAGLE", "EAGLE3"}
    assert sum(c.kind == "prefill" for c in cases) >= 10
    kinds = {get_gpu(c.gpu).interconnect.kind for c in cases}
    assert "pcie" in kinds and "nvlink" in kinds


def test_results_file_covers_every_scored_row(cases, results):
    scored = {(c.source, c.index): c for c in cases if not c.exclude}
    got = {(r["source"], r["index"]): r for r in results["rows"]}
    assert got.keys() == scored.keys(), "stale benchmarks/perf_accuracy.json: run python benchmarks/perf_accuracy.py"
    for key, r in got.items():
        c = scored[key]
        assert (r["observed"], r["metric"], r["fold"]) == (c.observed, c.metric, c.url)
        assert r["fold"] in results["folds"]
        assert r["error"] == pytest.approx(signed_error(c, r["predicted"]), abs=1e-5)


def test_every_held_out_row_reproduces_from_its_fold(cases, results):
    """Today's model, with the parameters each fold fitted without the row's source, gives the recorded
    prediction: the committed numbers are what the code computes."""
    by_key = {(r["source"], r["index"]): r for r in results["rows"]}
    for c in cases:
        if c.exclude:
            continue
        r = by_key[(c.source, c.index)]
        v = predict_all([prepare(c)], results["folds"][r["fold"]])[0]
        assert v == pytest.approx(r["predicted"], rel=1e-5), (c.source, c.index)


def _summary(results, kind):
    """(median, p90, n) of |error| over the file's rows, the same rule as perf.calibrate.summary."""
    errs = sorted(abs(r["error"]) for r in results["rows"] if r["kind"] == kind)
    p90 = errs[min(len(errs) - 1, int(math.ceil(0.9 * len(errs))) - 1)]
    return statistics.median(errs), p90, len(errs)


def test_held_out_accuracy(results):
    dm, dp, dn = _summary(results, "decode")
    pm, pp, pn = _summary(results, "prefill")
    assert dn >= 60 and pn >= 10
    assert results["summary"]["decode"]["median_abs_error"] == pytest.approx(dm, abs=1e-5)
    assert results["summary"]["prefill"]["median_abs_error"] == pytest.approx(pm, abs=1e-5)
    # measured (docs/perf-accuracy.md): decode median 14.2 % (issue #19 target <= 15 %, met), p90 59.3 %;
    # prefill median 25.5 % over 10 scored rows
    assert dm <= 0.15
    assert dp <= 0.62
    assert pm <= 0.27


@pytest.mark.xfail(strict=True, reason="issue #19 targets not all reached on held-out folds: decode median 14.2 % "
                                       "(target 15 %, met), p90 59.3 % (30 %), prefill median 25.5 % (25 %); "
                                       "docs/perf-accuracy.md lists the misses")
def test_issue19_targets(results):
    dm, dp, _ = _summary(results, "decode")
    pm, _, _ = _summary(results, "prefill")
    assert dm <= 0.15 and dp <= 0.30 and pm <= 0.25


@pytest.mark.slow  # leave-one-source-out refits: about a minute (tests/conftest.py, .ci/tier_slow)
def test_refit_reproduces_the_results_file(cases, results):
    rows, thetas = cross_validate_folds(cases)
    assert all(isinstance(r, Row) and r.held_out for r in rows)
    assert thetas.keys() == results["folds"].keys()
    for url, theta in thetas.items():
        assert theta == pytest.approx(results["folds"][url], rel=1e-9), url
    dm, dp, _ = summary(rows, "decode")
    assert dm == pytest.approx(results["summary"]["decode"]["median_abs_error"], abs=1e-5)
    assert dp == pytest.approx(results["summary"]["decode"]["p90_abs_error"], abs=1e-5)
