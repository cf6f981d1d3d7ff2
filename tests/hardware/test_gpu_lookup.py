"""--gpu accepts what nvidia-smi / rocm-smi print, the catalog keys and common short names."""

from __future__ import annotations

import pytest

from kvscope.errors import FlagError
from kvscope.hardware.gpus import GPUS, get_gpu


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # nvidia-smi --query-gpu=name
    ("H100 PCIe 80GB", "h100-pcie"),  # longest prefix wins: not h100-sxm
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("L40S 48GB", "l40s"),  # not l40 or l4
    ("NVIDIA L40", "l40"),
    ("A10", "a10"), ("NVIDIA A10G", "a10g"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("rtx3090", "rtx-3090"),
    ("AMD Instinct MI300X", "mi300x"), ("Tesla T4", "t4"), ("A6000", "rtx-a6000"),
    ("RTX PRO 5000 Blackwell 72GB", "rtx-pro-5000-72g"),  # the memory in the name picks the variant
    ("NVIDIA RTX PRO 5000 Blackwell", "rtx-pro-5000"), ("A100 40GB", "a100-40g"),
])
def test_names_resolve(name, key):
    assert get_gpu(name).key == key


def test_every_catalog_name_and_key_round_trips():
    for g in GPUS:
        assert get_gpu(g.key) is g
        assert get_gpu(g.name).key == g.key


def test_unknown_gpu_is_a_one_line_flag_error():
    with pytest.raises(FlagError) as e:
        get_gpu("RTX 4080")
    assert e.value.field == "--gpu" and "\n" not in str(e.value)
