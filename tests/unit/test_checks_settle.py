"""After a phase's traffic the checks wait until the switches fall quiet (nothing queued,
nothing sent for a step) before counting packets, at most as long as they always waited;
where the queues cannot be read cheaply (a cluster), that long."""
from __future__ import annotations

import time

from testbed.measure.checks import quiet, settle


def test_quiet_means_nothing_queued_and_nothing_sent_between_readings():
    assert quiet((100, 0), (100, 0))
    assert not quiet((100, 0), (101, 0))    # a packet left a queue in between
    assert not quiet((100, 3), (100, 3))    # held (a paused class): not quiet


class Switches:
    """Readings of (sent, queued) in turn; the last repeats."""

    def __init__(self, readings):
        self.readings, self.reads = list(readings), 0

    def switch_activity(self):
        self.reads += 1
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_settle_returns_once_quiet_and_never_waits_longer_than_before():
    fab = Switches([(10, 2), (12, 1), (13, 0), (13, 0)])
    t = time.monotonic()
    settle(fab, longest=0.8, step=0.02)
    assert fab.reads == 4 and time.monotonic() - t < 0.3
    busy = Switches([(i, 1) for i in range(1000)])   # traffic that never stops
    t = time.monotonic()
    settle(busy, longest=0.2, step=0.02)
    assert 0.19 <= time.monotonic() - t < 0.4


def test_settle_waits_the_longest_where_the_queues_cannot_be_read():
    class Cluster:
        def switch_activity(self):
            return None
    t = time.monotonic()
    settle(Cluster(), longest=0.15, step=0.02)
    assert time.monotonic() - t >= 0.15
