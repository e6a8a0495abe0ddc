import json

import pytest

from testbed.dataplane.ovs import needed_buffer_bytes
from testbed.measure.conservation import ConservationSnapshot, SwitchCounters, conservation_report
from testbed.workloads.model.flows import assign_ports, parse_iperf3, sent_mbps
from topologies.patterns import random_bijection, stride

HOSTS = [f"h{i}" for i in range(1, 17)]


def test_stride_and_bijection():
    pairs = stride(HOSTS, 8)
    assert pairs[0] == ("h1", "h9") and pairs[8] == ("h9", "h1")
    assert sorted(d for _, d in pairs) == sorted(HOSTS)
    with pytest.raises(ValueError):
        stride(HOSTS, 16)
    rb = random_bijection(HOSTS, 3)
    assert rb == random_bijection(HOSTS, 3)  # seeded
    assert all(a != b for a, b in rb) and sorted(d for _, d in rb) == sorted(HOSTS)


def test_ports_unique_per_receiver():
    flows = assign_ports([("h1", "h3"), ("h2", "h3"), ("h4", "h5")], 10, 1)
    assert [f.port for f in flows] == [5201, 5202, 5201]


def test_parse_iperf3():
    doc = {"end": {"sum_received": {"bits_per_second": 19.1e6},
                   "sum_sent": {"bits_per_second": 19.5e6, "retransmits": 7},
                   "streams": [{"sender": {"max_snd_cwnd": 150000}}],
                   "sender_tcp_congestion": "cubic", "receiver_tcp_congestion": "cubic"}}
    r = parse_iperf3("h1", "h2", json.dumps(doc))
    assert (r.goodput_mbps, r.retransmits, r.sender_cc, r.error) == (19.1, 7, "cubic", "")
    assert parse_iperf3("a", "b", json.dumps({"error": "unable to connect"})).error == "unable to connect"
    assert "unparsable" in parse_iperf3("a", "b", "garbage").error
    # a remote server's shell wrote to stderr around the report (seen: pyenv's rehash
    # racing in concurrent ssh sessions): the report is still read
    noisy = ("rm: cannot remove '/root/.pyenv/shims/tmp.Qp': No such file or directory\n"
             "pyenv: cannot rehash: /root/.pyenv/shims isn't writable\n"
             + json.dumps(doc, indent="\t") + "\nwarning: after\n")
    assert (parse_iperf3("h1", "h2", noisy).goodput_mbps, parse_iperf3("h1", "h2", noisy).error) \
        == (19.1, "")
    assert "unparsable" in parse_iperf3("a", "b", "pyenv: no\n{\n truncated").error


def test_conservation_report():
    before = ConservationSnapshot(t=0, switches={"s1": SwitchCounters(rx=10, enqueued=8, to_controller=2)},
                                  packet_out={"s1": 1})
    after = ConservationSnapshot(t=1, switches={"s1": SwitchCounters(rx=110, enqueued=100, to_controller=3,
                                                                     table_drops=1, qdisc_drops=4)},
                                 packet_out={"s1": 2})
    rep = conservation_report(before, after)
    # in = 100 rx + 1 packet-out; accounted = 92 enqueued + 1 to controller + 1 table drop
    assert rep["per_switch"]["s1"] == {"in": 101, "accounted": 94, "lost": 7,
                                       "qdisc_drops": 4, "socket_drops": 0}
    assert rep["lost_in_switches"] == 7


def test_ovs_buffer_sizing():
    need = needed_buffer_bytes([100] * 80, [])
    assert need >= 80 * 100 * 2304  # every queue full of full-size frames (truesize 2304)
    assert needed_buffer_bytes([], []) == 8 * 1024 * 1024


def test_buffer_sizing_scales_with_jumbo_frames():
    from testbed.dataplane.ovs import truesize_per_pkt
    assert truesize_per_pkt(1500) == 4096
    assert truesize_per_pkt(9000) >= 16384 + 1024  # a 9014-byte frame takes a 16 KiB slab
    assert needed_buffer_bytes([100] * 80, [], 9000) > needed_buffer_bytes([100] * 80, [])


