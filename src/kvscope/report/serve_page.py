"""The ``kvscope serve`` page: a form beside the charts. Self-contained (inline CSS and script).

The script only moves data: it sends the form as ``kvscope plan`` options to ``/api/plan``, shows the
returned ``--json`` figures as they are, and puts the server-rendered SVG charts in place. The URL
carries the inputs, so a what-if can be shared as a link. Errors are the CLI's one line, in the page.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any, Mapping

from .html import CSS

__all__ = ["serve_page"]

_PAGE_CSS = """
body{max-width:1320px}.wrap{display:flex;gap:1.4em;align-items:flex-start}
form{flex:0 0 290px;background:#f7f7f7;padding:.8em;border-radius:6px;font-size:.9em}
form label{display:block;margin:.45em 0 .1em;font-weight:600}form input,form select,form textarea{width:100%;
box-sizing:border-box;font:inherit;padding:.2em}form .row{display:flex;gap:.4em}form .row>div{flex:1}
.out{flex:1;min-width:0}.error{color:#a00;font-weight:600;white-space:pre-wrap;margin:.4em 0}
#status{color:#777;font-size:.85em;min-height:1.2em}textarea{font-family:ui-monospace,Menlo,monospace;font-size:.8em}
input[type=range]{padding:0}.out textarea{width:100%;box-sizing:border-box}.out .row{display:flex;gap:.5em;margin:.3em 0}
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var OPTIONS = JSON.parse(document.getElementById("kvscope-options").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var form = $("whatif");
  var KNOB = {sglang: "mem-fraction-static", vllm: "gpu-memory-utilization"};
  var CTX = {sglang: "context-length", vllm: "max-model-len"};
  var FIGS = ["kv_cache_tokens", "max_running_requests", "kv_cell_bytes", "kv_cache_bytes", "weights_bytes"];
  var seq = 0, timer = null;

  function fmt(key, v) {
    if (v === null || v === undefined) return "\u2014";
    if (/bytes$/.test(key) && key !== "kv_cell_bytes") return (v / 1073741824).toFixed(2) + " GiB";
    if (typeof v === "number") return v.toLocaleString("en-US");
    return String(v);
  }
  function setEngineNames() {
    var e = $("engine").value;
    $("knob").name = KNOB[e]; $("knob-label").textContent = "--" + KNOB[e];
    $("ctx").name = CTX[e]; $("ctx-label").textContent = "--" + CTX[e];
    var measured = document.querySelectorAll(".sglang-only input");
    for (var i = 0; i < measured.length; i++) measured[i].disabled = (e !== "sglang");
    var dl = $("versions"); dl.innerHTML = "";
    OPTIONS.engines[e].versions.forEach(function (v) { var o = document.createElement("option"); o.value = v; dl.appendChild(o); });
  }
  function params() {
    var p = new URLSearchParams();
    for (var i = 0; i < form.elements.length; i++) {
      var el = form.elements[i];
      if (!el.name || el.disabled) continue;
      if (el.type === "checkbox") { if (el.checked) p.set(el.name, "true"); continue; }
      var v = el.value.trim();
      if (v !== "") p.set(el.name, v);
    }
    return p;
  }
  function showError(msg) { $("error").textContent = msg; $("status").textContent = ""; }
  function render(d) {
    var j = d.json;
    $("error").textContent = "";
    var v = $("verdict");
    v.className = "banner " + (j.starts ? "ok" : "fail");
    v.setAttribute("data-starts", String(j.starts));
    v.textContent = j.starts ? "starts \u2014 " + fmt("kv_cache_tokens", j.kv_cache_tokens) + " KV tokens per rank"
                             : "fails at start-up: " + (j.error || "the engine does not start");
    FIGS.forEach(function (k) {
      var c = $("f-" + k); c.textContent = fmt(k, j[k]); c.setAttribute("data-value", JSON.stringify(j[k]));
    });
    var kv = j.mem_fraction_static !== undefined ? j.mem_fraction_static : j.gpu_memory_utilization;
    $("f-knob").textContent = fmt("knob", kv); $("f-knob").setAttribute("data-value", JSON.stringify(kv));
    $("f-engine").textContent = (j.engine === "vllm" ? "vLLM " : "SGLang ") + j.engine_version;
    $("command").textContent = d.command;
    $("timeline").innerHTML = d.timeline_svg;
    $("curve").innerHTML = d.curve_svg;
    var fx = $("fixes"); fx.innerHTML = "";
    (j.fix || []).forEach(function (f) {
      var li = document.createElement("li"); li.textContent = f.flag + " " + f.value + " \u2014 " + f.why; fx.appendChild(li);
    });
    if ($("knob").value === "" && typeof kv === "number") $("knob-range").value = kv;
    $("status").textContent = "planned (" + d.curve.points.length + " points on the curve)";
    document.body.setAttribute("data-seq", String(seq));
  }
  function update() {
    var p = params(), my = ++seq;
    history.replaceState(null, "", "?" + p.toString());
    $("status").textContent = "planning\u2026";
    fetch("/api/plan?" + p.toString()).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, d: d}; });
    }).then(function (x) {
      if (my !== seq) return;
      if (!x.ok) { showError(x.d.error); document.body.setAttribute("data-seq", String(seq)); return; }
      render(x.d);
    }).catch(function (e) { showError("kvscope: error: the server did not answer (" + e.message + ")"); });
  }
  function later() { clearTimeout(timer); timer = setTimeout(update, 250); }
  function fromUrl() {
    var q = new URLSearchParams(location.search);
    if (q.get("engine")) $("engine").value = q.get("engine");
    setEngineNames();
    for (var i = 0; i < form.elements.length; i++) {
      var el = form.elements[i];
      if (!el.name || !q.has(el.name)) continue;
      if (el.type === "checkbox") el.checked = q.get(el.name) === "true"; else el.value = q.get(el.name);
    }
    if ($("knob").value) $("knob-range").value = $("knob").value;
  }
  $("engine").addEventListener("change", function () { $("knob").value = ""; $("ctx").value = ""; setEngineNames(); later(); });
  $("knob-range").addEventListener("input", function () { $("knob").value = this.value; later(); });
  form.addEventListener("input", function (e) { if (e.target.id !== "knob-range" && e.target.id !== "engine") later(); });
  form.addEventListener("change", function (e) { if (e.target.id !== "knob-range" && e.target.id !== "engine") later(); });
  form.addEventListener("submit", function (e) { e.preventDefault(); update(); });

  $("logfile").addEventListener("change", function () {
    var f = this.files[0]; if (!f) return;
    var rd = new FileReader(); rd.onload = function () { $("log").value = rd.result; }; rd.readAsText(f);
  });
  $("doctor-run").addEventListener("click", function () {
    $("doctor-error").textContent = ""; $("doctor-status").textContent = "reading the log\u2026";
    var body = JSON.stringify({log: $("log").value, engine: $("doctor-engine").value, model: $("doctor-model").value});
    fetch("/api/doctor", {method: "POST", headers: {"Content-Type": "application/json"}, body: body})
      .then(function (r) { return r.json().then(function (d) { return {ok: r.ok, d: d}; }); })
      .then(function (x) {
        $("doctor-status").textContent = "";
        if (!x.ok) { $("doctor-error").textContent = x.d.error; $("doctor-out").innerHTML = ""; return; }
        $("doctor-out").innerHTML = x.d.html;
      }).catch(function (e) { $("doctor-error").textContent = "kvscope: error: the server did not answer (" + e.message + ")"; });
  });
  fromUrl();
  update();
})();
"""


def _options(values: list[str]) -> str:
    return "".join(f'<option value="{escape(v)}">' for v in values)


def serve_page(options: Mapping[str, Any], version: str) -> str:
    """The page's HTML (the options: bundled models, GPUs and engine versions, from ``/api/options``)."""
    gpus = "".join(f'<option value="{escape(g)}"{" selected" if g == "h100-sxm" else ""}>{escape(g)}</option>'
                   for g in options["gpus"])
    opts = json.dumps(options).replace("</", "<\\/")
    form = f"""
<form id="whatif" autocomplete="off">
<label for="model">model</label><input id="model" name="model" list="models" value="Qwen/Qwen3-8B">
<datalist id="models">{_options(options["models"])}</datalist>
<label for="gpu">GPU</label><select id="gpu" name="gpu">{gpus}</select>
<div class="row"><div><label for="engine">engine</label><select id="engine" name="engine">
<option value="sglang">SGLang</option><option value="vllm">vLLM</option></select></div>
<div><label for="engine-version">version</label><input id="engine-version" name="engine-version" list="versions"
placeholder="latest"><datalist id="versions"></datalist></div></div>
<div class="row"><div><label for="tp">--tp</label><input id="tp" name="tp" type="number" min="1" placeholder="1"></div>
<div><label for="pp">--pp</label><input id="pp" name="pp" type="number" min="1" placeholder="1"></div>
<div><label for="dp">--dp</label><input id="dp" name="dp" type="number" min="1" placeholder="1"></div></div>
<label for="knob" id="knob-label">--mem-fraction-static</label>
<input id="knob-range" type="range" min="0.01" max="0.99" step="0.01" value="0.8" aria-label="memory knob slider">
<input id="knob" name="mem-fraction-static" type="number" min="0.01" max="1" step="0.01" placeholder="engine default">
<label for="ctx" id="ctx-label">--context-length</label><input id="ctx" name="context-length" placeholder="model default">
<label for="kv-cache-dtype">--kv-cache-dtype</label><input id="kv-cache-dtype" name="kv-cache-dtype" list="kvdtypes"
placeholder="auto"><datalist id="kvdtypes">{_options(["auto", "fp8_e4m3", "fp8_e5m2", "bfloat16"])}</datalist>
<div class="row sglang-only"><div><label for="pre">pre-load free GiB</label><input id="pre" name="pre-load-free-gib"
placeholder="measured"></div><div><label for="post">post-load GiB</label><input id="post" name="post-load-free-gib"
placeholder="measured"></div></div>
<label for="concurrency">concurrency to mark on the curve</label><input id="concurrency" name="concurrency"
type="number" min="1" placeholder="none">
<label for="extra">more flags (as on the command line)</label><input id="extra" name="extra"
placeholder="--page-size 64 --disable-cuda-graph">
<p><button type="submit">plan</button></p>
</form>"""
    out = """
<div class="out"><div id="error" class="error" role="alert"></div><div id="status"></div>
<div class="banner unknown" id="verdict">planning…</div>
<table class="figures"><tr><td>engine</td><td class="n" id="f-engine"></td></tr>
<tr><td>memory knob in effect</td><td class="n" id="f-knob"></td></tr>
<tr><td>KV tokens (pool)</td><td class="n" id="f-kv_cache_tokens"></td></tr>
<tr><td>max running requests</td><td class="n" id="f-max_running_requests"></td></tr>
<tr><td>KV bytes per token per rank</td><td class="n" id="f-kv_cell_bytes"></td></tr>
<tr><td>KV pool per rank</td><td class="n" id="f-kv_cache_bytes"></td></tr>
<tr><td>weights per rank</td><td class="n" id="f-weights_bytes"></td></tr></table>
<p class="meta">the same numbers as: <code id="command"></code></p>
<h2>Memory per rank</h2><div id="timeline"></div>
<h2>Memory knob → KV tokens</h2><div id="curve"></div>
<h2>What to set</h2><ul id="fixes"></ul>
<h2>doctor: paste or upload a log</h2>
<div class="row"><input type="file" id="logfile" aria-label="log file">
<select id="doctor-engine" aria-label="engine"><option value="">engine: detect</option><option value="sglang">SGLang</option>
<option value="vllm">vLLM</option></select><input id="doctor-model" placeholder="model (if the log does not name it)"
aria-label="model"></div>
<textarea id="log" rows="8" placeholder="paste an SGLang or vLLM start-up log"></textarea>
<p><button type="button" id="doctor-run">run doctor</button> <span id="doctor-status"></span></p>
<div id="doctor-error" class="error" role="alert"></div><div id="doctor-out"></div></div>"""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            'content="width=device-width,initial-scale=1"><link rel="icon" href="data:,">'
            f'<title>kvscope what-if</title><style>{CSS}{_PAGE_CSS}</style></head><body>'
            f'<h1>kvscope what-if</h1><p class="meta">kvscope {escape(version)} · numbers are '
            '<code>kvscope plan --json</code>\'s for the same inputs · hatched: estimated</p>'
            f'<div class="wrap">{form}{out}</div>'
            f'<script type="application/json" id="kvscope-options">{opts}</script>'
            f'<script>{_SCRIPT}</script></body></html>\n')
