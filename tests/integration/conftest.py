"""Integration tests need root, Open vSwitch and Mininet; without them they are skipped
with the reason. CI runs as root and runs them."""
import shutil

import pytest

from testbed.core.system import is_root


def _missing() -> str | None:
    if not is_root():
        return "needs root"
    if not shutil.which("ovs-vsctl"):
        return "needs Open vSwitch (scripts/bootstrap.sh)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "needs Mininet (scripts/bootstrap.sh)"
    from testbed.dataplane import ovs
    if not ovs.running():
        return "needs a running Open vSwitch (scripts/bootstrap.sh)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _missing()
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.root)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
