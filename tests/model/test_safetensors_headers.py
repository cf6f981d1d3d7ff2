"""safetensors headers as the reference loader checks them (issue 14): every malformed header is one
CheckpointError naming the file; a sharded checkpoint's index is followed; pipes are skipped, not opened."""

from __future__ import annotations

import json
import os
import struct
import threading

import pytest

from kvscope.errors import CheckpointError
from kvscope.model.safetensors import MAX_HEADER_BYTES, checkpoint_tensors, read_header


def _file(path, header, data_len=None, raw=None):
    body = raw if raw is not None else json.dumps(header).encode()
    if data_len is None:
        data_len = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    path.write_bytes(struct.pack("<Q", len(body)) + body + bytes(data_len))
    return path


def _t(dtype, shape, a, b):
    return {"dtype": dtype, "shape": shape, "data_offsets": [a, b]}


GOOD = {"__metadata__": {"format": "pt"}, "w": _t("BF16", [4, 8], 0, 64), "s": _t("F32", [4], 64, 80),
        "q": _t("F8_E4M3", [2, 3], 80, 86), "p": _t("F4", [2, 3], 86, 89)}


def test_valid_header_counts_bytes(tmp_path):
    ts = read_header(_file(tmp_path / "a.safetensors", GOOD))
    assert sorted((t.name, t.nbytes) for t in ts) == [("p", 3), ("q", 6), ("s", 16), ("w", 64)]


@pytest.mark.parametrize("header,what", [
    ({"w": _t("BF16", [4], -8, 0)}, "0 <= begin <= end"),
    ({"w": _t("BF16", [4], 8, 0)}, "0 <= begin <= end"),
    ({"a": _t("BF16", [4], 0, 8), "b": _t("BF16", [4], 4, 12)}, "overlaps"),
    ({"a": _t("BF16", [4], 8, 16)}, "gap"),
    ({"w": _t("Q7", [4], 0, 8)}, "unknown dtype"),
    ({"w": _t("BF16", [4, -1], 0, 8)}, "shape"),
    ({"w": _t("BF16", [4], 0, 10)}, "needs 8"),
    ({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, True]}}, "two integers"),
    ({"__metadata__": {"a": 1}}, "__metadata__"),
])
def test_malformed_headers_are_refused(tmp_path, header, what):
    with pytest.raises(CheckpointError, match=what) as e:
        read_header(_file(tmp_path / "x.safetensors", header, data_len=16))
    assert e.value.field == "x.safetensors" and "\n" not in str(e.value)


def test_forty_byte_file_cannot_claim_a_petabyte(tmp_path):
    """Issue 14: a tiny file with huge offsets used to report 10^15 bytes of weights."""
    header = {"w": _t("U8", [10**15], 0, 10**15)}
    with pytest.raises(CheckpointError, match="past the end"):
        read_header(_file(tmp_path / "x.safetensors", header, data_len=0))


def test_truncated_shard_is_refused(tmp_path):
    p = _file(tmp_path / "t.safetensors", GOOD)
    p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match="truncated"):
        read_header(p)


@pytest.mark.parametrize("raw", [b'{"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, Infinity]}}',
                                 b'{"w": {"dtype": "BF16", "shape": [NaN], "data_offsets": [0, 8]}}',
                                 b"[" * 200_000 + b"]" * 200_000, b"\xff\xfe", b"[1, 2]"])
def test_non_finite_deep_or_non_object_json(tmp_path, raw):
    with pytest.raises(CheckpointError):
        read_header(_file(tmp_path / "x.safetensors", {}, data_len=0, raw=raw))


def test_header_length_cap_is_the_formats(tmp_path):
    p = tmp_path / "big.safetensors"
    p.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}")
    with pytest.raises(CheckpointError, match="100000000"):
        read_header(p)
    assert MAX_HEADER_BYTES == 100_000_000


def test_index_is_followed_and_missing_shards_reported(tmp_path):
    _file(tmp_path / "model-00001-of-00002.safetensors", {"a": _t("BF16", [4], 0, 8)})
    _file(tmp_path / "stray.safetensors", {"z": _t("BF16", [4], 0, 8)})  # not in the index: ignored
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        checkpoint_tensors(tmp_path)
    _file(tmp_path / "model-00002-of-00002.safetensors", {"b": _t("BF16", [2], 0, 4)})
    assert sorted(t.name for t in checkpoint_tensors(tmp_path)) == ["a", "b"]


def test_index_naming_a_path_outside_the_folder(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(CheckpointError, match="same folder"):
        checkpoint_tensors(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_named_pipe_is_skipped_with_a_warning(tmp_path):
    _file(tmp_path / "a.safetensors", {"a": _t("BF16", [4], 0, 8)})
    os.mkfifo(tmp_path / "b.safetensors")
    out = []
    th = threading.Thread(target=lambda: out.append(checkpoint_tensors(tmp_path)), daemon=True)
    with pytest.warns(UserWarning, match="not a regular file"):
        th.start()
        th.join(5)
    assert not th.is_alive() and [t.name for t in out[0]] == ["a"]


def _checkpoint(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_hidden_layers": 1,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512,
           "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shapes = {"model.embed_tokens.weight": [1000, 256], "lm_head.weight": [1000, 256], "model.norm.weight": [256],
              "model.layers.0.self_attn.q_proj.weight": [256, 256], "model.layers.0.self_attn.k_proj.weight": [64, 256],
              "model.layers.0.self_attn.v_proj.weight": [64, 256], "model.layers.0.self_attn.o_proj.weight": [256, 256],
              "model.layers.0.mlp.gate_proj.weight": [512, 256], "model.layers.0.mlp.up_proj.weight": [512, 256],
              "model.layers.0.mlp.down_proj.weight": [256, 512], "model.layers.0.input_layernorm.weight": [256],
              "model.layers.0.post_attention_layernorm.weight": [256]}
    header, off = {}, 0
    for name, shape in shapes.items():
        n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = _t("BF16", shape, off, off + n)
        off += n
    _file(tmp_path / "model.safetensors", header)
    return off


def test_local_checkpoint_plans_with_header_bytes_and_truncation_is_refused_by_both_engines(tmp_path):
    import kvscope

    total = _checkpoint(tmp_path)
    assert kvscope.plan(str(tmp_path), "h100-sxm").weights_bytes == total
    p = tmp_path / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    for engine in ("sglang", "vllm"):
        with pytest.raises(CheckpointError, match="truncated"):
            kvscope.plan(str(tmp_path), "h100-sxm", engine=engine)
