"""A local checkpoint gives exact weights on both engines' paths (issue 13): the bytes its safetensors
headers declare, split per rank as vLLM shards them (model/shard.py, vllm @ 0.33.0). The expected figures
below are written out from the tensor shapes by hand, not computed by kvscope's code."""

from __future__ import annotations

import json
import struct

import pytest

import kvscope
from kvscope.model.load import checkpoint_tensors_of, load_spec
from kvscope.model.shard import vllm_rank_bytes

H, V, L = 256, 1000, 2  # hidden, vocab (vLLM pads it to 1024), layers; head_dim 32; max positions 4096
ROPE_BF16 = 4096 * 32 * 2  # vLLM's cos/sin cache in the model dtype (base.py @ 0.33.0: cache.to(dtype))


def _write(directory, config: dict, tensors: dict, dtype: str = "BF16") -> None:
    """config.json + two safetensors shards (real headers, zero data) + the index naming them."""
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for fname, keys in shards.items():
        header, off = {}, 0
        for k in keys:
            n = {"BF16": 2, "F32": 4}[dtype]
            for d in tensors[k]:
                n *= d
            header[k] = {"dtype": dtype, "shape": list(tensors[k]), "data_offsets": [off, off + n]}
            off += n
        raw = json.dumps(header).encode()
        (directory / fname).write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(off))
    index = {"weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    (directory / "config.json").write_text(json.dumps(config))


def _attn(p: str, kv: int) -> dict:
    return {p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (kv * 32, H),
            p + "self_attn.v_proj.weight": (kv * 32, H), p + "self_attn.o_proj.weight": (H, H),
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)}


