"""Checks shared by the unit and integration suites (they run in one pytest process in CI)."""
import select

import pytest


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
