"""The RoCEv2 engine on loopback (no root: two engines on 127.0.0.1 and 127.0.0.2): its
wire format against the layout rxe uses, a transfer paced at its line rate, and go-back-N
recovering every packet a receiver discards."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.core.errors import TestbedError
from testbed.workloads import roce
from testbed.workloads.model.rdma import (
    WIRE_OVERHEAD,
    Dcqcn,
    DcqcnPlus,
    Hpcc,
    Irn,
    Nscc,
    Timely,
    UserCc,
)

from ..roce_pair import free_udp_port, run_pair

WIRE_TEST = r"""
#include <stdio.h>
#include "roce_wire.h"
int main(void)
{
    uint8_t p[12];
    struct bth h = { .opcode = OP_WRITE_FIRST, .dest_qp = 0xabcdef, .psn = 0x1234567,
             .ackreq = 1, .becn = 1 }, g;
    bth_put(p, &h);
    for (int i = 0; i < 12; i++)
        printf("%02x", p[i]);
    printf(" %d", bth_get(p, 12, &g));
    printf(" %u %x %x %u %u", g.opcode, g.dest_qp, g.psn, g.ackreq, g.becn);
    printf(" %d %d", psn_diff(0x000002, 0xfffffe), psn_diff(0xfffffe, 0x000002));
    printf(" %u %u", psn_unwrap(0x000001, 0x00fffffe), psn_unwrap(0xfffffe, 0x01000003));
    printf(" %u %u %u %u\n", write_opcode(0, 1), write_opcode(0, 3), write_opcode(1, 3),
           write_opcode(2, 3));
    return 0;
}
"""


def test_wire_format_is_rocev2s(tmp_path):
    """BTH as ib_pack.h lays it out: opcode, flags, P_Key 0xffff, BECN in byte 4, the
    24-bit QP, AckReq in byte 8, the 24-bit PSN; PSNs compared and unwrapped modulo 2^24."""
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    (tmp_path / "t.c").write_text(WIRE_TEST)
    subprocess.run([cc, "-O2", "-I", str(roce.SOURCE_DIR), "-o", str(tmp_path / "t"),
                    str(tmp_path / "t.c")], check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "0600ffff40abcdef80234567"   # the PSN keeps its low 24 bits
    assert out[1:7] == ["0", "6", "abcdef", "234567", "1", "1"]
    assert out[7:9] == ["4", "-4"]                 # across the wrap
    assert out[9:11] == [str(0x01000001), str(0x00fffffe)]
    assert out[11:] == ["10", "6", "7", "8"]       # ONLY, FIRST, MIDDLE, LAST


def transfer(tmp_path, sizes, line_mbps=200.0, drop_every=0, ce_every=0, dcqcn=None,
             **cc):
    """A's QP 7 writes `sizes` to B's QP 9 on loopback; both results. `cc`: more of A's
    Engine settings (its congestion control)."""
    binary = roce.build(cc["user_cc"].source if cc.get("user_cc") else None)
    pa, pb = free_udp_port(), free_udp_port()
    a = roce.Engine(bind="127.0.0.1", port=pa, linger_ms=50, end_after_ms=20000,
                    dcqcn=dcqcn, link_mbps=line_mbps, **cc)
    a.qp(7, peer="127.0.0.2", peer_port=pb, peer_qpn=9, line_mbps=line_mbps)
    for i, n in enumerate(sizes):
        a.write(7, start_us=i * 1000, nbytes=n)
    b = roce.Engine(bind="127.0.0.2", port=pb, end_after_ms=20000, drop_every=drop_every,
                    ce_every=ce_every, dcqcn=dcqcn, link_mbps=line_mbps,
                    irn=cc.get("irn"), base_rtt_us=cc.get("base_rtt_us", 0.0),
                    dcqcn_plus=cc.get("dcqcn_plus"), nscc=cc.get("nscc"))
    b.qp(9, peer="127.0.0.1", peer_port=pa, peer_qpn=7, line_mbps=line_mbps)
    return run_pair(tmp_path, binary, a, b)


def paced_pair(writes: list[tuple[int, int]]) -> tuple[Path, roce.Engine, roce.Engine]:
    """A's QP 7 to B's QP 9 on loopback at 50 Mb/s, A posting `writes` (start in us,
    bytes); the binary and both engines, not started."""
    pa, pb = free_udp_port(), free_udp_port()
    a = roce.Engine(bind="127.0.0.1", port=pa, linger_ms=50, end_after_ms=20000,
                    link_mbps=50.0)
    a.qp(7, peer="127.0.0.2", peer_port=pb, peer_qpn=9, line_mbps=50.0)
    for start_us, nbytes in writes:
        a.write(7, start_us=start_us, nbytes=nbytes)
    b = roce.Engine(bind="127.0.0.2", port=pb, end_after_ms=20000, link_mbps=50.0)
    b.qp(9, peer="127.0.0.1", peer_port=pa, peer_qpn=7, line_mbps=50.0)
    return roce.build(), a, b


def test_the_engine_counts_the_sending_it_lost_to_waking_late(tmp_path):
    """A sender stopped for 100 ms in the middle of a paced WRITE (a hypervisor or a busy
    core that held it) lost that much sending beyond its two packets of burst credit, and
    says so; a QP idle between two WRITEs lost nothing (its pace held nothing back)."""
    # 170 ms at 50 Mb/s, then two packets after a 130 ms idle
    binary, a, b = paced_pair([(0, 1_000_000), (400_000, 2000)])
    rb = subprocess.Popen([str(binary), str(b.save(tmp_path / "b.conf")),
                           str(tmp_path / "b.json")], stdout=subprocess.PIPE, text=True)
    try:
        assert rb.stdout is not None and rb.stdout.readline().strip() == "ready"
        ra = subprocess.Popen([str(binary), str(a.save(tmp_path / "a.conf")),
                               str(tmp_path / "a.json")], stdout=subprocess.PIPE, text=True)
        assert ra.stdout is not None and ra.stdout.readline().strip() == "ready"
        time.sleep(0.06)                  # a third of the way into the first WRITE
        ra.send_signal(signal.SIGSTOP)
        time.sleep(0.1)
        ra.send_signal(signal.SIGCONT)
        assert ra.wait(timeout=30) == 0
    finally:
        rb.terminate()
        rb.wait(timeout=10)
    res = roce.read_result(tmp_path / "a.json")
    lost_ms = res.qps[7]["pace_lost_us"] / 1e3
    first = res.messages[0]
    packets = -(-first.nbytes // res.mtu)
    ideal_ms = (first.nbytes + packets * WIRE_OVERHEAD) * 8 / 50.0 / 1e3
    # the stop, less the two packets of credit (0.35 ms), was counted; whatever more the
    # machine's own late wake-ups added, the first WRITE took its line-rate time plus all
    # of it: nothing was counted for the idle QP (130 ms) nor for the second, two-packet
    # WRITE, which its burst credit lets out at once
    assert lost_ms >= 95, (lost_ms, res.qps[7])
    assert first.fct_us / 1e3 >= ideal_ms + lost_ms - 1, (first.fct_us, ideal_ms, lost_ms)
    # stopped, it neither ran nor waited for a core: the stop is not counted as the CPU's,
    # only what the machine added beyond it (waits for a core after SIGCONT, on a busy one)
    assert res.qps[7]["pace_lost_cpu_us"] / 1e3 <= lost_ms - 90, res.qps[7]


def test_the_engine_tells_waiting_for_a_core_from_a_late_timer(tmp_path):
    """A sender that shares its core with a busy loop at a far higher priority (nice 19
    against 0) wakes late because it waits for the core: most of what it lost is counted
    as running or waiting for a core (`pace_lost_cpu_us`), where a stopped sender's is not
    (above)."""
    binary, a, b = paced_pair([(0, 300_000)])           # 50 ms at 50 Mb/s
    core = min(os.sched_getaffinity(0))

    def on_the_core(niceness):
        return lambda: (os.sched_setaffinity(0, {core}), os.nice(niceness))

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=on_the_core(0))
    rb = subprocess.Popen([str(binary), str(b.save(tmp_path / "b.conf")),
                           str(tmp_path / "b.json")], stdout=subprocess.PIPE, text=True)
    ra = None
    try:
        assert rb.stdout is not None and rb.stdout.readline().strip() == "ready"
        ra = subprocess.Popen([str(binary), str(a.save(tmp_path / "a.conf")),
                               str(tmp_path / "a.json")], stdout=subprocess.PIPE, text=True,
                              preexec_fn=on_the_core(19))
        assert ra.wait(timeout=60) == 0
    finally:
        for proc in (spin, rb) if ra is None else (spin, rb, ra):
            proc.kill()
            proc.wait(timeout=10)
    qp = roce.read_result(tmp_path / "a.json").qps[7]
    assert qp["pace_lost_us"] > 5000, qp
    assert qp["pace_lost_cpu_us"] >= 0.7 * qp["pace_lost_us"], qp


def test_a_transfer_is_paced_at_the_line_rate_and_complete(tmp_path):
    sizes = [1_000_000, 300_000, 5000]
    a, b = transfer(tmp_path, sizes)
    qa, qb = a.qps[7], b.qps[9]
    # every byte arrives once; a loaded machine may still drop a packet in the receiver's
    # socket buffer, and then the requester resends from it
    assert qb["rx_bytes"] == sum(sizes) <= qa["tx_bytes"]
    if qa["retx_pkts"] == 0:
        assert qa["tx_bytes"] == sum(sizes) and qb["ooo_drops"] == qb["naks_tx"] == 0
    else:
        assert qb["naks_tx"] + qa["timeouts"] > 0
    assert [m.nbytes for m in a.messages] == sizes
    assert all(m.end_us is not None for m in a.messages)
    # never faster than the line rate (how close to it a loaded machine gets is a
    # benchmark's question): the first WRITE takes at least its bytes on the wire at
    # 200 Mb/s less the limiter's two packets of credit, and no interval carried more
    first = a.messages[0]
    packets = -(-first.nbytes // a.mtu)
    ideal_us = (first.nbytes + packets * WIRE_OVERHEAD) * 8 / 200.0
    assert first.fct_us >= ideal_us - 2 * (a.mtu + WIRE_OVERHEAD) * 8 / 200.0, (
        first.fct_us, ideal_us)
    # (two packets of burst credit are 9% of a 1 ms sample at 200 Mb/s)
    assert max(tx for _, _, _, tx in a.samples) <= 200.0 * 1.15
    assert 0 < qa["acks_rx"] <= qb["acks_tx"]   # an ACK lost on a loaded machine is covered


def test_go_back_n_recovers_what_the_receiver_drops(tmp_path):
    """The receiver discards every 50th data packet: one NAK per gap sends the requester
    back to the lost PSN, which resends it and all after it; every byte arrives once."""
    sizes = [400_000, 400_000]
    a, b = transfer(tmp_path, sizes, drop_every=50)
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == sum(sizes)
    assert qb["test_drops"] > 0 and qb["naks_tx"] > 0
    assert 0 < qa["naks_rx"] <= qb["naks_tx"]
    assert qa["retx_pkts"] >= qb["test_drops"]
    # what the receiver got and discarded or kept is at most what was sent (the rest was
    # lost on the way, if the machine was loaded)
    assert qa["tx_pkts"] >= qb["rx_pkts"] + qb["test_drops"] + qb["ooo_drops"] + \
        qb["dup_pkts"]
    assert qb["rx_pkts"] == sum(-(-n // a.mtu) for n in sizes)
    assert all(m.end_us is not None for m in a.messages)


def test_irn_resends_only_what_the_receiver_drops(tmp_path):
    """IRN on the same losses: the receiver keeps what follows a gap and names each such
    packet in a NAK; the requester resends the dropped packets only (go-back-N resends
    everything after each), in flight never more than the BDP cap; every byte once."""
    sizes = [400_000, 400_000]
    # BDP cap: 2 ms at 200 Mb/s, 50 KB: 48 packets of 1 KB
    a, b = transfer(tmp_path, sizes, drop_every=50, irn=Irn(), base_rtt_us=2000.0)
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == sum(sizes)
    assert qb["rx_pkts"] == sum(-(-n // a.mtu) for n in sizes)
    assert qb["test_drops"] > 0 and qb["ooo_kept"] > 0 and qa["sacks_rx"] > 0
    # resent: the dropped ones (and, on a loaded machine, the odd one a timeout resent)
    assert qb["test_drops"] <= qa["retx_pkts"] <= qb["test_drops"] + 48 * qa["timeouts"]
    assert qa["tx_pkts"] == qb["rx_pkts"] + qb["test_drops"] + qb["dup_pkts"] + \
        qb["ooo_drops"] or qa["timeouts"] > 0
    assert all(m.end_us is not None for m in a.messages)


DCQCN_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "dcqcn.h"
int main(int argc, char **argv)
{
    struct dcqcn_params p = { .g = 1.0 / 256, .alpha_ns = 55000, .timer_ns = 55000,
                              .byte_counter = 10000000, .f = 5, .rai_bps = 40e6,
                              .rhai_bps = 200e6, .min_bps = 100e6, .line_bps = 40e9 };
    struct dcqcn d;
    uint64_t t = 0;
    int events = atoi(argv[1]);
    dcqcn_init(&d, &p, 0);
    printf("%.1f %llu\n", d.rc, (unsigned long long)dcqcn_next_ns(&d));
    dcqcn_on_cnp(&d, &p, 0);
    printf("%.1f %.1f %.12f\n", d.rc, d.rt, d.alpha);
    for (int i = 0; i < events; i++) {
        t += 55000;
        dcqcn_on_time(&d, &p, t);
        printf("%.1f %.1f %.12f %u\n", d.rc, d.rt, d.alpha, d.stage);
    }
    dcqcn_on_sent(&d, &p, 25000000);     /* two and a half byte counters */
    printf("%.1f %.1f %u %u\n", d.rc, d.rt, d.b_stage, d.stage);
    return 0;
}
"""


