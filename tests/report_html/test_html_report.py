"""``--html`` / ``--svg`` reports: parsed back, their chart numbers are ``--json``'s, and they load
nothing from the network (no http(s) ``src``/``href``, no CSS ``url(http…)``)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvscope import __version__
from kvscope.curve import curve
from kvscope.units import GiB
from .cli_helpers import KIMI, LOG, cli




class Doc(HTMLParser):
    """Every element's tag and attributes, the embedded JSON, and the text of elements by id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.by_id: dict[str, str] = {}
        self.data: dict | None = None
        self._open: list[tuple[str | None, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in ("rect", "line", "circle", "input", "meta", "link", "br", "polyline"):
            self._open.append((a.get("id"), []))

    def handle_endtag(self, tag):
        if self._open and tag not in ("rect", "line", "circle", "input", "meta", "link", "br", "polyline"):
            ident, chunks = self._open.pop()
            text = "".join(chunks)
            if ident == "kvscope-data":
                self.data = json.loads(text)
            elif ident:
                self.by_id[ident] = text
            if self._open:
                self._open[-1][1].append(text)

    def handle_data(self, data):
        if self._open:
            self._open[-1][1].append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def assert_offline(text: str) -> None:
    doc = Doc(text)
    for _, a in doc.elements:
        for key in ("src", "href", "xlink:href", "action", "data"):
            assert not re.match(r"\s*(https?:)?//", a.get(key, ""), re.I), (key, a[key])
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", text, re.I)
    assert not re.search(r"@import", text)
    assert not re.search(r"<script(?![^>]*application/json)", text)  # no script that runs


def _plan_html(tmp_path, argv):
    html = tmp_path / "r.html"
    rc, out, err = cli(["plan", *argv, "--html", str(html)])
    assert err == "" and rc in (0, 1)
    rc2, js, err2 = cli(["plan", *argv, "--json"])
    assert rc2 == rc and err2 == ""
    return html.read_text(encoding="utf-8"), json.loads(js)


def test_plan_html_timeline_equals_json_origin_case(tmp_path):
    text, want = _plan_html(tmp_path, KIMI)
    assert_offline(text)
    doc = Doc(text)
    assert doc.data["timeline"] == want  # the page is rendered from --json
    assert doc.by_id["command"].startswith("kvscope plan moonshotai/Kimi-K2.5 --gpu rtx-pro-6000 --tp 8")
    assert doc.by_id["kvscope-version"] == __version__
    assert doc.by_id["engine"].startswith("SGLang 0.5.23") and doc.by_id["engine"].endswith("8\u00d7 NVIDIA RTX PRO 6000 Blackwell (96 GiB, PCIe)")
    assert doc.by_id["verdict"].startswith("fails at KV sizing: ValueError: Loaded weights leave no GPU memory")
    groups = doc.find("g", **{"class": "kv-rank"})
    assert [g["data-ranks"] for g in groups] == ["0,1,2,3,4,5,6,7"]  # identical ranks folded
    segs = doc.find("rect", **{"class": "seg"})
    phases = {p["name"]: p for p in want["ranks"][0]["phases"]}
    by_part = {s["data-part"]: s for s in segs}
    assert int(by_part["weights"]["data-bytes"]) == phases["load_weights"]["used_bytes"] == 77631533875
    assert by_part["weights"]["data-estimated"] == "false"  # measured (the log's figures)
    assert int(by_part["context"]["data-bytes"]) == phases["init"]["used_bytes"]
    assert by_part["context"]["data-estimated"] == "true"
    top = phases["init"]["free_bytes_before"]
    assert sum(int(s["data-bytes"]) for s in segs) == top  # the bar is the whole GPU
    assert int(by_part["free"]["data-bytes"]) == phases["profile"]["free_bytes_after"]
    # the negative budget: the weights overhang the boundary by the formula's -20.70 GiB
    (over,) = doc.find("rect", **{"class": "overhang"})
    assert over["data-gib"] == "-20.70"
    (line,) = doc.find("line", **{"class": "budget"})
    dec = want["ranks"][0]["decision"]
    keep = dec["pre_model_load_bytes"] * (1 - 0.55) + dec["mm_reservation_gib"] * GiB
    assert int(line["data-bytes"]) == round(top - keep)
    assert "rest = 21.70 (measured) \u2212 94.00 (measured) \u00d7 (1 \u2212 0.55) \u2212 0.10 (reserve) = -20.70 GiB" \
        == doc.by_id["formula"]


def test_plan_html_curve_equals_library_and_plan_json(tmp_path):
    text, want = _plan_html(tmp_path, KIMI)
    doc = Doc(text)
    c = curve("moonshotai/Kimi-K2.5", "rtx-pro-6000", tp_size=8, mem_fraction_static=0.55,
              pre_load_free_gib=94, post_load_free_gib=21.7).to_dict()
    assert doc.data["curve"] == c
    pts = doc.find("circle", **{"class": "pt"})
    assert [(float(p["data-value"]), p["data-tokens"]) for p in pts] == \
        [(p["value"], str(p["kv_cache_tokens"])) for p in c["points"]]
    marks = {m["data-mark"]: m for m in doc.find("g", **{"class": "mark"})}
    assert float(marks["user_value"]["data-value"]) == 0.55 and marks["user_value"]["data-tokens"] == "0"
    assert float(marks["min_viable"]["data-value"]) == want["min_mem_fraction_static"] == 0.7702
    assert float(marks["engine_default"]["data-value"]) == c["engine_default"]
    # each marked point is a real plan: the tokens at the marks are plan --json's at that value
    def at(v: float) -> dict:
        argv = [*KIMI[:5], *KIMI[7:], "--mem-fraction-static", str(v), "--json"]
        return json.loads(cli(["plan", *argv])[1])

    full = c["full_context_value"]
    assert int(marks["full_context_value"]["data-tokens"]) == at(full)["kv_cache_tokens"] >= c["context_tokens"] == 262144
    assert at(round(full - 0.0001, 4))["kv_cache_tokens"] < 262144  # the mark is the smallest such value (1e-4)
    assert "each +0.01 of --mem-fraction-static buys 14,363 tokens" in text
    assert c["error_below"].startswith("ValueError: Loaded weights leave no GPU memory")


def test_vllm_plan_html_and_svg(tmp_path):
    argv = ["Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--engine", "vllm", "--gpu-memory-utilization", "0.85"]
    svg = tmp_path / "t.svg"
    rc, _, err = cli(["plan", *argv, "--svg", str(svg)])
    assert rc == 0 and err == ""
    text, want = _plan_html(tmp_path, argv)
    assert Doc(text).data["timeline"] == want
    s = svg.read_text()
    assert s.startswith("<?xml") and "http://www.w3.org/2000/svg" in s
    assert_offline(s.replace('xmlns="http://www.w3.org/2000/svg"', ""))
    doc = Doc(s)
    parts = {r["data-part"]: int(r["data-bytes"]) for r in doc.find("rect", **{"class": "seg"})}
    phases = {p["name"]: p for p in want["ranks"][0]["phases"]}
    assert parts["kv"] == phases["kv_cache"]["used_bytes"] == want["kv_cache_bytes"]
    assert parts["graphs"] == phases["cuda_graph"]["used_bytes"]
    assert parts["activation"] == want["ranks"][0]["decision"]["activation_peak_bytes"]
    (line,) = doc.find("line", **{"class": "budget"})
    assert int(line["data-bytes"]) == want["requested_memory_bytes"]  # total x utilization
    c = Doc(text).data["curve"]
    assert c["knob"] == "--gpu-memory-utilization" and c["user_value"] == 0.85
    assert next(p for p in c["points"] if p["value"] == 0.85)["kv_cache_tokens"] == want["kv_cache_tokens"]


def test_doctor_html_printed_vs_predicted(tmp_path):
    plan_json = tmp_path / "p.json"
    rc, js, _ = cli(["plan", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8",
                     "--mem-fraction-static", "0.55", "--json"])
    plan_json.write_text(js)
    html = tmp_path / "d.html"
    rc, _, err = cli(["doctor", str(LOG), "--against", str(plan_json), "--html", str(html)])
    assert rc == 1 and err == ""
    rc2, js2, _ = cli(["doctor", str(LOG), "--against", str(plan_json), "--json"])
    want = json.loads(js2)
    text = html.read_text()
    assert_offline(text)
    doc = Doc(text)
    for d in (doc.data["report"], want):
        d["log"].pop("seconds")  # the time the read took
    assert doc.data["report"] == want
    rows = {r["data-what"]: r for r in doc.find("tr") if "data-what" in r}
    assert json.loads(rows["kv_cache_tokens"]["data-delta"]) == 158909 and "diff" in rows["kv_cache_tokens"]["class"]
    w = next(r for r in want["comparison"] if r["what"] == "load_weights.used_bytes")
    assert json.loads(rows["load_weights.used_bytes"]["data-delta"]) == w["delta"]
    assert "diff" in rows["load_weights.used_bytes"]["class"]  # 0.40 GiB > print rounding
    assert [li["data-code"] for li in doc.find("li") if "data-code" in li] == [f["code"] for f in want["findings"]]
    assert "L26: [2026-03-01 10:09:40 TP0] Load weight end." in text  # evidence lines with line numbers
    assert [a["data-agrees"] for a in doc.find("tr") if "data-agrees" in a] == \
        [str(c["agrees"]).lower() for c in want["checks"]]


def test_fit_html_ranked_options(tmp_path):
    argv = ["fit", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--context", "32768", "--concurrency", "16", "--gpus", "2"]
    html = tmp_path / "f.html"
    rc, _, err = cli([*argv, "--html", str(html)])
    assert rc == 0 and err == ""
    want = json.loads(cli([*argv, "--json"])[1])
    text = html.read_text()
    assert_offline(text)
    doc = Doc(text)
    assert doc.data["fit"] == want
    rows = [r for r in doc.find("tr") if "data-rank" in r]
    assert [int(r["data-tokens"]) for r in rows] == [o["kv_cache_tokens"] for o in want["options"]]
    speeds = [(o.get("speed") or {}).get("decode_tokens_per_s") for o in want["options"]]
    assert [r["data-throughput"] for r in rows] == ["" if s is None else str(float(s)) for s in speeds]
    assert "best" in rows[0]["class"]
    assert doc.by_id["launch"] == want["options"][0]["command"]


def test_unwritable_report_is_one_line(tmp_path):
    rc, _, err = cli(["plan", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--html", str(tmp_path / "no" / "r.html")])
    assert rc == 2 and err.count("\n") == 1 and err.startswith("kvscope: error: --html ")


def test_png_without_matplotlib_is_one_line(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    rc, _, err = cli(["plan", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--png", str(tmp_path / "t.png")])
    assert rc == 2 and err.strip() == ("kvscope: error: --png needs matplotlib, which is not installed "
                                       "(pip install 'kvscope[plots]', or use --svg (no dependency))")
    assert not (tmp_path / "t.png").exists()


def test_png_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    rc, _, err = cli(["plan", *KIMI, "--png", str(png)])
    assert rc in (0, 1) and err == ""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_partial_logs_draw_gaps_and_shortfalls():
    """Real logs print some steps only: a fall between two printed figures is its own segment, and a
    log whose figures go below zero free draws the shortfall past the bar (never a negative width)."""
    from kvscope.doctor import diagnose_path
    from kvscope.report.svg import rank_groups, timeline_segments, timeline_svg
    real = Path(__file__).resolve().parents[1] / "doctor" / "real_logs"
    d = diagnose_path(str(real / "sglang-skill-clean-startup-qwen3-8b-b200.log")).to_dict()
    (ranks, r), = rank_groups(d)
    top, segs = timeline_segments(d, r)
    phases = {p["name"]: p for p in r["phases"]}
    gap = phases["req_to_token_pool"]["free_bytes_after"] - phases["cuda_graph"]["free_bytes_before"]
    assert [s["part"] for s in segs] == ["weights", "kv", "pools", "gap", "graphs", "free"]
    assert next(s for s in segs if s["part"] == "gap")["bytes"] == gap > 0
    assert sum(s["bytes"] for s in segs) == top == phases["init"]["free_bytes_after"]
    d = diagnose_path(str(real / "vllm-10517-llama31-8b-3090-20k.log")).to_dict()
    top, segs = timeline_segments(d, d["ranks"][0])
    w = d["ranks"][0]["phases"][1]
    assert [(s["part"], s["bytes"]) for s in segs] == [("weights", w["used_bytes"]), ("short", w["free_bytes_after"])]
    svg = Doc(timeline_svg(d))
    assert all(float(x["width"]) >= 0 for x in svg.find("rect") if "width" in x)


def test_sweep_html_points_equal_sweep_json(tmp_path):
    argv = ["sweep", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--grid", "mem_fraction_static=0.1:0.99:0.1", "tp=1,2"]
    html = tmp_path / "s.html"
    rc, _, err = cli([*argv, "--html", str(html)])
    assert rc == 0 and err == ""
    want = json.loads(cli([*argv, "--format", "json"])[1])
    text = html.read_text()
    assert_offline(text)
    doc = Doc(text)
    assert doc.data["sweep"] == want
    pts = doc.find("circle", **{"class": "pt"})
    got = sorted((float(p["data-x"]), p["data-tokens"], p["data-verdict"]) for p in pts)
    assert got == sorted((r["mem_fraction_static"], str(r["tokens"]), r["verdict"]) for r in want["rows"])
    assert [g["data-series"] for g in doc.find("g", **{"class": "series"})] == ["tp_size=1", "tp_size=2"]
