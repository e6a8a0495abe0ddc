"""The trainer experiments' shared pure decisions: a host's link, and when a job's numbers
are the machine's rather than the network's (the CPU-bound verdict every trainer
experiment applies, and `testbed plan` predicts)."""
from __future__ import annotations

from topologies.model import Topology

# A job is CPU-bound (its iteration time measures the 2-core machine, not the network) when
# a worker waited for a core more than this share of an iteration AND the network was not
# the bottleneck: its busiest link was busy less than LINK_BUSY_BOTTLENECK of the
# communication time (unknown for a parameter server: the wait decides alone). The wait is
# summed over the worker's threads (the trainer's and Gloo's), so it can exceed 100%.
# Measured: ring jobs with <= 8% wait matched the model within 4%; 16 workers waiting 13%
# took 1.8x the model with their links idle most of the time; P3 jobs waited 10-18% (more
# threads) with their links 95-99% busy, within 1.1x of the model.
CPU_WAIT_SHARE_LIMIT = 0.1
LINK_BUSY_BOTTLENECK = 0.8


def cpu_bound_verdict(monitor_says: bool, wait_share: float | None,
                      link_busy: float | None) -> bool:
    """The machine's verdict (OVS fell behind, under 10% idle) or the workers' (above)."""
    waited = (wait_share or 0) > CPU_WAIT_SHARE_LIMIT
    network_bound = link_busy is not None and link_busy >= LINK_BUSY_BOTTLENECK
    return bool(monitor_says or (waited and not network_bound))


def host_link(topo: Topology, host: str):
    """A host's first link (a multi-port BCube server has one per level)."""
    port, _, _ = topo.ports_of(host)[0]
    return topo.link_at(host, port)
