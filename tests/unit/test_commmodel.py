import pytest

from testbed.workloads.model.commmodel import parameter_server_s, ratio, ring_allreduce_s


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


def test_allgather_and_a_straggler_bound_the_parameter_server():
    from testbed.workloads.model.commmodel import allgather_s, parameter_server_s
    # every worker receives the 3 others' 1 MB payloads at 8 Mb/s: 3 s
    assert allgather_s(1e6, 4, 8e6) == 3.0
    assert allgather_s(1e6, 1, 8e6) == 0.0
    # 4 workers, one shard at 80 Mb/s: 4 * 1 MB each way = 0.4 s + 0.4 s
    assert parameter_server_s(1e6, 4, 1, 80e6) == 0.8
    # a worker at 8 Mb/s needs 1 s each way for its own megabyte: it bounds the step
    assert parameter_server_s(1e6, 4, 1, 80e6, worker_bandwidth_bps=8e6) == 2.0
    # a compressed push, a dense pull
    assert parameter_server_s(1e5, 4, 1, 80e6, pull_bytes=1e6) == 0.04 + 0.4
