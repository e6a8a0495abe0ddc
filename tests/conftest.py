"""Checks shared by the unit and integration suites (they run in one pytest process in CI)."""
import os
import select

import pytest

from testbed.core.system import hold_wakeup_latency


@pytest.fixture(autouse=True, scope="session")
def _wakeups_as_in_a_run():
    """The CPUs wake at once, as the runner asks for a run (hold_wakeup_latency), so that
    tests that time things on loopback (the RoCE engine's pacing, Gloo ranks) see a run's
    timers; without root the machine stays as it is."""
    fd = hold_wakeup_latency()
    yield
    if fd is not None:
        os.close(fd)


@pytest.fixture(autouse=True)
def _process_not_monkey_patched():
    """Fail the test that imported Ryu (controllers.apps.compat) into the pytest process: Ryu's hub
    monkey-patches it with eventlet, which removes select.poll, and every Mininet-based
    integration test run after it would then fail far from the cause. Such a test must run
    the Ryu part in a child process."""
    yield
    assert hasattr(select, "poll"), \
        "this test imported Ryu into the pytest process (eventlet removed select.poll); " \
        "run the Ryu part in a child process"
