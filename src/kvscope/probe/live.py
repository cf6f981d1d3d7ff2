"""``kvscope probe --url``: read the figures a running server already exposes, as probe records.

SGLang: ``GET /server_info`` (or the older ``/get_server_info``): server args, scheduler info
(``max_total_num_tokens``, ``max_req_input_len``…) and per-DP ``internal_states`` with
``memory_usage`` {weight, kvcache (GB), token_capacity, graph}. vLLM: ``GET /metrics``
(Prometheus text): ``vllm:cache_config_info`` labels (``num_gpu_blocks``, ``block_size``,
``gpu_memory_utilization``, ``cache_dtype``…) and ``vllm:kv_cache_usage_perc``.
Parsing is pure (tested with captured bodies); only ``fetch`` touches the network.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping

from kvscope.errors import KvscopeError

GIB = 1 << 30
Fetch = Callable[[str], "tuple[int, str]"]


def fetch(url: str, timeout_s: float = 10.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (user's URL)
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def _num(v: Any) -> Any:
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
    return v


def sglang_record(info: Mapping[str, Any], url: str) -> dict[str, Any]:
    outputs: dict[str, Any] = {}
    for key in ("max_total_num_tokens", "max_req_input_len", "mem_fraction_static",
                "max_running_requests", "page_size", "chunked_prefill_size", "context_length",
                "kv_cache_dtype", "tp_size", "pp_size", "dp_size", "cuda_graph_max_bs",
                "disable_custom_all_reduce", "speculative_algorithm"):
        if info.get(key) is not None:
            outputs[key] = info[key]
    states = info.get("internal_states") or []
    if states:
        first = states[0]
        mem = first.get("memory_usage") or {}
        for src, dst in (("weight", "weight_load_mem_usage_gib"), ("kvcache", "kv_cache_gib"),
                         ("graph", "graph_mem_usage_gib")):
            if isinstance(mem.get(src), (int, float)):
                outputs[dst] = mem[src]
                outputs[dst[: -len("_gib")] + "_bytes"] = int(mem[src] * GIB)
        if mem.get("token_capacity") is not None:
            outputs["max_total_num_tokens"] = int(mem["token_capacity"])
        if first.get("effective_max_running_requests_per_dp") is not None:
            outputs["max_running_requests"] = first["effective_max_running_requests_per_dp"]
        outputs["internal_states"] = len(states)
    return {"event": "live", "engine": "sglang", "engine_version": info.get("version"),
            "source_url": url, "inputs": {"model": info.get("model_path")}, "outputs": outputs}


_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def vllm_record(metrics_text: str, url: str) -> dict[str, Any] | None:
    samples = parse_prometheus(metrics_text)
    outputs: dict[str, Any] = {}
    model = None
    for name, labels, value in samples:
        if name == "vllm:cache_config_info":
            for k, v in labels.items():
                if v not in ("None", ""):
                    outputs[k] = _num(v)
        elif name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            outputs["kv_cache_usage_perc"] = value
        elif name == "vllm:num_requests_running":
            outputs["num_requests_running"] = int(value)
        model = model or labels.get("model_name")
    if not any(name.startswith("vllm:") for name, _, _ in samples):
        return None
    # 0.32+ labels: the engine's own capacity figures ("GPU/CPU KV cache size", "Maximum concurrency")
    if "kv_cache_max_concurrency" in outputs:
        outputs.setdefault("max_concurrency", outputs["kv_cache_max_concurrency"])
    return {"event": "live", "engine": "vllm", "engine_version": None, "source_url": url,
            "inputs": {"model": model}, "outputs": outputs}


def read_live(url: str, get: Fetch = fetch) -> dict[str, Any]:
    base = url.rstrip("/")
    for path in ("/server_info", "/get_server_info"):
        status, body = get(base + path)
        if status == 200:
            try:
                info = json.loads(body)
            except ValueError:
                continue
            if isinstance(info, dict):
                return sglang_record(info, base + path)
    status, body = get(base + "/metrics")
    if status == 200:
        rec = vllm_record(body, base + "/metrics")
        if rec is not None:
            status_v, body_v = get(base + "/version")
            if status_v == 200:
                try:
                    rec["engine_version"] = json.loads(body_v).get("version")
                except (ValueError, AttributeError):
                    pass
            return rec
    raise KvscopeError(f"no SGLang /server_info or vLLM /metrics answered at {base}",
                       field="--url", fix="pass the server's base URL, e.g. http://127.0.0.1:30000")


def write_live(out_dir: str, rec: Mapping[str, Any]) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"live-{int(time.time())}.jsonl")
    full = dict(rec, v=1, t=round(time.time(), 6), pid=None, seq=1, rank={})
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(full, separators=(",", ":"), default=str) + "\n")
    return path