BASE = {"hidden_size": H, "num_hidden_layers": L, "num_attention_heads": 8, "vocab_size": V,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


@pytest.fixture
def llama(tmp_path):
    """Llama, 2 KV heads (fewer than TP 4: each rank holds one, replicated), vocabulary 1000."""
    cfg = {**BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2,
           "intermediate_size": 512}
    t = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update(_attn(p, 2))
        t.update({p + "mlp.gate_proj.weight": (512, H), p + "mlp.up_proj.weight": (512, H),
                  p + "mlp.down_proj.weight": (H, 512)})
    _write(tmp_path, cfg, t)
    return tmp_path


@pytest.fixture
def mixtral(tmp_path):
    """Mixtral, 6 experts of intermediate 128, 8 KV heads, router replicated."""
    cfg = {**BASE, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_key_value_heads": 8,
           "intermediate_size": 128, "num_local_experts": 6, "num_experts_per_tok": 2}
    t = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update(_attn(p, 8))
        t[p + "block_sparse_moe.gate.weight"] = (6, H)
        for e in range(6):
            q = f"{p}block_sparse_moe.experts.{e}."
            t.update({q + "w1.weight": (128, H), q + "w3.weight": (128, H), q + "w2.weight": (H, 128)})
    _write(tmp_path, cfg, t)
    return tmp_path


def test_llama_tp4_vllm_rank_bytes(llama):
    # embed + lm_head: 1024/4 rows x 512 B each; 5 norms x 512 B; per layer q, o: 131072/4;
    # k, v: one of the 2 KV heads (16384 B each); gate, up, down: 262144/4 each
    per_layer = 2 * 32768 + 2 * 16384 + 3 * 65536
    share = 2 * 256 * 512 + 5 * 512 + L * per_layer
    assert share == 854528
    spec, src = load_spec(str(llama))
    assert vllm_rank_bytes(checkpoint_tensors_of(src), spec, tp=4) == (0, share)
    t = kvscope.plan(str(llama), "h100-sxm", engine="vllm", tensor_parallel_size=4)
    assert t.weights_bytes == share + ROPE_BF16
    assert "weights" not in t.estimated


def test_sglang_reports_the_header_bytes_as_exact(llama):
    total = sum(2 * n for n in (V * H, V * H, H)) + L * 2 * (2 * H * H + 2 * 64 * H + 3 * 512 * H + 2 * H)
    t = kvscope.plan(str(llama), "h100-sxm", engine="sglang")
    assert t.weights_bytes == total
    assert "weights" not in t.estimated and t.extra.weights_estimated is False
    # vLLM on one GPU: the same bytes, the vocabulary padded to 1024 rows (embed and lm_head), + RoPE cache
    assert kvscope.plan(str(llama), "h100-sxm", engine="vllm").weights_bytes == total + 2 * 24 * 512 + ROPE_BF16


@pytest.mark.parametrize("ep,experts_per_layer", [
    (False, 6 * 196608 // 4),  # every expert split over dp x tp = 4 ranks
    (True, 2 * 196608),  # whole experts: rank 0 holds ceil(6 / 4) = 2
])
def test_mixtral_experts_over_dp_times_tp(mixtral, ep, experts_per_layer):
    # embed + lm_head: 1024/2 rows x 512 B; 5 norms; per layer q, k, v, o: 131072/2 each, router 6 x 256 x 2
    share = 2 * 512 * 512 + 5 * 512 + L * (4 * 65536 + 3072 + experts_per_layer)
    spec, src = load_spec(str(mixtral))
    got = vllm_rank_bytes(checkpoint_tensors_of(src), spec, tp=2, dp=2, enable_expert_parallel=ep)
    assert got == (L * experts_per_layer, share)
    t = kvscope.plan(str(mixtral), "h100-sxm", engine="vllm", tensor_parallel_size=2, data_parallel_size=2,
                     enable_expert_parallel=ep)
    assert t.weights_bytes == share + ROPE_BF16


def test_pipeline_parallel_keeps_the_estimate(llama):
    t = kvscope.plan(str(llama), "h100-sxm", engine="vllm", pipeline_parallel_size=2)
    assert "weights" in t.estimated


def test_float32_checkpoint_is_loaded_in_bf16(tmp_path):
    """A float32 checkpoint served under --dtype auto: vLLM builds bf16 parameters and casts into them, so
    the rank holds half the header's bytes (a bf16 copy of the llama fixture above: 854528 B at TP 4)."""
    cfg = {**BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2,
           "intermediate_size": 512, "torch_dtype": "float32"}
    t = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update(_attn(p, 2))
        t.update({p + "mlp.gate_proj.weight": (512, H), p + "mlp.up_proj.weight": (512, H),
                  p + "mlp.down_proj.weight": (H, 512)})
    _write(tmp_path, cfg, t, dtype="F32")
    spec, src = load_spec(str(tmp_path))
    tensors = checkpoint_tensors_of(src)
    assert sum(x.nbytes for x in tensors) == 2 * sum(2 * _numel(s) for s in t.values())
    assert vllm_rank_bytes(tensors, spec, tp=4) == (0, 854528)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_skipped_tensors_and_replicated_mla_projections():
    """What vLLM's load_weights skips (a stored lm_head under tie_word_embeddings, rotary inv_freq, MTP layer
    ``model.layers.{num_hidden_layers}``) and the MLA down-projections it replicates (ReplicatedLinear)."""
    from kvscope.model.safetensors import TensorInfo
    from kvscope.model.spec import ModelSpec

    cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 256,
           "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1024,
           "intermediate_size": 512, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
           "tie_word_embeddings": True, "kv_lora_rank": 64, "q_lora_rank": 96, "qk_rope_head_dim": 16,
           "qk_nope_head_dim": 32, "v_head_dim": 32}
    spec = ModelSpec.from_hf_config(cfg, "t")

    def t(name, *shape):
        n = 2
        for d in shape:
            n *= d
        return TensorInfo(name, "BF16", shape, n)

    p = "model.layers.0.self_attn."
    tensors = [t("model.embed_tokens.weight", 1024, 256), t("lm_head.weight", 1024, 256),
               t(p + "rotary_emb.inv_freq", 8), t(p + "q_a_proj.weight", 96, 256),
               t(p + "kv_a_proj_with_mqa.weight", 80, 256), t(p + "q_b_proj.weight", 8 * 48, 96),
               t(p + "kv_b_proj.weight", 8 * 64, 64), t(p + "o_proj.weight", 256, 8 * 32),
               t("model.layers.1.eh_proj.weight", 256, 512)]
    # TP 4: embed 1024/4 rows; q_a (96x256) and kv_a (80x256) whole; q_b, kv_b, o_proj a quarter each
    share = 256 * 512 + 2 * (96 + 80) * 256 + (8 * 48 * 96 + 8 * 64 * 64 + 256 * 8 * 32) * 2 // 4
    assert vllm_rank_bytes(tensors, spec, tp=4) == (0, share)
    assert vllm_rank_bytes(tensors, spec, tp=4, include_mtp=True) == (0, share + 256 * 512 * 2 // 4)
