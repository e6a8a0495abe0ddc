"""What one machine carries before its numbers stop being the network's: the
limits the runner's CPU verdict applies to every traffic phase, and the costs measured on
the reference machine that `testbed plan` (testbed/plan.py) turns into a verdict before a
run. Measured by `scripts/bench_capacity.py` (docs/BENCHMARKS.md, "Capacity of one
machine"); a machine of another kind is measured the same way and its numbers passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

# The runner's verdict (testbed/measure/cpu.py): a phase is CPU-bound when OVS's forwarding
# thread has fallen behind so far that it adds more than this much queueing delay (median)
# to every packet -- about what one 20 Mb/s hop adds by serialization -- or when the machine
# has no idle time left for the hosts (less than this on average). (The thread's busy share
# is no verdict: with steady traffic its poll loop never idles, keeping up or not;
# measurements in docs/FIDELITY.md.)
OVS_DELAY_LIMIT_MS = 1.0
MACHINE_IDLE_MEAN_MIN = 0.10
# ... or when the RoCE engine, pacing its packets in software, woke so late that a flow
# lost more than this share of its completion time beyond the limiter's burst credit. On
# these virtual machines a lone flow on a quiet machine loses 0.25-2.3% that way (wake-ups
# that wait 1-5 ms runnable: docs/FIDELITY.md); the limit sits above that and at the 5%
# the tests hold a lone flow's completion to. Rows carry the loss (`pace_lost_us`).
ENGINE_PACE_LOST_MAX = 0.05


@dataclass(frozen=True)
class Capacity:
    """One server, as measured. Open vSwitch's userspace datapath forwards all of a
    server's switches in one thread, so a server forwards at most what that thread does,
    whatever its cores (docs/FIDELITY.md): the packets per second entering switches it
    carried with its added queueing under the runner's limit, and the least at which it
    passed it, at two MTUs (between them: marginal). The rest is what trainers get."""
    cores: int
    ovs_fits_pps: dict[int, float]   # MTU -> carried, not CPU-bound
    ovs_bound_pps: dict[int, float]  # MTU -> CPU-bound from
    packets_per_segment: float       # packets entering switches per data segment per switch
    network_cores: float             # busy cores while traffic flows (OVS, kernel, TCP)
    compute_cores: float             # cores trainers computing at once share
    step_overhead: float             # a trainer's iteration compute over its bare step
    trainer_base_s: float            # a trainer's CPU per iteration besides compute ...
    trainer_per_mb_s: float          # ... per MB it sends ...
    trainer_per_step_s: float        # ... and per step of a ring collective
    rank_per_mb_s: float             # a parallel rank's CPU per MB it sends (its tensors)
    wait_factor: float               # the share of the all-at-once wait trainers wait
    latency_s: float                 # a message's one-way latency through the fabric
    roce_pkt_s: float                # the RoCE engines' CPU per data packet, both ends
    # an idle fabric's switch crossing: the forwarding thread reads every port of every
    # switch it holds on each wake-up, so a crossing costs this plus this per port
    crossing_base_s: float
    crossing_per_port_s: float
    # a fabric forwarded by several processes (`forwarding.processes`): each process's
    # thread is kept busy by its own share of the packets, so together they take more of
    # the machine's cores and it carries fewer packets faithfully (the packets per second
    # entering switches it carried, and the least it was CPU-bound at, any MTU) while
    # these cores are busy
    split_fits_pps: float = 0.0
    split_bound_pps: float = 0.0
    split_network_cores: float = 0.0

    def ovs_pps(self, mtu: int) -> tuple[float, float]:
        """(fits, bound) at this MTU: linear in per-packet time between the measured MTUs,
        the nearest outside them."""
        (m0, m1) = sorted(self.ovs_fits_pps)
        w = min(1.0, max(0.0, (mtu - m0) / (m1 - m0)))

        def at(table: dict[int, float]) -> float:
            return 1 / ((1 - w) / table[m0] + w / table[m1])
        return at(self.ovs_fits_pps), at(self.ovs_bound_pps)

    def forwarded_by(self, processes: int) -> Capacity:
        """This machine's capacity for a fabric that `processes` ovs-vswitchd forward."""
        if processes <= 1 or not self.split_fits_pps:
            return self
        return replace(self, ovs_fits_pps={m: min(v, self.split_fits_pps)
                                           for m, v in self.ovs_fits_pps.items()},
                       ovs_bound_pps={m: min(v, self.split_bound_pps)
                                      for m, v in self.ovs_bound_pps.items()},
                       network_cores=self.split_network_cores)

    def crossing_s(self, ports: int) -> float:
        """What one switch crossing adds to an idle packet when one forwarding process
        reads `ports` switch ports."""
        return self.crossing_base_s + self.crossing_per_port_s * ports


