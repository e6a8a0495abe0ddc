"""What one machine carries before its numbers stop being the network's (issue 16): the
limits the runner's CPU verdict applies to every traffic phase, and the costs measured on
the reference machine that `testbed plan` (testbed/plan.py) turns into a verdict before a
run. Measured by `scripts/bench_capacity.py` (docs/BENCHMARKS.md, "Capacity of one
machine"); a machine of another kind is measured the same way and its numbers passed in.
"""
from __future__ import annotations

from dataclasses import dataclass

# the runner's verdict (testbed/measure/cpu.py): a phase is CPU-bound when OVS's forwarding
# added more than this much queueing at the median, or the machine was idle less than this
# on average
OVS_DELAY_LIMIT_MS = 1.0
MACHINE_IDLE_MEAN_MIN = 0.10


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
    latency_s: float                 # one way through a path of the emulated fabric

    def ovs_pps(self, mtu: int) -> tuple[float, float]:
        """(fits, bound) at this MTU: linear in per-packet time between the measured MTUs,
        the nearest outside them."""
        (m0, m1) = sorted(self.ovs_fits_pps)
        w = min(1.0, max(0.0, (mtu - m0) / (m1 - m0)))

        def at(table: dict[int, float]) -> float:
            return 1 / ((1 - w) / table[m0] + w / table[m1])
        return at(self.ovs_fits_pps), at(self.ovs_bound_pps)


# The reference machine: 2 cores, Debian 12, Open vSwitch 3.1's userspace datapath;
# scripts/bench_capacity.py on a quiet machine (docs/BENCHMARKS.md, "Capacity of one
# machine"). A Fat-Tree k=4 under ECMP at MTU 1500 carried 55,855 packets/s into its
# switches (OVS added 0.70 ms) and was CPU-bound at 82,461 (1.6 ms); at MTU 9000 65,966
# (0.58 ms) and 86,448 (18.6 ms); 1.39 packets per data segment per switch. The machine was
# 1.04-1.13 cores busy at every load. Four trainers computing at once took 2.70x one's
# compute (1.48 cores between them); an iteration computes 1.07x the bare step. A ring
# trainer's CPU per iteration: 0.64 ms + 2.97 ms per MB it sends + 0.22 ms per ring step
# (4-16 workers, 4.3-10.7 ms), and trainers waited 0.48 of the all-at-once estimate. A
# parallel rank (emulated compute; 8 data-parallel ranks of GPT-2 small x0.01 at 20 Mb/s)
# took 41 ms per iteration sending 3.27 MB: 12.3 ms per MB, its tensors' work included.
REFERENCE = Capacity(cores=2, ovs_fits_pps={1500: 55855, 9000: 65966},
                     ovs_bound_pps={1500: 82461, 9000: 86448}, packets_per_segment=1.39,
                     network_cores=1.1, compute_cores=1.48, step_overhead=1.07,
                     trainer_base_s=0.00064, trainer_per_mb_s=0.00297,
                     trainer_per_step_s=0.000223, rank_per_mb_s=0.0123, wait_factor=0.48,
                     latency_s=0.0005)
