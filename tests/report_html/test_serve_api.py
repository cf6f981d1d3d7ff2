"""``kvscope serve``'s JSON endpoints (no browser): the numbers are ``plan --json``'s, bad input is the
CLI's one line with 400, and no request stops the server."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from pathlib import Path
from urllib.parse import urlencode

import pytest

from kvscope.commands.serve import routes
from kvscope.server import make_server
from .cli_helpers import LOG, cli




@pytest.fixture(scope="module")
def server():
    srv = make_server(routes(), "127.0.0.1", 0, quiet=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[:2]
    srv.shutdown()
    srv.server_close()


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection(*server, timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, r.getheader("Content-Type"), data


def get_json(server, path: str):
    status, ctype, data = request(server, "GET", path)
    assert ctype.startswith("application/json")
    return status, json.loads(data)


CASES = [
    {"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "tp": "2", "mem-fraction-static": "0.8"},
    {"model": "moonshotai/Kimi-K2.5", "gpu": "rtx-pro-6000", "tp": "8", "mem-fraction-static": "0.55",
     "pre-load-free-gib": "94", "post-load-free-gib": "21.7"},
    {"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "engine": "vllm", "gpu-memory-utilization": "0.85",
     "max-model-len": "32768"},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "l40s", "extra": "--kv-cache-dtype fp8_e4m3 --page-size 16"},
    {"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "tp": "1", "disable-cuda-graph": "true", "concurrency": "4"},
]


@pytest.mark.parametrize("query", CASES)
def test_plan_endpoint_equals_plan_json(server, query):
    status, d = get_json(server, "/api/plan?" + urlencode(query))
    assert status == 200, d
    argv = d["command"].split()[1:]
    assert argv[0] == "plan" and argv[-1] == "--json"
    rc, out, err = cli(argv)
    assert err == "" and d["json"] == json.loads(out)
    c = d["curve"]
    user = {"sglang": query.get("mem-fraction-static"), "vllm": query.get("gpu-memory-utilization")}[
        d["json"]["engine"]]
    if user:
        p = next(p for p in c["points"] if p["value"] == float(user))
        assert p["kv_cache_tokens"] == d["json"]["kv_cache_tokens"]
    assert 'class="kv-timeline"' in d["timeline_svg"] and 'class="kv-curve"' in d["curve_svg"]


BAD = [
    ({"gpu": "h100-sxm"}, "kvscope: error: no model given (field model)"),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "tp": "x"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h999"}, None),
    ({"model": "no/such-model", "gpu": "h100-sxm"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "mem-fraction-static": "1e308"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "mem-fraction-static": "nan"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "tp": "-3"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "no-such-flag": "1"}, None),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "extra": "--page-size 'unclosed"},
     "kvscope: error: extra flags: No closing quotation"),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "html": "/tmp/x.html"},
     "kvscope: error: option --html is not available on the page"),
    ({"model": "Qwen/Qwen3-8B", "gpu": "h100-sxm", "extra": "--svg=/tmp/x.svg"},
     "kvscope: error: --html/--svg/--png/--json are not available on the page"),
]


def _cli_error(query) -> str:
    argv = ["plan", query.get("model", "")]
    for k, v in query.items():
        if k != "model":
            argv += [f"--{k}", v]
    rc, _, err = cli(argv)
    assert rc == 2
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("query,line", BAD)
def test_bad_input_is_the_cli_line_and_the_server_keeps_serving(server, query, line):
    status, d = get_json(server, "/api/plan?" + urlencode(query))
    assert status == 400 and "\n" not in d["error"] and d["error"].startswith("kvscope")
    assert d["error"] == (line or _cli_error(query))
    status, d = get_json(server, "/api/plan?" + urlencode(CASES[0]))
    assert status == 200


def test_doctor_endpoint_equals_doctor_json(server):
    body = json.dumps({"log": LOG.read_text()}).encode()
    status, ctype, data = request(server, "POST", "/api/doctor", body, {"Content-Type": "application/json"})
    assert status == 200
    d = json.loads(data)
    rc, out, _ = cli(["doctor", str(LOG), "--json"])
    want = json.loads(out)
    for x in (d["json"], want):
        x["log"].pop("seconds")
    assert d["json"] == want
    assert 'data-code="effective-fraction-mismatch"' in d["html"]


@pytest.mark.parametrize("body,headers,status", [
    (b"not json", {}, 400),
    (b"[1, 2]", {}, 400),
    (json.dumps({"log": ""}).encode(), {}, 400),
    (json.dumps({"log": "hello\n", "engine": "trt"}).encode(), {}, 400),
    (b"\xff\xfe", {}, 400),
    (b"{}", {"Content-Length": "999999999999"}, 400),
    (b"{}", {"Content-Length": "abc"}, 400),
])
def test_bad_doctor_requests(server, body, headers, status):
    conn = http.client.HTTPConnection(*server, timeout=30)
    conn.putrequest("POST", "/api/doctor")
    conn.putheader("Content-Length", headers.get("Content-Length", str(len(body))))
    conn.endheaders()
    if "Content-Length" not in headers:
        conn.send(body)
    r = conn.getresponse()
    d = json.loads(r.read())
    conn.close()
    assert r.status == status and d["error"].startswith("kvscope: error: ") and "\n" not in d["error"]
    assert get_json(server, "/api/options")[0] == 200


def test_a_log_that_is_not_a_startup_log(server):
    body = json.dumps({"log": "hello world\n" * 100}).encode()
    status, _, data = request(server, "POST", "/api/doctor", body)
    d = json.loads(data)
    assert status in (200, 400), d
    assert ("error" in d and "\n" not in d["error"]) or "findings" in d["json"]


def test_page_and_unknown_paths(server):
    status, ctype, data = request(server, "GET", "/?model=Qwen/Qwen3-8B")
    assert status == 200 and ctype.startswith("text/html")
    text = data.decode()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    status, d = get_json(server, "/nope")
    assert status == 404 and d["error"] == "kvscope: error: no such page: /nope"
    status, d = get_json(server, "/api/options")
    assert "Qwen/Qwen3-8B" in d["models"] and "h100-sxm" in d["gpus"]
    assert d["engines"]["sglang"]["latest"] in d["engines"]["sglang"]["versions"]


def test_serve_command_starts_answers_and_stops_on_ctrl_c():
    import os
    import re
    import signal
    import subprocess
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    p = subprocess.Popen([sys.executable, "-m", "kvscope.cli", "serve", "--port", "0", "--quiet"],
                         stderr=subprocess.PIPE, text=True, env=env,
                         # SIGINT at its default even when the tests run in the background (nohup, &)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = p.stderr.readline()
        m = re.match(r"kvscope serve: http://127\.0\.0\.1:(\d+)/  \(Ctrl-C to stop\)$", line.strip())
        assert m, line
        status, d = get_json(("127.0.0.1", int(m.group(1))), "/api/options")
        assert status == 200 and "h100-sxm" in d["gpus"]
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
