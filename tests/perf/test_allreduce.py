from __future__ import annotations

import pytest

from kvscope.hardware.gpus import get_gpu
from kvscope.perf.allreduce import (allreduce, allreduce_count, choose_communicator, custom_algorithm,
                                    custom_allreduce, fabric_for, nccl_allreduce, nccl_protocol_times_us)


@pytest.mark.parametrize("gpu,n,proto,intercept", [
    # shared/specs/perf.md §2.2 table (NCCL-model ring intercepts, µs)
    ("h100-sxm", 2, "LL", 7.8), ("h100-sxm", 4, "LL128", 25.4), ("h100-sxm", 8, "LL", 15.0),
    ("h100-sxm", 8, "Simple", 56.0), ("rtx-pro-6000", 2, "LL", 8.6), ("rtx-pro-6000", 4, "Simple", 42.6),
    ("rtx-pro-6000", 8, "LL", 20.6), ("rtx-pro-6000", 8, "Simple", 88.2),
])
def test_nccl_ring_intercepts(gpu, n, proto, intercept):
    times = nccl_protocol_times_us(fabric_for(get_gpu(gpu), n), 0)
    assert times[proto] == pytest.approx(intercept)


def test_ll128_only_on_nvlink():
    assert "LL128" not in nccl_protocol_times_us(fabric_for(get_gpu("rtx-pro-6000"), 8), 1024)
    assert "LL128" in nccl_protocol_times_us(fabric_for(get_gpu("h100-sxm"), 8), 1024)


def test_protocol_choice_small_ll_large_simple():
    f = fabric_for(get_gpu("rtx-pro-6000"), 8, "switch")
    assert nccl_allreduce(f, 14336).algorithm == "ring/LL"
    assert nccl_allreduce(f, 8192 * 7168 * 2).algorithm == "ring/Simple"


def test_pcie_calibration_points_reproduced():
    # the host term is fitted so the model returns the measured points exactly
    switch = fabric_for(get_gpu("rtx-pro-6000"), 8, "switch")
    cross = fabric_for(get_gpu("rtx-pro-6000"), 8, "cross-socket")
    assert nccl_allreduce(switch, 256).latency_us == pytest.approx(24.6)
    assert nccl_allreduce(cross, 32768).latency_us == pytest.approx(48.2)
    # Kimi decode payload (7168 x 2 B): 20.6 intercept + 14336 * 1.75 / 11.1e3 + 22.43 host term
    assert nccl_allreduce(cross, 14336).latency_us == pytest.approx(45.294, abs=1e-3)


def test_custom_pcie_fit_matches_measured_switch_box():
    f = fabric_for(get_gpu("rtx-pro-6000"), 8, "switch")
    # 8x RTX PRO 6000 behind switches: custom 16.5 µs at 32 KB, 73.6 µs at 256 KB (slope fit; alpha is the 256 B point, so within 1 µs)
    assert custom_allreduce(f, 32768).latency_us == pytest.approx(16.5, abs=1.0)
    assert custom_allreduce(f, 262144).latency_us == pytest.approx(73.6, abs=1.0)
    # custom beats NCCL at 14 KB, loses at 256 KB (the crossover the engines' rule protects against)
    assert custom_allreduce(f, 14336).latency_us < nccl_allreduce(f, 14336).latency_us
    assert custom_allreduce(f, 262144).latency_us > nccl_allreduce(f, 262144).latency_us


def test_custom_algorithm_rule():
    assert custom_algorithm(2, 10 << 20, False) == "one-shot"
    assert custom_algorithm(4, 500 * 1024, True) == "one-shot"
    assert custom_algorithm(8, 256 * 1024, True) == "two-shot"
    assert custom_algorithm(8, 255 * 1024, True) == "one-shot"


def test_engines_refuse_custom_on_more_than_two_pcie_gpus():
    pro = get_gpu("rtx-pro-6000")
    assert choose_communicator(pro, fabric_for(pro, 8), "auto").used == "nccl"
    assert choose_communicator(pro, fabric_for(pro, 2), "auto").used == "custom"
    forced = choose_communicator(pro, fabric_for(pro, 8), "custom")
    assert forced.used == "custom" and not forced.engine_allows_custom
    h100 = get_gpu("h100-sxm")
    assert choose_communicator(h100, fabric_for(h100, 8), "auto").used == "custom"
    g4090 = get_gpu("rtx-4090")
    c = choose_communicator(g4090, fabric_for(g4090, 2), "custom")
    assert c.used == "nccl" and "peer-to-peer" in c.notes[0]


def test_measured_override_and_counts():
    f = fabric_for(get_gpu("rtx-pro-6000"), 8)
    est = allreduce(f, 57344, "nccl", 246.0)
    assert est.latency_us == 246.0 and est.communicator == "measured" and not est.estimated
    assert allreduce_count(61, 8) == 123
    assert allreduce_count(61, 1) == 0
    # custom falls back to NCCL above its 8 MiB buffer
    assert allreduce(f, 9 << 20, "custom").communicator == "nccl"
