"""Default mem_fraction_static / chunked_prefill_size / cuda_graph_max_bs per version, against the worked
numbers of shared/specs/sglang.md §3 and §7 and the auto values real logs printed."""

from __future__ import annotations

import pytest

from kvscope.engines.sglang.args import SGLangArgs, gpu_bucket_defaults, resolve_defaults, vlm_factor
from kvscope.engines.sglang.release import release

KIMI_VIT = dict(vit_num_layers=27, vit_hidden_size=1152)


def test_vlm_factor_kimi():
    assert vlm_factor(27, 1152) == pytest.approx(0.9097, abs=1e-4)


@pytest.mark.parametrize("version,expected_base,reserved", [
    ("0.5.9", 0.856, 512 + 8192 * 1.5 + 128 * 2 + 8 / 8 * 1024),  # 14,080 MiB
    ("0.5.23", 0.840, 512 + 8192 * 1.5 + 128 * 2 + 1024 + 1536),  # + MLA prefill graph 1.5 GiB: 15,616
])
def test_origin_default_fraction(version, expected_base, reserved):
    """§7.3: RTX PRO 6000 (97,887 MiB), tp 8, --cuda-graph-max-bs 128, Kimi K2.5 (MLA, VLM)."""
    a = SGLangArgs(tp_size=8, cuda_graph_max_bs=128)
    d = resolve_defaults(release(version), a, 97887, is_mla=True, is_multimodal=True, **KIMI_VIT)
    assert d.reserved_mem_mib == reserved
    assert d.mem_fraction_static == pytest.approx(expected_base * vlm_factor(27, 1152), abs=1e-12)


def test_glm5_mi355x_auto_0908():
    """The GLM-5 log shows mem_fraction_static=0.908 (auto) on MI355X, SGLang 0.5.8, tp 8."""
    d = resolve_defaults(release("0.5.8"), SGLangArgs(tp_size=8), 294896, is_mla=True, is_amd=True)
    assert (d.chunked_prefill_size, d.cuda_graph_max_bs) == (16384, 512)
    assert d.reserved_mem_mib == 512 + 16384 * 1.5 + 512 * 2 + 1024
    assert d.mem_fraction_static == 0.908


def test_v046_table():
    assert resolve_defaults(release("0.4.6.post5"), SGLangArgs(tp_size=4), 23034).mem_fraction_static == 0.85
    assert resolve_defaults(release("0.4.6.post5"), SGLangArgs(tp_size=8), 81559).mem_fraction_static == 0.81
    assert resolve_defaults(release("0.4.6.post5"), SGLangArgs(tp_size=1), 81559).mem_fraction_static == 0.88


def test_speculative_reserve_by_version():
    base = dict(tp_size=1)
    no = resolve_defaults(release("0.5.9"), SGLangArgs(**base), 81559).reserved_mem_mib
    assert resolve_defaults(release("0.5.9"), SGLangArgs(speculative_algorithm="EAGLE", **base), 81559).reserved_mem_mib == no + 2048
    assert resolve_defaults(release("0.5.9"), SGLangArgs(speculative_algorithm="STANDALONE", **base), 81559).reserved_mem_mib == no + 6144
    assert resolve_defaults(release("0.5.9"), SGLangArgs(speculative_algorithm="NGRAM", **base), 81559).reserved_mem_mib == no
    no13 = resolve_defaults(release("0.5.13"), SGLangArgs(**base), 81559).reserved_mem_mib
    assert resolve_defaults(release("0.5.13"), SGLangArgs(speculative_algorithm="EAGLE3", **base), 81559).reserved_mem_mib == no13 + 4096
    no14 = resolve_defaults(release("0.5.14"), SGLangArgs(**base), 81559).reserved_mem_mib
    assert resolve_defaults(release("0.5.14"), SGLangArgs(speculative_algorithm="EAGLE3", **base), 81559).reserved_mem_mib == no14


@pytest.mark.parametrize("mib,tp,v059,v0523", [
    (15360, 1, (2048, 8), (2048, 8)),
    (24564, 1, (2048, 24), (4096, 48)),
    (24564, 4, (2048, 80), (4096, 160)),
    (46068, 2, (4096, 32), (4096, 32)),
    (81559, 8, (8192, 512), (8192, 512)),
    (143771, 1, (8192, 256), (8192, 256)),
    (183359, 8, (16384, 512), (16384, 512)),
])
def test_gpu_buckets(mib, tp, v059, v0523):
    assert gpu_bucket_defaults(release("0.5.9"), mib, tp) == v059
    assert gpu_bucket_defaults(release("0.5.23"), mib, tp) == v0523


def test_floor_10_gib_above_60():
    d = resolve_defaults(release("0.5.9"), SGLangArgs(tp_size=1, chunked_prefill_size=2048, cuda_graph_max_bs=8), 81559)
    assert d.reserved_mem_mib == 10 * 1024
    assert d.mem_fraction_static == round((81559 - 10240) / 81559, 3)


def test_user_value_wins():
    d = resolve_defaults(release("0.5.23"), SGLangArgs(mem_fraction_static=0.55), 97887, is_multimodal=True)
    assert (d.mem_fraction_static, d.mem_fraction_static_source, d.vlm_factor) == (0.55, "user", None)
