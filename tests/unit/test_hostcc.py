"""The hosts' BPF congestion controls without a kernel: DCTCP's alpha arithmetic (the
header the BPF program includes, compiled for this machine) against RFC 8257's formula,
the spec's `{bpf: path}`, the trace records, and the messages of a broken program."""
import shutil
import struct
import subprocess

import pytest

from testbed.config.loader import SpecError, from_data
from testbed.config.network import BPF_CONGESTION_CONTROLS, BpfProgram, HostConfig
from testbed.core import resources
from testbed.dataplane import hostcc

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
typedef unsigned int __u32;
#include "dctcp_alpha.h"
int main(int argc, char **argv)
{
    __u32 alpha = atoi(argv[1]), delivered = atoi(argv[2]), ce = atoi(argv[3]);
    int windows = atoi(argv[4]);
    for (int i = 0; i < windows; i++) {
        alpha = dctcp_alpha_next(alpha, delivered, ce);
        printf("%u\n", alpha);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def alpha_program(tmp_path_factory):
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (scripts/bootstrap.sh installs clang-14)")
    folder = tmp_path_factory.mktemp("alpha")
    (folder / "harness.c").write_text(HARNESS)
    subprocess.run([cc, "-O2", "-I", str(hostcc.CC_DIR), "-o", str(folder / "alpha"),
                    str(folder / "harness.c")], check=True)

    def run(alpha: int, delivered: int, ce: int, windows: int) -> list[int]:
        out = subprocess.run([str(folder / "alpha"), str(alpha), str(delivered), str(ce),
                              str(windows)], capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]
    return run


@pytest.mark.parametrize("delivered,ce", [(40, 0), (40, 4), (40, 10), (40, 20), (40, 40),
                                          (7, 3), (100, 2)])
def test_dctcp_alpha_follows_rfc8257(alpha_program, delivered, ce):
    """alpha <- (1 - g) alpha + g F with g = 1/16, F the marked fraction of a window:
    each step within the integer arithmetic's rounding of the formula (two 1024ths), and
    after 200 windows of a fixed F, alpha is F within 10%, or within the kernel's quantum
    where that is coarser: alpha settles where alpha >> 4 equals F * 64 rounded down, so
    anywhere in a band 16/1024 wide."""
    g, f = 1 / 16, ce / delivered
    prev = 1024  # DCTCP starts at alpha = 1 (the kernel's dctcp_alpha_on_init)
    seq = alpha_program(prev, delivered, ce, 200)
    for a in seq:
        exact = (1 - g) * prev + g * f * 1024
        assert abs(a - exact) <= 2 or (exact < 16 and a <= exact + 2), (prev, a, exact)
        prev = a
    assert abs(seq[-1] / 1024 - f) <= max(0.1 * f, 16 / 1024), (seq[-1], f)


def test_alpha_reaches_zero_without_marks(alpha_program):
    """With no marks alpha decays by 1/16 a window and, once g * alpha rounds to nothing,
    drops to 0 as the kernel's does."""
    seq = alpha_program(1024, 40, 0, 100)
    assert seq[0] == 960 and seq[-1] == 0
    assert all(b <= a for a, b in zip(seq, seq[1:]))


def test_alpha_cannot_see_less_than_one_64th(alpha_program):
    """The kernel adds g * F in 1024ths as delivered_ce * 64 / delivered, which is 0 below
    F = 1/64: one mark in 100 packets a window leaves alpha at 0, as in the kernel."""
    assert alpha_program(1024, 100, 1, 200)[-1] == 0
    assert alpha_program(1024, 64, 1, 200)[-1] > 0


SWIFT_HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
typedef unsigned int __u32;
typedef unsigned long long __u64;
#include "swift_target.h"
int main(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        printf("%llu\n", swift_target_mpt(strtoull(argv[i], 0, 10), atoi(argv[1])));
    return 0;
}
"""


def test_swift_target_follows_the_paper(tmp_path):
    """base + hops * h + clamp(alpha / sqrt(cwnd) + beta, 0, fs_range), alpha and beta such
    that the flow term is fs_range at 0.1 packet and 0 at 100 packets: the program's integer
    arithmetic within 0.5% of the formula, in packet times (htsim's defaults at 100 Gb/s
    and 4 KB packets)."""
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (scripts/bootstrap.sh installs clang-14)")
    (tmp_path / "h.c").write_text(SWIFT_HARNESS)
    subprocess.run([cc, "-O2", "-I", str(hostcc.CC_DIR), "-o", str(tmp_path / "t"),
                    str(tmp_path / "h.c")], check=True)
    pkt_us = 4096 * 8 / 100e3  # a packet time at the reference
    base, h, fs_range = 20 / pkt_us, 20 / 6.55 / pkt_us, 100 / pkt_us
    alpha = fs_range / (1 / 0.1 ** 0.5 - 1 / 100 ** 0.5)
    beta = -alpha / 100 ** 0.5
    cwnds = [0.05, 0.1, 0.5, 1, 2, 5, 10, 40, 99, 100, 1000]
    for hops in (0, 1, 5):
        out = subprocess.run([str(tmp_path / "t"), str(hops), *(str(round(c * 1000))
                                                                 for c in cwnds)],
                             capture_output=True, text=True, check=True).stdout.split()
        for c, got in zip(cwnds, out):
            fs = min(max(alpha / c ** 0.5 + beta, 0.0), fs_range)
            exact = base + hops * h + fs
            assert abs(int(got) / 1000 / exact - 1) <= 0.005, (hops, c, got, exact)


def test_shipped_algorithms_have_sources():
    for name in BPF_CONGESTION_CONTROLS:
        assert hostcc.shipped_source(name).is_file(), name
    sources = {p.name.removesuffix(".bpf.c") for p in hostcc.CC_DIR.glob("*.bpf.c")}
    assert sources == set(BPF_CONGESTION_CONTROLS)


def test_a_spec_names_a_program_by_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.bpf.c").write_text("/* a program */")
    hosts = from_data(HostConfig, {"congestion_control": {"bpf": "mine.bpf.c"}}, "hosts")
    assert hosts.congestion_control == BpfProgram(bpf="mine.bpf.c")
    hosts.check()
    assert hosts.cc_label() == "mine"  # as result tables name it
    dctcp = from_data(HostConfig, {"congestion_control": "dctcp"}, "hosts")
    assert dctcp.congestion_control == "dctcp" and dctcp.cc_label() == "dctcp"
    with pytest.raises(SpecError, match="no such file: other.bpf.c"):
        from_data(HostConfig, {"congestion_control": {"bpf": "other.bpf.c"}}, "hosts").check()
    with pytest.raises(SpecError, match=r"\.bpf: a C source file"):
        from_data(HostConfig, {"congestion_control": {"bpf": "mine.o"}}, "hosts").check()
    with pytest.raises(SpecError, match="expected a string or a mapping"):
        from_data(HostConfig, {"congestion_control": 3}, "hosts")
    with pytest.raises(SpecError, match="prog: unknown key"):
        from_data(HostConfig, {"congestion_control": {"prog": "mine.bpf.c"}}, "hosts")


def test_trace_records_become_rows():
    rec = hostcc.TRACE_RECORD.pack(2_000_000_000, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]),
                                   40000, 5201, 12, 0x7FFFFFFF, 850, 1, 512, 5, 10)
    (row,) = hostcc.trace_rows([rec], "dctcp", mono_to_unix=100.0)
    assert dict(zip(hostcc.TRACE_FIELDS, row)) == {
        "t_unix_s": 102.0, "algorithm": "dctcp", "flow": "10.0.0.1:40000>10.0.0.2:5201",
        "cwnd_segs": 12, "ssthresh_segs": None, "srtt_us": 850, "state": "alpha",
        "value": 512, "marks": 5, "delivered": 10}
    # the C struct: u64, two addresses, two ports, seven u32
    assert hostcc.TRACE_RECORD.size == 8 + 8 + 4 + 7 * 4 == struct.calcsize("<Q4s4sHH7I")


def test_compile_errors_keep_the_first_errors():
    stderr = ("In file included from x.c:1:\n"
              "x.c:3:9: error: use of undeclared identifier 'foo'\n"
              "int x = foo;\n        ^\n"
              "x.c:4:1: warning: something\n1 error generated.\n")
    text = hostcc.compile_error(stderr, hostcc.CC_DIR / "x.c")
    assert text.splitlines() == ["x.c:3:9: error: use of undeclared identifier 'foo'",
                                 "int x = foo;", "        ^"]


def test_verifier_errors_keep_the_reason_and_the_log_end():
    stderr = "\n".join([
        "libbpf: prog 'cc_state': BPF program load failed: Permission denied",
        "libbpf: prog 'cc_state': -- BEGIN PROG LOAD LOG --",
        "0: R1=ctx() R10=fp0", "; tp->rcv_nxt = 5; @ mine.bpf.c:12",
        "18: (63) *(u32 *)(r1 +1664) = r2", "no write support to tcp_sock at off 1664",
        "processed 19 insns (limit 1000000)",
        "libbpf: prog 'cc_state': -- END PROG LOAD LOG --",
        "libbpf: prog 'cc_state': failed to load: -13",
        "Error: failed to load object file"])
    text = hostcc.verifier_error(stderr)
    assert text.splitlines()[0] == "prog 'cc_state': BPF program load failed: Permission denied"
    assert text.splitlines()[-1] == "no write support to tcp_sock at off 1664"
    assert "processed 19 insns" not in text and "verifier log (end):" in text


def test_the_record_lists_struct_ops_before_they_are_registered(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "STATE_DIR", tmp_path)
    rec = resources.RunRecord(run_id="r1", out_dir=str(tmp_path))
    rec.add_struct_ops(["tb_dctcp"])
    assert resources.RunRecord.load(rec.path).struct_ops == [{"map": "tb_dctcp", "id": None}]
    rec.add_struct_ops(["tb_dctcp"], [42])
    assert resources.RunRecord.load(rec.path).struct_ops == [{"map": "tb_dctcp", "id": 42}]