def test_tcp_payload_fraction():
    from testbed.config.units import tcp_payload_fraction
    assert round(tcp_payload_fraction(1500), 4) == round(1448 / 1514, 4)
    assert round(tcp_payload_fraction(9000), 4) == round(8948 / 9014, 4)


def test_forwarding_verdict():
    from testbed.measure.cpu import forwarding_verdict
    cpu = {"ovs_rx_backlog_p50_bytes": 2304 * 100, "ovs_rx_backlog_p90_bytes": 2304 * 300,
           "machine_idle_mean": 0.4, "ovs_thread_p90": 1.0}
    # 100 frames waiting while switches take in 50,000 packets/s: 2 ms added, CPU-bound
    v = forwarding_verdict(cpu, packets_in=500_000, seconds=10, mtu_bytes=1500)
    assert (v["ovs_added_delay_p50_ms"], v["ovs_added_delay_p90_ms"], v["cpu_bound"]) == (2.0, 6.0, True)
    # a busy thread alone is no verdict: 10 frames waiting is 0.2 ms
    keep_up = dict(cpu, ovs_rx_backlog_p50_bytes=2304 * 10)
    assert forwarding_verdict(keep_up, 500_000, 10, 1500)["cpu_bound"] is False
    assert forwarding_verdict(dict(keep_up, machine_idle_mean=0.05), 500_000, 10, 1500)["cpu_bound"]
    empty = {"ovs_rx_backlog_p50_bytes": None, "ovs_rx_backlog_p90_bytes": None, "machine_idle_mean": None}
    assert forwarding_verdict(empty, 0, 1, 1500)["cpu_bound"] is False


def test_percentile_nearest_rank():
    from testbed.results.stats import percentile
    assert percentile([0, 0, 0.4], 90) == 0.4  # not the median of three
    assert percentile([3, 1, 2], 50) == 2
    assert percentile(range(1, 101), 90) == 90
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def test_parse_ping_summary():
    from testbed.experiments.reachability import parse_ping as _parse_ping
    text = ("3 packets transmitted, 2 received, 33.3333% packet loss, time 402ms\n"
            "rtt min/avg/max/mdev = 0.512/10.250/19.988/9.738 ms\n")
    assert _parse_ping(text, 3) == [3, 2, 33.33, 10.25, 19.988, 0.512]
    assert _parse_ping("", 3) == [3, 0, 100.0, None, None, None]


def test_concurrent_pings_are_told_apart_by_their_summaries():
    from testbed.experiments.reachability import parse_ping, ping_blocks
    text = ("PING 10.0.0.3 (10.0.0.3) 56(84) bytes of data.\n"
            "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n\n"
            "--- 10.0.0.2 ping statistics ---\n"
            "3 packets transmitted, 3 received, 0% packet loss, time 403ms\n"
            "rtt min/avg/max/mdev = 0.5/1.0/2.0/0.1 ms\n\n"
            "--- 10.0.0.3 ping statistics ---\n"
            "3 packets transmitted, 0 received, 100% packet loss, time 2040ms\n\n")
    blocks = ping_blocks(text)
    assert parse_ping(blocks["10.0.0.2"], 3) == [3, 3, 0.0, 1.0, 2.0, 0.5]
    assert parse_ping(blocks["10.0.0.3"], 3) == [3, 0, 100.0, None, None, None]
    assert parse_ping(blocks.get("10.0.0.4", ""), 3)[1] == 0  # never started: all lost


def test_finite_flows_report_their_completion_time():
    from testbed.workloads.model.flows import Flow, parse_finite
    f = Flow(src="h1", dst="h2", duration_s=30, nbytes=2_000_000)
    assert assign_ports([("h1", "h2")], 30, 5, 1000)[0].nbytes == 1000
    r = parse_finite(f, json.dumps({"servers": 1, "part_bytes": 2_000_000,
                                    "block_bytes": 2_000_000, "round_s": [2.0]}))
    assert r.seconds == 2.0 and r.goodput_mbps == 8.0 and not r.error
    assert parse_finite(f, "Traceback ... TimeoutError").error


