"""The stdlib hub client against a local server that speaks the hub's file protocol: resolve URLs,
range requests, redirects to another host (the CDN), 401 for a gated repo, 404. No network."""

from __future__ import annotations

import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import kvscope
from kvscope.catalog import hub, load_model_source
from kvscope.errors import CheckpointError, ConfigError
from kvscope.model.load import exact_weights_per_rank_fn, load_spec

H, L, V, I, KV = 256, 2, 1000, 512, 2  # hidden, layers, vocab, intermediate, kv heads (head_dim 32)
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": H, "num_hidden_layers": L,
          "num_attention_heads": 8, "num_key_value_heads": KV, "vocab_size": V, "intermediate_size": I,
          "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _tensors():
    t = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (KV * 32, H),
                  p + "self_attn.v_proj.weight": (KV * 32, H), p + "self_attn.o_proj.weight": (H, H),
                  p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                  p + "mlp.down_proj.weight": (H, I), p + "input_layernorm.weight": (H,),
                  p + "post_attention_layernorm.weight": (H,)})
    return t


def _shard(tensors: dict) -> bytes:
    """A safetensors file: real header, zero-filled data (only the header is ever read)."""
    header, off = {}, 0
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(off)


TENSORS = _tensors()
NAMES = sorted(TENSORS)
SHARDS = {"model-00001-of-00002.safetensors": {k: TENSORS[k] for k in NAMES[: len(NAMES) // 2]},
          "model-00002-of-00002.safetensors": {k: TENSORS[k] for k in NAMES[len(NAMES) // 2:]}}
TOTAL = sum(2 * (s[0] * (s[1] if len(s) > 1 else 1)) for s in TENSORS.values())
FILES = {"config.json": json.dumps(CONFIG).encode(),
         "model.safetensors.index.json": json.dumps({"metadata": {"total_size": TOTAL}, "weight_map": {
             k: f for f, ts in SHARDS.items() for k in ts}}).encode()}
FILES.update({f: _shard(ts) for f, ts in SHARDS.items()})
TOKEN = "hf_secret"


class Hub(BaseHTTPRequestHandler):
    log: list = []
    repos = {"org/tiny": FILES, "org/gated": FILES,
             "org/broken": {**FILES, "model-00002-of-00002.safetensors": None},
             "org/binonly": {"config.json": FILES["config.json"]}}

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):  # noqa: N802
        self.log.append((self.path, self.headers.get("Range"), self.headers.get("Authorization")))
        if self.path.startswith("/cdn/"):
            return self._send(bytes.fromhex(self.path.split("/")[2]).decode())
        parts = self.path.split("/")  # /org/name/resolve/<rev>/<file>
        if len(parts) != 6 or parts[3] != "resolve":
            return self._status(404)
        repo, rev, fname = f"{parts[1]}/{parts[2]}", parts[4], parts[5]
        files = self.repos.get(repo)
        if files is None or rev not in ("main", "v1.0") or files.get(fname) is None:
            return self._status(404)
        if repo == "org/gated" and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._status(401)
        if fname.endswith(".safetensors"):  # LFS files: redirect to the CDN, on another host name
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_port}/cdn/"
                                         f"{f'{repo}|{fname}'.encode().hex()}")
            self.end_headers()
            return None
        return self._send(f"{repo}|{fname}")

    def _send(self, key: str):
        repo, fname = key.split("|")
        body = self.repos[repo][fname]
        rng = self.headers.get("Range")
        if rng:
            a, b = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            part = body[a:b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + len(part) - 1}/{len(body)}")
            body = part
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def server(monkeypatch, tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    Hub.log = []
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.server_port}")
    monkeypatch.setenv("KVSCOPE_HUB", "1")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for k in ("KVSCOPE_OFFLINE", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE"):
        monkeypatch.delenv(k, raising=False)
    yield srv
    srv.shutdown()
    srv.server_close()


def test_unbundled_model_plans_with_exact_header_weights(server):
    spec, src = load_spec("org/tiny")
    per_rank = exact_weights_per_rank_fn(src, spec)
    assert per_rank(1) == TOTAL  # every byte the headers declare, summed
    t = kvscope.plan("org/tiny", "h100-sxm")
    assert t.weights_bytes == TOTAL  # the plan carries the header bytes, not the config estimate
    shard_gets = [(p, r) for p, r, _ in Hub.log if p.startswith("/cdn/")]
    # two range requests per shard (length, header); never a request for the whole file
    assert len(shard_gets) == 4 and all(r is not None for _, r in shard_gets)
    assert {r for _, r in shard_gets} >= {"bytes=0-7"}


def test_second_run_is_offline(server, monkeypatch):
    spec, src = load_spec("org/tiny")
    exact_weights_per_rank_fn(src, spec)  # the first run fills the cache
    n = len(Hub.log)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    spec, src = load_spec("org/tiny")
    assert exact_weights_per_rank_fn(src, spec)(1) == TOTAL
    assert len(Hub.log) == n


def test_offline_is_one_line_within_two_seconds(server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        load_model_source("org/never-seen")
    assert time.monotonic() - t0 < 2.0
    assert "\n" not in str(e.value) and "cannot reach 127.0.0.1:9" in str(e.value)


def test_revision_is_in_the_resolve_url(server):
    load_model_source("org/tiny@v1.0")
    assert Hub.log[0][0] == "/org/tiny/resolve/v1.0/config.json"
    with pytest.raises(ConfigError, match="HTTP 404"):
        load_model_source("org/tiny@nope")


def test_gated_needs_the_token_and_it_never_leaves_the_host(server, monkeypatch):
    with pytest.raises(ConfigError, match="HTTP 401.*HF_TOKEN"):
        load_model_source("org/gated")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spec, src = load_spec("org/gated")
    assert exact_weights_per_rank_fn(src, spec)(1) == TOTAL
    cdn = [a for p, _, a in Hub.log if p.startswith("/cdn/")]
    assert cdn and all(a is None for a in cdn)  # the redirect to another host dropped Authorization


def test_index_naming_a_missing_shard_is_reported(server):
    spec, src = load_spec("org/broken")
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        exact_weights_per_rank_fn(src, spec)


def test_unknown_repo_is_a_one_line_404(server):
    with pytest.raises(ConfigError) as e:
        load_model_source("org/absent")
    assert "unknown model" in str(e.value) and "HTTP 404" in str(e.value) and "\n" not in str(e.value)


def test_hub_off_by_env(server, monkeypatch):
    monkeypatch.setenv("KVSCOPE_OFFLINE", "1")
    assert not hub.enabled()
    with pytest.raises(ConfigError, match="hub access off"):
        load_model_source("org/tiny")


def test_repo_without_safetensors_falls_back_to_the_estimate(server):
    spec, src = load_spec("org/binonly")
    assert exact_weights_per_rank_fn(src, spec) is None
    t = kvscope.plan("org/binonly", "h100-sxm")
    assert t.weights_bytes > 0


def test_unbundled_model_plans_with_exact_header_weights_on_vllm(server):
    """vLLM: the header bytes, the vocabulary padded to 1024 rows (embed and lm_head, 24 x 256 x 2 B each)
    and the RoPE cos/sin cache in bf16 (4096 positions x 32)."""
    t = kvscope.plan("org/tiny", "h100-sxm", engine="vllm")
    assert t.weights_bytes == TOTAL + 2 * 24 * H * 2 + 4096 * 32 * 2
    assert "weights" not in t.estimated