def dcqcn_reference(events: int):
    """The same rules written out (ns3-rdma's): the CNP, then timer events."""
    g, line, f = 1 / 256, 40e9, 5
    alpha = (1 - g) * 1 + g
    rc, rt = line * (1 - alpha / 2), line
    rows = [(rc, rt, alpha)]
    t_stage, stage = 0, 1
    for _ in range(events):
        alpha *= 1 - g                      # no CNP in the period
        t_stage += 1
        if stage == 1 and t_stage < f:
            pass                            # fast recovery: Rt stays
        else:                               # the byte stage is 0 < F: additive
            rt += 40e6
            stage = 2
        rc = min(rc / 2 + rt / 2, line)
        rows.append((rc, rt, alpha, stage))
    return rows


def test_dcqcn_follows_its_authors_code(tmp_path):
    """The reaction point's arithmetic (dcqcn.h, the engine's own) against the rules: the
    first CNP halves the rate (alpha 1), the first F - 1 timer events (fast recovery) close
    half the gap to the target each, then additive increase; alpha decays by (1 - g) per period; byte
    counter events count in their own stage."""
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    (tmp_path / "t.c").write_text(DCQCN_TEST)
    subprocess.run([cc, "-O2", "-I", str(roce.SOURCE_DIR), "-o", str(tmp_path / "t"),
                    str(tmp_path / "t.c")], check=True)
    lines = subprocess.run([str(tmp_path / "t"), "8"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert lines[0].split() == ["40000000000.0", str(2**64 - 1)]   # idle until a CNP
    ref = dcqcn_reference(8)
    got = [tuple(float(x) for x in line.split()) for line in lines[1:10]]
    assert got[0] == pytest.approx(ref[0], rel=1e-9)
    for g_row, r_row in zip(got[1:], ref[1:]):
        assert g_row == pytest.approx(r_row, rel=1e-9)
    assert got[4][0] == pytest.approx(40e9 - 20e9 / 16, rel=1e-9)   # 4 halvings of the gap
    rc, rt, b_stage, stage = lines[10].split()
    assert int(b_stage) == 2 and int(stage) == 2          # additive: b_stage < F
    assert float(rt) == pytest.approx(ref[-1][1] + 2 * 40e6, rel=1e-9)


def test_dcqcn_on_loopback_cuts_on_cnps_and_recovers(tmp_path):
    """Every 50th packet taken as CE-marked: the receiver sends at most one CNP per
    interval (50 us at 40 Gb/s: 10 ms at 200 Mb/s), each CNP cuts the rate, the timers
    raise it again, and the transfer completes with every byte once."""
    sizes = [1_000_000]
    a, b = transfer(tmp_path, sizes, ce_every=50, dcqcn=Dcqcn())
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == sum(sizes)
    assert qb["ce_rx"] > 0 and qb["cnps_tx"] > 0
    assert qa["cnps_rx"] == qa["rate_cuts"] and 0 < qa["cnps_rx"] <= qb["cnps_tx"]
    fct_us = a.messages[0].fct_us
    assert qb["cnps_tx"] <= fct_us / 10_000 + 1
    rates = [r for _, _, r, _ in a.samples]
    assert min(rates) < 200.0 and any(y > x for x, y in zip(rates, rates[1:]))
    assert qa["rate_updates"] > 0 and 0 < qa["alpha"] <= 1


AIMD = Path(__file__).resolve().parents[2] / "examples" / "roce_cc" / "aimd.h"


def test_a_users_control_is_compiled_in_and_reacts_to_cnps(tmp_path):
    """The worked example (examples/roce_cc/aimd.h) compiled into the engine, every 50th
    packet taken as CE-marked (a CNP each): each CNP halves the rate, at most once per
    2 ms round trip, each round trip without one adds 2% of the 200 Mb/s line, and every
    byte arrives once."""
    user = UserCc(source=str(AIMD), params={"ai": 0.02, "md": 0.5, "min_share": 0.01})
    a, b = transfer(tmp_path, [1_000_000], ce_every=50, user_cc=user, base_rtt_us=2000.0)
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == 1_000_000 and a.messages[0].end_us is not None
    assert qb["cnps_tx"] > 0 and 0 < qa["cnps_rx"] <= qb["cnps_tx"]
    rates = [r for _, _, r, _ in a.samples]   # every 1 ms: at most one step between two
    pairs = list(zip(rates, rates[1:]))
    assert any(y == pytest.approx(x * 0.5) for x, y in pairs if y < x), rates
    assert any(y - x == pytest.approx(4.0) for x, y in pairs if y > x), rates
    assert max(rates) <= 200.0 and min(rates) >= 2.0


def test_a_users_control_that_does_not_compile_says_why(tmp_path):
    bad = tmp_path / "bad.h"
    bad.write_text("struct user_cc { double rate_bps; };\n")   # no window, no hooks
    with pytest.raises(TestbedError, match=r"does not compile with the congestion control"):
        roce.build(bad)
    # a control that sets no usable rate ends the engine, naming the hook
    zero = tmp_path / "zero.h"
    zero.write_text(AIMD.read_text().replace("s->rate_bps = e->line_bps;",
                                             "s->rate_bps = 0;"))
    eng = roce.Engine(bind="127.0.0.1", port=free_udp_port(), link_mbps=100.0,
                      base_rtt_us=1000.0, user_cc=UserCc(source=str(zero)))
    eng.qp(1, peer="127.0.0.2", peer_port=free_udp_port(), peer_qpn=1, line_mbps=100.0)
    eng.write(1, start_us=0, nbytes=10_000)
    proc = subprocess.run([str(roce.build(zero)), str(eng.save(tmp_path / "z.conf")),
                           str(tmp_path / "z.json")], capture_output=True, text=True,
                          timeout=10)
    assert proc.returncode != 0 and "user_cc: after user_cc_init, rate_bps 0" in proc.stderr
    # an engine built without one refuses a user line
    eng = roce.Engine(bind="127.0.0.1", port=free_udp_port())
    conf = eng.save(tmp_path / "e.conf")
    conf.write_text(conf.read_text() + "user 1000000 0.5\n")
    proc = subprocess.run([str(roce.build()), str(conf), str(tmp_path / "e.json")],
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0 and "built without a user congestion control" in proc.stderr


def compile_c(tmp_path, source: str) -> str:
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    (tmp_path / "t.c").write_text(source)
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-I", str(roce.SOURCE_DIR), "-o",
                    str(tmp_path / "t"), str(tmp_path / "t.c")], check=True)
    return str(tmp_path / "t")


TIMELY_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "timely.h"
int main(int argc, char **argv)
{
    struct timely_params p = { .t_low_ns = 50000, .t_high_ns = 500000, .min_rtt_ns = 20000,
                               .alpha = 0.875, .beta = 0.8, .delta_bps = 10e6, .hai_n = 5,
                               .min_bps = 10e6, .line_bps = 10e9 };
    struct timely t;
    timely_init(&t, &p);
    for (int i = 1; i < argc; i += 3) {  /* rtt_ns acked snd_nxt */
        timely_on_rtt(&t, &p, strtoull(argv[i], 0, 10), atoi(argv[i + 1]), atoi(argv[i + 2]));
        printf("%.3f %.6f %u\n", t.rate, t.rtt_diff, t.in_a_row);
    }
    return 0;
}
"""


def timely_reference(samples, line=10e9):
    """The paper's Algorithm 1 written out, once per round trip."""
    rate, diff, prev, row, next_update, started = line, 0.0, 0, 0, 0, False
    out = []
    for rtt, acked, snd_nxt in samples:
        if started and acked < next_update:
            out.append((rate, diff, row))
            continue
        next_update = snd_nxt
        if not started:
            started, prev = True, rtt
            out.append((rate, diff, row))
            continue
        diff = 0.125 * diff + 0.875 * (rtt - prev)
        prev = rtt
        grad = diff / 20000
        if rtt < 50000:
            rate, row = rate + 10e6, 0
        elif rtt > 500000:
            rate, row = rate * (1 - 0.8 * (1 - 500000 / rtt)), 0
        elif grad <= 0:
            row += 1
            rate += (5 if row >= 5 else 1) * 10e6
        else:
            rate, row = rate * max(0.0, 1 - 0.8 * grad), 0
        rate = min(max(rate, 10e6), line)
        out.append((rate, diff, row))
    return out


def test_timely_follows_the_papers_algorithm(tmp_path):
    """TIMELY's rate (timely.h, the engine's own) against Algorithm 1: a rising RTT cuts
    by beta times the normalised gradient, an RTT above T_high by its own rule, falling
    RTTs add delta and after five in a row five delta; one update per round trip (an ACK
    below the sequence sent at the last update changes nothing)."""
    samples = [(100000, 0, 10), (120000, 5, 12), (104000, 10, 20), (600000, 20, 30),
               (300000, 30, 40), (200000, 40, 50), (150000, 50, 60), (150000, 60, 70),
               (150000, 70, 80), (140000, 80, 90), (130000, 90, 100), (40000, 100, 110),
               (900000, 110, 120), (100000, 120, 130)]
    binary = compile_c(tmp_path, TIMELY_TEST)
    out = subprocess.run([binary, *(str(x) for s in samples for x in s)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    got = [tuple(float(x) for x in line.split()) for line in out]
    ref = timely_reference(samples)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g == pytest.approx(r, rel=1e-9, abs=1e-6)
    assert got[1] == got[0]                     # the same round trip: no update
    assert got[2][0] < 10e9 and got[3][0] < got[2][0]
    assert any(r[2] >= 5 for r in got)          # hyper-active increase reached


HPCC_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "hpcc.h"
int main(int argc, char **argv)
{
    /* one 100 Mb/s hop, T = 1 ms; argv: per ACK, time_ns tx_bytes qlen_bytes acked snd_nxt */
    struct hpcc_params p = { .eta = 0.95, .max_stage = 5, .rai_bps = 40e3, .min_bps = 100e3,
                             .line_bps = 100e6, .base_rtt_ns = 1000000,
                             .rates_bps = { 10e6, 100e6 } };
    struct hpcc h;
    hpcc_init(&h, &p);
    for (int i = 1; i + 4 < argc; i += 5) {
        uint64_t hop = INT_HOP(1, strtoull(argv[i], 0, 10), strtoull(argv[i + 1], 0, 10),
                               strtoull(argv[i + 2], 0, 10));
        hpcc_on_ack(&h, &p, atoi(argv[i + 3]), atoi(argv[i + 4]), &hop, 1);
        printf("%.3f %.3f %.9f %u %.1f\n", h.rate, h.rc, h.u, h.stage,
               hpcc_window_bytes(&h, &p));
    }
    uint64_t x = INT_HOP(5, 0x123456789ull, 0x98765432ull, 700000);
    printf("%u %u %u %u\n", INT_HOP_RATE(x), INT_HOP_TIME(x), INT_HOP_BYTES(x),
           INT_HOP_QLEN(x));
    return 0;
}
"""


def hpcc_reference(acks):
    """HPCC's per-ACK rules written out for one 100 Mb/s hop, T = 1 ms (HPCC code's
    UpdateRateHp, one rate), on the records' quantised values."""
    T, line, eta, rai, stage_max = 1e6, 100e6, 0.95, 40e3, 5
    u, rc, rate, stage, prev, next_update = 1.0, line, line, 0, None, 0
    out = []
    for t, b, q, acked, snd_nxt in acks:
        cur = ((t >> 7) << 7, (b >> 7) << 7, q // 80 * 80)
        if prev is None:
            prev, next_update = cur, snd_nxt
            out.append((rate, rc, u, stage))
            continue
        tau = cur[0] - prev[0]
        ui = (cur[1] - prev[1]) * 8e9 / tau / line + min(cur[2], prev[2]) * 8e9 / (line * T)
        prev = cur
        tau = min(tau, T)
        u = (u * (T - tau) + ui * tau) / T
        k = u / eta
        if k >= 1 or stage >= stage_max:
            r, st = rc / k + rai, 0
        else:
            r, st = rc + rai, stage + 1
        rate = min(max(r, 100e3), line)
        if acked >= next_update:
            rc, stage, next_update = rate, st, snd_nxt
        out.append((rate, rc, u, stage))
    return out


def test_hpcc_follows_its_code(tmp_path):
    """HPCC's rate (hpcc.h, the engine's own) from telemetry against its rules: a hop at
    its line rate with a standing queue has U above eta, so the rate falls by U/eta each
    round trip; an idle, empty hop raises it by R_AI per ACK until maxStage, then
    multiplicatively; only the first ACK past the last commit's sequence commits. And the
    records' fields survive encoding within their units and widths."""
    pkt = 1100 * 8 / 100e6 * 1e9                # one packet time at 100 Mb/s, ns
    acks, t, b = [], 0, 0
    for i in range(30):                         # saturated, 5 packets queued
        t, b = t + pkt, b + 1100
        acks.append((int(t), b, 5500, i, i + 10))
    for i in range(30, 60):                     # idle and empty
        t = t + 5 * pkt
        acks.append((int(t), b, 0, i, i + 1))
    binary = compile_c(tmp_path, HPCC_TEST)
    out = subprocess.run([binary, *(str(x) for a in acks for x in a)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    got = [tuple(float(x) for x in line.split()) for line in out[:-1]]
    ref = hpcc_reference(acks)
    for g, r in zip(got, ref):
        assert g[:4] == pytest.approx(r, rel=1e-6, abs=1e-8)
        assert g[4] == pytest.approx(g[0] * 1e6 / 8e9, abs=0.1)     # W = R T
    assert got[29][1] < 0.8 * 100e6             # congested: cut well below the line
    assert got[-1][1] > got[30][1]              # idle: recovering
    assert any(g[3] == 5 for g in got[30:])     # additive stages, then a multiplicative step
    rate, time, nbytes, qlen = (int(x) for x in out[-1].split())
    assert rate == 5 and time == (0x123456789 >> 7) & 0xffffff
    assert nbytes == (0x98765432 >> 7) & 0xfffff and qlen == 700000 // 80


def test_timely_and_hpcc_on_loopback(tmp_path):
    """On loopback, with T_low far above any RTT it sees, and no switch writing telemetry:
    TIMELY takes an RTT sample from every first ACK and stays at the line rate; HPCC's data
    carries the empty telemetry area, its ACKs echo it (no hop), and its window bounds the
    flight. (The paper's T_low scaled to 200 Mb/s is 2.5 ms, and a busy two-core machine
    can delay one loopback ACK that long: TIMELY then rightly cuts. T_low here is 50 ms.)"""
    timely = Timely(t_low_us=1000.0, t_high_us=5000.0)
    a, b = transfer(tmp_path, [500_000], timely=timely)
    qa = a.qps[7]
    assert b.qps[9]["rx_bytes"] == 500_000
    assert 0 < qa["rtt_samples"] <= qa["acks_rx"] and qa["rtt_min_us"] > 0
    t_low_us = timely.scaled(200.0)["t_low_ns"] / 1e3
    assert qa["rtt_max_us"] < t_low_us, (qa["rtt_max_us"], t_low_us)
    assert qa["rate_updates"] > 0 and qa["rate_cuts"] == 0, qa
    a, b = transfer(tmp_path, [500_000], hpcc=Hpcc(), base_rtt_us=2000.0,
                    int_rates=[200.0])
    assert b.qps[9]["rx_bytes"] == 500_000 and a.qps[7]["int_hops"] == 0
    # each data packet carries 42 bytes of telemetry room: on the wire, not in rx_bytes
    assert a.qps[7]["tx_bytes"] >= 500_000


DCQCNP_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "dcqcn_plus.h"
int main(int argc, char **argv)
{
    /* 100 Gb/s; argv: tau_us of the CNP, then the times (us) to look at */
    struct dcqcnp_params p = { .g = 1.0 / 256, .min_bps = 250e6, .line_bps = 100e9,
                               .min_tau_ns = 50000, .f = 5 };
    struct dcqcnp d;
    dcqcnp_init(&d, &p);
    dcqcnp_on_cnp(&d, &p, 0, strtoull(argv[1], 0, 10) * 1000, 8320);
    printf("%.1f %.1f %.9f %llu\n", d.rc, d.rt, d.alpha, (unsigned long long)d.period_ns);
    for (int i = 2; i < argc; i++) {
        dcqcnp_on_time(&d, &p, strtoull(argv[i], 0, 10) * 1000);
        printf("%.1f %.1f %.9f %u\n", d.rc, d.rt, d.alpha, d.stage);
    }
    return 0;
}
"""


def dcqcnp_reference(period_us, events):
    """The reimplementation's rules written out: a halving cut (alpha 1), then increase
    events every 2T, alpha decaying every T."""
    line, f, g = 100e9, 5, 1 / 256
    alpha, rt = 1.0, line
    rc = line * 0.5
    out = []
    for k in range(1, events + 1):
        alpha *= (1 - g) ** 2                  # two alpha periods per increase period
        stage = k - 1
        if stage < f:
            step = 0.0
        elif stage == f:
            step = min(rc / 5, line / 50) if alpha > 0.1 else min(rc / 10, line / 100)
        else:
            step = min(rc, max(1, stage - 4 * f + 1) * line / 100)
        rt = min(line, rt + step)
        rc = min(line, (rc + rt) / 2)
        out.append((rc, rt, alpha, k))
    return out


def test_dcqcn_plus_follows_the_reimplementation(tmp_path):
    """DCQCN+'s reaction point (dcqcn_plus.h): the CNP's tau stretches the period past its
    50 us floor; increases come every 2T: fast recovery, one additive step of Rc/5 (capped
    at line/50), then hyper steps of line/100."""
    binary = compile_c(tmp_path, DCQCNP_TEST)
    out = subprocess.run([binary, "30", "100", "200"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0].split()[3] == "50000"               # tau 30 us: the 50 us floor
    out = subprocess.run([binary, "80", *(str(160 * k) for k in range(1, 9))],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    rc, rt, alpha, period = out[0].split()
    assert float(rc) == 50e9 and float(alpha) == 1.0 and period == "80000"
    got = [tuple(float(x) for x in line.split()) for line in out[1:]]
    for g, r in zip(got, dcqcnp_reference(80, 8)):
        assert g == pytest.approx(r, rel=1e-9)
    assert got[5][1] == pytest.approx(100e9)          # the additive step reached the line


def test_dcqcn_plus_on_loopback_paces_its_cnps(tmp_path):
    """Every 100th packet taken as CE-marked: the receiver's scan sends at most one CNP per
    minimum interval (45 us at 100 Gb/s: 22.5 ms at 200 Mb/s), each carrying tau; each
    cuts the sender's rate, and the transfer completes."""
    a, b = transfer(tmp_path, [600_000], ce_every=100, dcqcn_plus=DcqcnPlus())
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == 600_000 and qb["ce_rx"] > 0
    assert 0 < qa["cnps_rx"] == qa["rate_cuts"] <= qb["cnps_tx"]
    assert qb["cnps_tx"] <= a.messages[0].fct_us / 22_500 + 1
    assert 0 < qa["alpha"] <= 1


def test_dcqcn_plus_stretches_the_cnp_period_with_the_congested_flows(tmp_path):
    """Eight QPs, every third packet taken as CE-marked: the receiver's scan (a tick of
    10 us at 40 Gb/s: 2 ms at 200 Mb/s) visits one QP a tick, so each QP gets a CNP at
    most every 8 ticks (16 ms), beyond the 45 us (9 ms) minimum interval; every CNP tells
    its sender tau = 8 ticks."""
    binary = roce.build()
    pa, pb = free_udp_port(), free_udp_port()
    plus = DcqcnPlus(scan_us=10.0)
    a = roce.Engine(bind="127.0.0.1", port=pa, linger_ms=50, end_after_ms=20000,
                    dcqcn_plus=plus, link_mbps=200.0)
    b = roce.Engine(bind="127.0.0.2", port=pb, end_after_ms=20000, ce_every=3,
                    dcqcn_plus=plus, link_mbps=200.0)
    for qpn in range(1, 9):
        a.qp(qpn, peer="127.0.0.2", peer_port=pb, peer_qpn=qpn, line_mbps=200.0)
        b.qp(qpn, peer="127.0.0.1", peer_port=pa, peer_qpn=qpn, line_mbps=200.0)
        a.write(qpn, start_us=0, nbytes=300_000)
    rb = subprocess.Popen([str(binary), str(b.save(tmp_path / "b.conf")),
                           str(tmp_path / "b.json")], stdout=subprocess.PIPE, text=True)
    try:
        assert rb.stdout.readline().strip() == "ready"
        subprocess.run([str(binary), str(a.save(tmp_path / "a.conf")),
                        str(tmp_path / "a.json")], check=True, timeout=60,
                       stdout=subprocess.DEVNULL)
    finally:
        rb.terminate()
        rb.wait(timeout=10)
    ra, rb_ = roce.read_result(tmp_path / "a.json"), roce.read_result(tmp_path / "b.json")
    for m in ra.messages:
        got = rb_.qps[m.qpn]
        assert got["rx_bytes"] == 300_000 and got["ce_rx"] > 0, got
        # 8 listed QPs, one visit a 2 ms tick: a CNP per QP at most every 16 ms (the 9 ms
        # minimum interval alone would allow almost twice as many)
        assert 0 < got["cnps_tx"] <= m.fct_us / 16_000 + 2, (got["cnps_tx"], m.fct_us)
        assert ra.qps[m.qpn]["rate_cuts"] == ra.qps[m.qpn]["cnps_rx"] > 0


def test_bad_configs_are_refused():
    e = roce.Engine(bind="10.0.0.1", mtu=1500)
    with pytest.raises(ValueError, match="mtu: a RoCE MTU"):
        e.text()
    e = roce.Engine(bind="10.0.0.1")
    with pytest.raises(ValueError, match="no queue pair 3"):
        e.write(3, 0, 10)
    e.qp(3, "10.0.0.2", 3, 100)
    with pytest.raises(ValueError, match="twice"):
        e.qp(3, "10.0.0.2", 4, 100)
    with pytest.raises(ValueError, match="one of dcqcn, dcqcn_plus, timely, hpcc, nscc and user_cc"):
        roce.Engine(bind="10.0.0.1", dcqcn=Dcqcn(), timely=Timely(), link_mbps=100).text()
    with pytest.raises(ValueError, match="base_rtt_us"):
        roce.Engine(bind="10.0.0.1", hpcc=Hpcc(), link_mbps=100, int_rates=[100]).text()
    with pytest.raises(ValueError, match="int_rates"):
        roce.Engine(bind="10.0.0.1", hpcc=Hpcc(), link_mbps=100, base_rtt_us=100).text()
    with pytest.raises(ValueError, match="t_low_us"):
        roce.Engine(bind="10.0.0.1", timely=Timely(t_low_us=600), link_mbps=100).text()
    with pytest.raises(ValueError, match="source port 70000 is not a port"):
        e.qp(4, "10.0.0.2", 4, 100, sport=70000)


def test_a_queue_pairs_source_port_is_a_nics():
    # Linux's rdma_get_udp_sport: the flow label of the two QP numbers folded into
    # 0xC000..0xFFFF, the same at both ends of a connection
    assert roce.qp_source_port(1, 1) == 0xC001
    assert roce.qp_source_port(0x11, 0x22) == roce.qp_source_port(0x22, 0x11) == 0xC242
    assert roce.qp_source_port(0xABCDE, 0x12345) == 0xC2B9   # folded above 20 bits
    ports = {roce.qp_source_port(n, n) for n in range(1, 257)}   # 14 bits: a few collide
    assert len(ports) >= 250 and min(ports) >= 0xC000 and max(ports) <= 0xFFFF
    e = roce.Engine(bind="10.0.0.1")
    e.qp(1, "10.0.0.2", 1, 100)
    e.qp(2, "10.0.0.2", 2, 100, sport=0xC004)
    lines = [line for line in e.text().splitlines() if line.startswith("qp ")]
    assert lines == ["qp 1 10.0.0.2 4791 1 100 0", "qp 2 10.0.0.2 4791 2 100 49156"]
    # spraying varies each QP's own port per packet, and its receiver must keep reordered
    # packets (IRN)
    e.spray_entropies, e.reorder_pkts = 16, 8
    with pytest.raises(ValueError, match="spraying needs irn and every queue pair's own"):
        e.text()
    e.irn, e.link_mbps, e.base_rtt_us = Irn(), 100, 500
    with pytest.raises(ValueError, match="spraying needs irn and every queue pair's own"):
        e.text()                                    # QP 1 sends from the bound port
    sprayed = roce.Engine(bind="10.0.0.1", irn=Irn(), link_mbps=100, base_rtt_us=1000,
                          spray_entropies=16, reorder_pkts=8)
    sprayed.qp(1, "10.0.0.2", 1, 100, sport=0xC001)
    # IRN's cap: 1 ms at 100 Mb/s is 12 packets of 1 KB; the threshold stays below it
    assert "spray 16 8" in sprayed.text().splitlines()
    sprayed.base_rtt_us = 500                     # 6 packets: a threshold of 8 could never
    assert "spray 16 5" in sprayed.text().splitlines()   # be met, so it is held at 5



NSCC_TEST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "nscc.h"
int main(int argc, char **argv)
{
    /* the reference network: 100 Gb/s, T 12 us, a BDP of 150 kB, 4150-byte packets;
     * argv: events "a NOW_NS BYTES RTT_NS ECN INFLIGHT" or "l NOW_NS BYTES INFLIGHT" */
    struct nscc_params p = { .mtu = 4150, .maxwnd = 225000, .fi = 5 * 4086,
                             .eta = 0.15 * 4086, .alpha = 4.0 * 4086 / 12000,
                             .fi_scale = 0.25, .gamma = 0.8, .md_floor = 0.5,
                             .delay_alpha = 0.0125, .fulfil_bytes = 8 * 4150,
                             .base_rtt_ns = 12000, .target_ns = 12000, .fast_ns = 1000,
                             .qa_delay_ns = 48000, .qa_gate = 3 };
    struct nscc n;
    nscc_init(&n, &p, 0);
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == 'a') {
            nscc_on_ack(&n, &p, strtoull(argv[i + 1], 0, 10), atof(argv[i + 2]),
                        strtoull(argv[i + 3], 0, 10), atoi(argv[i + 4]), atof(argv[i + 5]));
            i += 5;
        } else {
            nscc_on_loss(&n, &p, strtoull(argv[i + 1], 0, 10), atof(argv[i + 2]),
                         atof(argv[i + 3]));
            i += 3;
        }
        printf("%.3f %.6f %llu\n", n.cwnd, n.avg_delay, (unsigned long long)n.cuts);
    }
    return 0;
}
"""


def nscc_reference(events):
    """NSCC's rules as the UEC's htsim model has them, written out again (the same
    parameters as NSCC_TEST): the window after each event."""
    mtu, maxwnd, fi, eta, alpha = 4150, 225000, 5 * 4086, 0.15 * 4086, 4.0 * 4086 / 12000
    base, target, fast, qa_delay = 12000, 12000, 1000, 48000
    st = dict(cwnd=maxwnd, inc=0.0, avg=0.0, ach=0.0, rec=0.0, fic=0.0, ign=0.0, toign=0.0,
              adj=0, dec=0, qa_end=0, incr=False, trig=False)
    out = []

    def clamp():
        st["cwnd"] = min(max(st["cwnd"], mtu), maxwnd)

    def delay_ewma(ecn, d):
        sample = base / 4 if not ecn and d > target else d
        st["avg"] = 0.0125 * sample + 0.9875 * st["avg"]

    def qa(now, loss, ecn, d, inflight):
        if st["ign"] < st["toign"] and ecn:
            st["inc"] = st["rec"] = 0.0
            return True
        taken = False
        if now > st["qa_end"]:
            if st["qa_end"] and (st["trig"] or loss or d > qa_delay) and st["ach"] < maxwnd / 8:
                st["cwnd"] = max(st["ach"], mtu)
                st["toign"], st["ign"], st["trig"], taken = inflight, 0.0, False, True
            st["ach"], st["qa_end"] = 0.0, now + base + target
        if taken:
            st["inc"] = st["rec"] = 0.0
        return taken

    for ev in events:
        if ev[0] == "a":
            _, now, acked, rtt, ecn, inflight = ev
            for k in ("ach", "rec", "ign"):
                st[k] += acked
            if rtt >= base:                 # a valid sample
                d = float(rtt - base)
                delay_ewma(ecn, d)
            else:
                d = st["avg"]
            if not qa(now, False, ecn, d, inflight):
                if not ecn and d >= target:
                    st["inc"] += fi * acked
                elif not ecn:
                    if d < fast:
                        st["fic"] += acked
                        if st["fic"] > st["cwnd"] or st["incr"]:
                            st["cwnd"] += acked * 0.25
                            st["incr"] = True
                    else:
                        st["fic"], st["incr"] = 0.0, False
                    if not st["incr"]:
                        st["inc"] += alpha * acked * (target - d)
                elif d >= target:
                    st["fic"], st["incr"] = 0.0, False
                    if st["avg"] > target and now - st["dec"] > base:
                        st["cwnd"] *= max(1 - 0.8 * (st["avg"] - target) / st["avg"], 0.5)
                        st["dec"] = now
                clamp()
                if st["rec"] > 8 * mtu or now - st["adj"] > base:
                    st["cwnd"] += st["inc"] / st["cwnd"]
                    if now - st["adj"] >= base:
                        st["cwnd"] += eta
                        st["adj"] = now
                    st["inc"] = st["rec"] = 0.0
                    clamp()
        else:
            _, now, nbytes, inflight = ev
            st["ign"] += nbytes
            delay_ewma(True, float(base))
            st["trig"] = True
            if not qa(now, True, True, 0.0, inflight):
                st["cwnd"] -= nbytes
            clamp()
        out.append(st["cwnd"])
    return out


def test_nscc_is_the_uec_models_arithmetic(tmp_path):
    """The window after every event of a random run (queueing delay below, near and far
    above the target, marks, losses), against the rules written out in Python; and the
    rules' points: no mark and no delay keeps the window whole, a mark with the delay at
    the target only once the average passed it, a mark without delay never, a loss with
    little acknowledged sets the window to what was (quick adapt)."""
    import random
    rnd = random.Random(7)
    events, now = [], 0
    for _ in range(600):
        now += rnd.randrange(200, 3000)
        if rnd.random() < 0.03:
            events.append(("l", now, 4150, rnd.randrange(0, 200000)))
        else:
            rtt = rnd.choice([12000, 12500, 20000, 30000, 80000, 11000])
            events.append(("a", now, rnd.choice([4150, 8300, 41500]), rtt,
                           int(rnd.random() < 0.3), rnd.randrange(0, 200000)))
    binary = compile_c(tmp_path, NSCC_TEST)
    argv = [str(x) for ev in events for x in ev]
    got = [float(line.split()[0]) for line in subprocess.run(
        [binary, *argv], capture_output=True, text=True, check=True).stdout.splitlines()]
    want = nscc_reference(events)
    assert len(got) == len(want) == len(events)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-6, abs=1e-3), (i, events[i], g, w)
    assert len({round(w) for w in want}) > 20          # the run moved the window about

    def run(*evs):
        out = subprocess.run([binary, *(str(x) for ev in evs for x in ev)],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        return [tuple(float(v) for v in line.split()) for line in out]
    # at zero delay without marks the window stays at 1.5 BDP
    assert run(*[("a", 1000 * i, 4150, 12000, 0, 0) for i in range(1, 50)])[-1][0] == 225000
    # marked, delay 0: nothing is cut
    assert run(*[("a", 1000 * i, 4150, 12000, 1, 0) for i in range(1, 50)])[-1][2] == 0
    # marked with 40 us of queueing: cut once the average passes the target (12 us), then
    # at most once per base round trip
    marked = run(*[("a", 1000 * i, 4150, 52000, 1, 0) for i in range(1, 400)])
    cuts = [c for _, _, c in marked]
    assert cuts[0] == 0 and cuts[-1] >= 2 and marked[-1][0] < 225000
    # quick adapt: a loss in a period (T + target = 24 us) in which 8300 bytes were
    # acknowledged, under 1/8 of the largest window: the window becomes those 8300 bytes
    qa_run = run(("a", 1000, 4150, 12000, 0, 0), ("a", 30000, 4150, 12000, 0, 0),
                 ("a", 55000, 4150, 12000, 0, 0), ("a", 70000, 8300, 12000, 0, 0),
                 ("l", 80000, 4150, 100000))
    assert qa_run[-2][0] == 225000 and qa_run[-1][0] == 8300, qa_run
    # without quick adapt (the period not over), a loss takes one packet off
    assert run(("a", 1000, 4150, 12000, 0, 0), ("l", 2000, 4150, 0))[-1][0] == 225000 - 4150


def test_nscc_on_loopback_marks_without_delay_and_losses(tmp_path):
    """NSCC's receiver echoes a mark on the ACK of the marked packet (no CNP); on loopback
    the queueing delay is nil, so marks alone cut nothing (NSCC cuts only when the delay
    is above target too), and the window stays whole; losses cut it."""
    a, b = transfer(tmp_path, [400_000], ce_every=3, nscc=Nscc(), base_rtt_us=5000.0)
    qa, qb = a.qps[7], b.qps[9]
    assert qb["rx_bytes"] == 400_000 and qb["ce_rx"] > 100 and qb["cnps_tx"] == 0, qb
    # every third ACK echoed its packet's mark (an ACK refused by a full socket may drop
    # one), and none of them cut
    assert qb["ce_rx"] * 0.9 <= qa["becn_rx"] <= qb["ce_rx"], (qa, qb)
    assert qa["rate_cuts"] == 0 and qa["rate_updates"] > 300, qa
    a, b = transfer(tmp_path, [400_000], drop_every=40, nscc=Nscc(), base_rtt_us=5000.0)
    assert b.qps[9]["rx_bytes"] == 400_000
    assert a.qps[7]["rate_cuts"] > 0 and a.qps[7]["retx_pkts"] > 0, a.qps[7]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
