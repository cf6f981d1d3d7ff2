"""Offline ``vllm.LLM`` on the tiny checkpoint: greedy, fixed prompts; prints the token ids.

``python offline_generate.py MODEL_DIR [TP]``. The ``__main__`` guard is required: the EngineCore
process is started with spawn and re-imports this file.
"""
import sys

PROMPTS = ["the cat sat on the mat", "a red dog runs fast"]


def main(model, tp=1):
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, max_model_len=512, max_num_seqs=8, enforce_eager=True, seed=0,
              tensor_parallel_size=tp)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    for out in llm.generate(PROMPTS, params):
        print("TOKENS", list(out.outputs[0].token_ids))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
