"""Build a tiny random Llama checkpoint and a word-level tokenizer in DIR, locally (no hub).

Run with the real-engine venv's python (it needs torch, safetensors, tokenizers, transformers):
``python make_tiny_llama.py DIR``. The weights are random (seed 0); the model only has to run.
"""
import json
import os
import sys

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,  # CPU attention: head_dim 64+
    "vocab_size": 256, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
}
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "red", "blue", "runs", "fast", "slow"]


def build_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        vocab[w] = len(vocab)
    for i in range(CONFIG["vocab_size"] - len(vocab)):
        vocab["w%d" % i] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 1024,
                   "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}"}, fh)


def build_weights(path):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    c = CONFIG
    h, inter, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": rnd(c["vocab_size"], h), "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
         "lm_head.weight": rnd(c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        t.update({p + "self_attn.q_proj.weight": rnd(q, h), p + "self_attn.k_proj.weight": rnd(kv, h),
                  p + "self_attn.v_proj.weight": rnd(kv, h), p + "self_attn.o_proj.weight": rnd(h, q),
                  p + "mlp.gate_proj.weight": rnd(inter, h), p + "mlp.up_proj.weight": rnd(inter, h),
                  p + "mlp.down_proj.weight": rnd(h, inter),
                  p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                  p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16)})
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def main(path):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=1)
    with open(os.path.join(path, "generation_config.json"), "w") as fh:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, fh)
    build_tokenizer(path)
    build_weights(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
