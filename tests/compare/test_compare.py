"""``kvscope compare`` on vllm-project/vllm#21348: Qwen3-235B-A22B-FP8 on 4x H100, SGLang
``--tp 4 --mem-fraction-static 0.93`` vs vLLM ``--tensor-parallel-size 4`` (default 0.9).
Reported: vLLM "Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens";
SGLang "#tokens: 367404, K size: 8.23 GB, V size: 8.23 GB" — about 2x."""

from __future__ import annotations

import json

import pytest

from kvscope.compare import compare, parse_runs
from kvscope.errors import FlagError

MODEL = "Qwen/Qwen3-235B-A22B-FP8"


def _case():
    return compare(MODEL, "h100", versions=("sglang=0.4.10.post2", "vllm=0.9.2"), tp=4,
                   sglang={"mem_fraction_static": 0.93})


def test_issue_21348_term_by_term():
    cmp = _case()
    s, v = cmp.columns
    # the cell is the same in both engines: 1 KV head per rank x (128 + 128) x 2 B x 94 layers
    assert s.cell_bytes == v.cell_bytes == 94 * 1 * 256 * 2 == 48128
    # the reported pools, from the cell: SGLang 367,404 x 48,128 B = 16.47 GiB (K 8.23 + V 8.23 "GB");
    # vLLM 178,880 tokens = 11,180 blocks of 16 x 48,128 B = 8.02 GiB of its 8.11 GiB
    assert round(367404 * 48128 / 2**30 / 2, 2) == 8.23 and v.page_tokens == 16 and v.block_bytes == 16 * 48128
    # both budgets are the fraction of something different: SGLang of the free memory before the
    # weights, vLLM of the CUDA total; the two products are nearly equal here ...
    assert s.budget_bytes == int(s.fraction_base_bytes * 0.93) and v.fraction == 0.9
    assert abs(s.budget_bytes - v.budget_bytes) < 0.01 * v.budget_bytes
    # ... so the difference is the reserve vLLM subtracts inside its budget (activation peak + non-torch)
    assert cmp.largest == "reserve" and v.reserve_in_budget and not s.reserve_in_budget
    assert v.kv_budget_bytes == v.budget_bytes - v.weights_bytes - v.reserve_bytes
    # tokens from each engine's own arithmetic: SGLang rest // cell (page 1); vLLM whole blocks of 16
    assert s.kv_tokens == s.kv_budget_bytes // s.cell_bytes and s.page_tokens == 1
    assert v.kv_tokens == v.kv_budget_bytes // v.block_bytes * 16
    assert 1.8 < s.kv_tokens / v.kv_tokens < 2.1  # reported: 367,404 / 178,880 = 2.05
    # predictions within 2 % (SGLang) and 6 % (vLLM) of the reported pools (estimated inputs)
    assert abs(s.kv_tokens / 367404 - 1) < 0.02 and abs(v.kv_tokens / 178880 - 1) < 0.06
    assert "gpu_worker.py" in cmp.explanation and "model_runner.py" in cmp.explanation
    assert "@ v0.9.2" in cmp.explanation and "@ v0.4.10.post2" in cmp.explanation
    d = json.loads(json.dumps(cmp.to_dict()))
    assert d["largest_difference"] == "reserve" and len(d["columns"]) == 2


def test_release_columns_and_bad_input():
    assert parse_runs(["sglang"], ["0.5.9", "0.5.23"]) == [("sglang", "0.5.9"), ("sglang", "0.5.23")]
    assert parse_runs(["sglang", "vllm"], []) == [("sglang", None), ("vllm", None)]
    assert parse_runs(None, ["0.5.9", "0.5.23"]) == [("sglang", "0.5.9"), ("sglang", "0.5.23")]  # SGLang's releases
    assert parse_runs(None, ["0.9.2", "0.33.0"]) == [("vllm", "0.9.2"), ("vllm", "0.33.0")]
    with pytest.raises(FlagError, match="--engine-version"):
        parse_runs(["sglang", "vllm"], ["0.5.9"])
    with pytest.raises(FlagError, match="--engine"):
        parse_runs(["tgi"], [])
    cmp = compare("meta-llama/Llama-3.1-8B-Instruct", "h100", engines=("sglang",), versions=("0.5.9", "0.5.23"))
    assert [c.engine_version for c in cmp.columns] == ["0.5.9", "0.5.23"]


def test_cli_text_and_json(capsys):
    from kvscope.cli import main
    assert main(["compare", MODEL, "--gpu", "h100", "--tp", "4", "--mem-fraction-static", "0.93",
                 "--engine-version", "sglang=0.4.10.post2,vllm=0.9.2"]) == 0
    out = capsys.readouterr().out
    assert "fraction of" in out and "largest difference: reserve" in out
    assert main(["compare", MODEL, "--gpu", "h100", "--tp", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["columns"][1]["engine"] == "vllm"


def test_html_report_embeds_the_json(tmp_path, capsys):
    from kvscope.cli import main
    out = tmp_path / "c.html"
    assert main(["compare", MODEL, "--gpu", "h100", "--tp", "4", "--html", str(out)]) == 0
    text = out.read_text()
    data = json.loads(text.split('id="kvscope-data">')[1].split("</script>")[0])
    assert data["compare"]["columns"][0]["kv_tokens"] == _case_default()["columns"][0]["kv_tokens"]
    assert 'id="terms"' in text and 'id="explanation"' in text and "http://" not in text


def _case_default():
    return compare(MODEL, "h100", tp=4).to_dict()


def test_a_column_that_does_not_start_is_named_exit_1(capsys):
    from kvscope.cli import main
    assert main(["compare", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert [c["starts"] for c in d["columns"]] == [False, False]
    for c in d["columns"]:
        assert c["error"].splitlines()[0][:200] in d["explanation"]
