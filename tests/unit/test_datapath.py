"""The datapath as a choice: what each setting picks on a machine with and
without the openvswitch kernel module, and what the two datapaths change for the testbed."""
import pytest

from testbed.config.datapath import SETTINGS, TRAITS, choose
from testbed.spec import SpecError, loads


@pytest.mark.parametrize("setting,module,picked", [
    ("user", False, "user"), ("user", True, "user"),
    ("auto", False, "user"), ("auto", True, "kernel"),
    ("kernel", True, "kernel"),
])
def test_each_setting_picks_a_datapath(setting, module, picked):
    assert choose(setting, module).name == picked


def test_kernel_without_its_module_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match="datapath: kernel needs the openvswitch kernel "
                                         "module.*use user or auto"):
        choose("kernel", False)
    with pytest.raises(ValueError, match="datapath: one of user, kernel, auto"):
        choose("fast", True)


def test_what_differs_is_stated_per_datapath():
    user, kernel = TRAITS["user"], TRAITS["kernel"]
    # the userspace datapath's send socket must hold every queue; the kernel's has none
    assert user.send_socket and not kernel.send_socket
    assert user.socket_drops and not kernel.socket_drops
    # tail drop re-offers packets on the userspace datapath only (why head drop is default)
    assert not user.tail_drop_countable and kernel.tail_drop_countable
    assert user.offloads_off and kernel.offloads_off
    # only the userspace one has been measured
    assert user.measured and not kernel.measured
    assert set(TRAITS) < set(SETTINGS)


def test_the_spec_chooses_and_defaults_to_the_measured_one():
    base = {"name": "d", "topology": {"kind": "dumbbell", "params": {}},
            "experiments": [{"type": "reachability"}]}
    assert loads(base)[0].datapath == "user"
    assert loads({**base, "datapath": "auto"})[0].datapath == "auto"
    with pytest.raises(SpecError, match="datapath"):
        loads({**base, "datapath": "netdev"})
