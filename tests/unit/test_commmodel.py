import pytest

from testbed.workloads.commmodel import parameter_server_s, ratio, ring_allreduce_s


def test_ring_allreduce_matches_the_formula():
    # 10 MB over 8 workers at 100 Mb/s: 2*7/8 * 80 Mbit / 100 Mb/s = 1.4 s
    assert ring_allreduce_s(10e6, 8, 100e6) == pytest.approx(1.4)
    assert ring_allreduce_s(10e6, 8, 100e6, latency_s=0.001, buckets=4) == pytest.approx(1.4 + 0.056)
    assert ring_allreduce_s(10e6, 1, 100e6) == 0.0


def test_one_parameter_server_is_slower_than_ring_at_8_workers():
    ps = parameter_server_s(10e6, 8, 1, 100e6)       # 2 * 8 * 0.8 s
    assert ps == pytest.approx(12.8)
    assert ps / ring_allreduce_s(10e6, 8, 100e6) == pytest.approx(12.8 / 1.4)
    assert parameter_server_s(10e6, 8, 8, 100e6) == pytest.approx(1.6)  # k = n shards
    with pytest.raises(ValueError):
        parameter_server_s(1, 0, 1, 1)


def test_ratio():
    assert ratio(2.8, 1.4) == pytest.approx(2.0)
    assert ratio(1.0, 0.0) is None