# The reference machine: 2 cores, Debian 12, Open vSwitch 3.1's userspace datapath; two
# runs of scripts/bench_capacity.py on a quiet machine, 2026-11-24 (docs/BENCHMARKS.md,
# "Capacity of one machine"). A Fat-Tree k=4 under ECMP carried up to 67,034 packets/s into
# its switches at MTU 1500 and 79,491 at MTU 9000 without OVS adding 1 ms, and one run was
# CPU-bound from 82,461 and 86,448 (the other carried 88,067 at MTU 1500 at 0.94 ms: near
# the limit a run's verdict is a coin toss); 1.39 packets per data segment per switch. The
# machine was 1.04-1.20 cores busy at every load. Four trainers computing at once took
# 2.47-2.70x one's compute (1.55 cores between them); an iteration computes 1.20x its bare
# step. A ring trainer's CPU per iteration: 0.94 ms + 3.12 ms per MB it sends + 0.19 ms per
# ring step (4-16 workers: 4.2-10.7 ms), and trainers waited 0.55 of the all-at-once
# estimate. A parallel rank (emulated compute, 8 data-parallel ranks of GPT-2 small x0.01
# at 20 Mb/s) spent 35-41 ms per iteration sending 3.28 MB: 10.5 ms per MB besides the base
# and its 14 ring steps, its tensors' work included. The latency is not the bench's: half
# the idle Leaf-Spine path RTT of the reachability table (0.99 ms). The RoCE engines of
# `rdma_dcqcn.yaml` (4096-byte packets, about 3,000 a second per flow) spent 43-48 us of
# CPU per data packet between the sender's and the receiver's (ACKs and pacing included)
# with PFC alone, 49-53 us under DCQCN; the plan prices the first. An idle Fat-Tree's
# farthest pair added 0.21-0.35 ms per switch crossing at k=4 (80 switch ports; ten runs,
# mean 0.28) and 1.4-4.1 ms at k=8 (640; nine runs, mean 1.9), in one ovs-vswitchd
# (scripts/bench_partitions.py; docs/BENCHMARKS.md, "Latency and the forwarding process"):
# the line through the two means. Split into two processes (`bench_capacity.py
# --forwarding 2`, 2026-11-28), the Fat-Tree k=4 carried 22,855 packets/s at MTU 9000 with
# the machine 1.38-1.66 cores busy, and was CPU-bound (the machine under 10% idle) from
# 29,277 at MTU 1500 and 32,775 at MTU 9000, where one process carried 39,800.
REFERENCE = Capacity(cores=2, ovs_fits_pps={1500: 67034, 9000: 79491},
                     ovs_bound_pps={1500: 82461, 9000: 86448}, packets_per_segment=1.39,
                     network_cores=1.1, compute_cores=1.55, step_overhead=1.2,
                     trainer_base_s=0.00094, trainer_per_mb_s=0.00312,
                     trainer_per_step_s=0.000185, rank_per_mb_s=0.0105, wait_factor=0.55,
                     latency_s=0.0005, roce_pkt_s=47e-6,
                     crossing_base_s=0.28e-3 - 80 * (1.9e-3 - 0.28e-3) / 560,
                     crossing_per_port_s=(1.9e-3 - 0.28e-3) / 560,
                     split_fits_pps=22855, split_bound_pps=29277, split_network_cores=1.52)
