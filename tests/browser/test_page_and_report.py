"""In a real (headless) Chromium: the HTML report renders its charts offline, and the ``kvscope serve``
page answers what-ifs with ``kvscope plan --json``'s numbers, shows the CLI's one-line errors and
runs doctor on a pasted log. No console errors on any of it."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from report_html.cli_helpers import KIMI, LOG, cli

from .conftest import console_errors

pytestmark = pytest.mark.browser




def plan_json(argv: list[str]) -> dict:
    rc, out, err = cli(["plan", *argv, "--json"])
    assert rc in (0, 1) and not err, err  # 1: the engine would not start (the JSON is printed in full)
    return json.loads(out)


def _wait(driver, cond, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(cond)


def _settled(driver) -> bool:
    status = driver.find_element("id", "status").text
    return status.startswith("planned") or bool(driver.find_element("id", "error").text)


def _figure(driver, key: str):
    return json.loads(driver.find_element("id", f"f-{key}").get_attribute("data-value"))


def test_report_renders_its_charts_offline(driver, tmp_path):
    html = tmp_path / "r.html"
    rc, _, err = cli(["plan", *KIMI, "--html", str(html)])
    assert rc in (0, 1) and not err, err
    console_errors(driver)  # empty the log
    driver.get(html.as_uri())
    want = plan_json(KIMI)
    for cls in ("kv-timeline", "kv-curve"):
        svg = driver.find_element("css selector", f"svg.{cls}")
        assert svg.size["width"] > 400 and svg.size["height"] > 80
    segs = driver.find_elements("css selector", "svg.kv-timeline rect.seg")
    weights = [s for s in segs if s.get_attribute("data-part") == "weights"]
    phase = next(p for p in want["ranks"][0]["phases"] if p["name"] == "load_weights")
    assert [int(w.get_attribute("data-bytes")) for w in weights] == [phase["used_bytes"]]  # 8 ranks folded
    assert weights[0].size["width"] > 100
    overhang = driver.find_element("css selector", "rect.overhang")
    assert overhang.get_attribute("data-gib") == f"{want['ranks'][0]['decision']['rest_memory_gib']:.2f}" == "-20.70"
    points = driver.find_elements("css selector", "svg.kv-curve circle.pt")
    assert len(points) > 90
    user = driver.find_element("css selector", 'g.mark[data-mark="user_value"]')
    assert float(user.get_attribute("data-value")) == 0.55
    assert "fails at KV sizing" in driver.find_element("id", "verdict").text
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []  # the file loads nothing
    assert console_errors(driver) == []


def test_doctor_and_fit_reports_render(driver, tmp_path):
    plan = tmp_path / "p.json"
    plan.write_text(cli(["plan", *KIMI[:7], "--json"])[1])
    doc, fit = tmp_path / "d.html", tmp_path / "f.html"
    assert cli(["doctor", str(LOG), "--against", str(plan), "--html", str(doc)])[0] == 1
    assert cli(["fit", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--context", "32768", "--concurrency", "16",
                "--gpus", "2", "--html", str(fit)])[0] == 0
    console_errors(driver)
    driver.get(doc.as_uri())
    assert len(driver.find_elements("css selector", "svg.kv-timeline")) == 2  # the log's and the plan's
    assert driver.find_elements("css selector", "#comparison tr.diff")
    assert driver.find_element("css selector", '#findings li[data-code="effective-fraction-mismatch"]').is_displayed()
    driver.get(fit.as_uri())
    rows = driver.find_elements("css selector", "#options tr[data-rank]")
    assert rows and rows[0].get_attribute("class") == "best"
    assert driver.find_element("css selector", "#options .bar").size["width"] > 0
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert console_errors(driver) == []


def test_page_numbers_equal_plan_json(driver, server):
    query = {"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "tp": "2", "mem-fraction-static": "0.8"}
    console_errors(driver)
    driver.get(f"{server}/?{urlencode(query)}")
    _wait(driver, _settled)
    want = plan_json(["Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--tp", "2", "--mem-fraction-static", "0.8"])
    for key in ("kv_cache_tokens", "max_running_requests", "kv_cell_bytes", "kv_cache_bytes", "weights_bytes"):
        assert _figure(driver, key) == want[key], key
    assert _figure(driver, "knob") == want["mem_fraction_static"] == 0.8
    assert driver.find_element("id", "verdict").get_attribute("data-starts") == "true"
    assert f"{want['kv_cache_tokens']:,}" in driver.find_element("id", "verdict").text
    segs = driver.find_elements("css selector", "#timeline rect.seg")
    kv = [int(s.get_attribute("data-bytes")) for s in segs if s.get_attribute("data-part") == "kv"]
    assert kv == [next(p["used_bytes"] for p in want["ranks"][0]["phases"] if p["name"] == "kv_cache")]
    user = driver.find_element("css selector", '#curve g.mark[data-mark="user_value"]')
    assert int(user.get_attribute("data-tokens")) == want["kv_cache_tokens"]
    assert console_errors(driver) == []


def test_controls_change_the_numbers(driver, server):
    driver.get(f"{server}/?{urlencode({'model': 'Qwen/Qwen3-8B', 'gpu': 'h100-sxm'})}")
    _wait(driver, _settled)
    before = _figure(driver, "kv_cache_tokens")
    assert before == plan_json(["Qwen/Qwen3-8B", "--gpu", "h100-sxm"])["kv_cache_tokens"]
    knob = driver.find_element("id", "knob")
    knob.clear()
    knob.send_keys("0.6")
    _wait(driver, lambda d: _figure(d, "kv_cache_tokens") != before and _settled(d))
    want = plan_json(["Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--mem-fraction-static", "0.6"])
    assert _figure(driver, "kv_cache_tokens") == want["kv_cache_tokens"] < before
    assert "mem-fraction-static=0.6" in driver.current_url  # the URL carries the inputs
    # switch the engine: the knob becomes --gpu-memory-utilization and the numbers are vLLM's
    from selenium.webdriver.support.ui import Select
    Select(driver.find_element("id", "engine")).select_by_value("vllm")
    vllm = plan_json(["Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--engine", "vllm"])
    _wait(driver, lambda d: _figure(d, "kv_cache_tokens") == vllm["kv_cache_tokens"] and _settled(d))
    assert _figure(driver, "knob") == vllm["gpu_memory_utilization"]
    assert driver.find_element("id", "knob-label").text == "--gpu-memory-utilization"
    assert console_errors(driver) == []


def test_bad_input_shows_the_cli_error_in_the_page(driver, server):
    driver.get(f"{server}/?{urlencode({'model': 'Qwen/Qwen3-8B', 'gpu': 'h100-sxm'})}")
    _wait(driver, _settled)
    gpu_mib = driver.find_element("id", "extra")
    gpu_mib.send_keys("--gpu-memory-mib 2")
    _wait(driver, lambda d: d.find_element("id", "error").text != "")
    rc, _, err = cli(["plan", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", "--gpu-memory-mib", "2"])
    assert rc == 2
    assert driver.find_element("id", "error").text == err.strip()
    gpu_mib.clear()
    gpu_mib.send_keys("--tp x")
    _wait(driver, lambda d: "invalid int value" in d.find_element("id", "error").text)
    assert driver.find_element("id", "error").text == "kvscope plan: error: argument --tp/--tp-size: invalid int value: 'x'"
    # the only console entries are the two 400 answers themselves, no script error
    errors = console_errors(driver)
    assert errors and all("400" in e["message"] for e in errors), errors
    gpu_mib.clear()
    _wait(driver, lambda d: d.find_element("id", "error").text == "" and _settled(d))


def test_pasted_log_runs_doctor(driver, server):
    driver.get(f"{server}/?{urlencode({'model': 'Qwen/Qwen3-8B', 'gpu': 'h100-sxm'})}")
    _wait(driver, _settled)
    console_errors(driver)
    driver.execute_script("document.getElementById('log').value = arguments[0];", LOG.read_text())
    driver.find_element("id", "doctor-run").click()
    _wait(driver, lambda d: d.find_elements("css selector", "#doctor-out #findings li"))
    rc, out, _ = cli(["doctor", str(LOG), "--json"])
    want = json.loads(out)
    codes = [li.get_attribute("data-code") for li in driver.find_elements("css selector", "#doctor-out #findings li")]
    assert codes == [f["code"] for f in want["findings"]]
    assert "effective-fraction-mismatch" in codes
    assert driver.find_element("css selector", "#doctor-out svg.kv-timeline").size["width"] > 400
    assert console_errors(driver) == []