def test_an_interrupted_background_client_reports_what_it_sent_or_nothing():
    # its server stopped first: the client's own end summary, with the error beside it
    ended = {"end": {"sum_sent": {"seconds": 18.0, "bytes": 28033280,
                                  "bits_per_second": 12459155.3}},
             "error": "the server has terminated"}
    assert sent_mbps(json.dumps(ended)) == pytest.approx(12.459, abs=1e-3)
    # the server died instead: no end summary, the interval reports add up
    cut = {"intervals": [{"sum": {"seconds": 1.0, "bytes": 2_500_000}},
                         {"sum": {"seconds": 0.5, "bytes": 500_000}}],
           "end": {}, "error": "control socket has closed unexpectedly"}
    assert sent_mbps(json.dumps(cut)) == pytest.approx(16.0)
    # the client itself aborted in its signal handler (iperf3 3.12, seen in CI): unknown,
    # not zero
    assert sent_mbps("Fatal glibc error: malloc assertion failure in sysmalloc: ...") is None
    assert sent_mbps(json.dumps({"start": {}, "intervals": [], "end": {}})) is None


def test_ovs_is_started_with_fixed_malloc_thresholds_and_a_daemon_without_them_is_told(
        tmp_path, monkeypatch):
    import subprocess
    import time
    from pathlib import Path

    from testbed.dataplane import ovs
    argv = ovs.ctl_argv("restart", "--system-id=random")
    assert argv[:2] == ["env", f"GLIBC_TUNABLES={ovs.MALLOC_TUNABLES}"]
    assert argv[2:] == [ovs.OVS_CTL, "restart", "--system-id=random"]
    assert "glibc.malloc.mmap_threshold=" in ovs.MALLOC_TUNABLES
    pidfile = tmp_path / "ovs-vswitchd.pid"
    monkeypatch.setattr(ovs, "PIDFILE", str(pidfile))
    assert ovs.malloc_tuned()  # no daemon to read: not ours to judge
    for env, tuned in (({"GLIBC_TUNABLES": ovs.MALLOC_TUNABLES}, True), ({}, False)):
        proc = subprocess.Popen(["sleep", "5"], env=env)
        try:
            cmdline = Path(f"/proc/{proc.pid}/cmdline")
            deadline = time.time() + 5
            while not cmdline.read_bytes().startswith(b"sleep") and time.time() < deadline:
                time.sleep(0.01)  # until it has exec'd: the environment is sleep's own
            pidfile.write_text(f"{proc.pid}\n")
            assert ovs.malloc_tuned() is tuned
        finally:
            proc.kill()
            proc.wait()


def test_why_ovs_is_restarted_before_a_fabric():
    from testbed.dataplane.ovs import restart_reason
    small = restart_reason(212_992, 8_000_000, True, False)
    assert small == "OVS send buffer 212992 B < 8000000 B needed"
    # too small a buffer is a reason even with others' bridges (restart_vswitchd then
    # refuses, naming them); missing malloc thresholds only on an idle OVS
    assert restart_reason(212_992, 8_000_000, False, True) == small
    assert restart_reason(None, 8_000_000, False, False) == \
        "ovs-vswitchd started without the testbed's malloc thresholds"
    assert restart_reason(8_000_000, 8_000_000, False, True) is None
    assert restart_reason(None, 8_000_000, True, False) is None


def test_the_cpu_window_reports_what_the_hypervisor_took():
    """A virtual machine's steal (the hypervisor ran something else while the machine had
    work): its mean and largest share over the window's samples, beside the idle share."""
    from testbed.measure.cpu import CpuMonitor, CpuSample
    mon = CpuMonitor()
    mon.samples = [CpuSample(t=t, machine_busy=0.5, machine_steal=steal, ovs_thread=0.3,
                             ovs_rx_backlog_bytes=0)
                   for t, steal in ((0.5, 0.0), (1.0, 0.2), (1.5, 0.1), (9.0, 0.9))]
    w = mon.window(0.0, 1.5)
    assert (w["machine_steal_mean"], w["machine_steal_max"]) == (0.1, 0.2)
    assert w["machine_idle_mean"] == 0.5
    assert mon.window(3.0, 4.0)["machine_steal_mean"] is None
