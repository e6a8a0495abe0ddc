"""Mininet's node classes, so that a script naming them imports. The testbed's own classes
build the fabric: a script's `switch=`, `controller=` and `host=` choices are accepted and
stand for what the testbed runs (userspace Open vSwitch under its Ryu controller; plain
hosts), except a CPU-limited host, which is refused (testbed/mn/net.py)."""
from mininet.node import (
    Controller,
    CPULimitedHost,
    DefaultController,
    Host,
    Node,
    NullController,
    OVSBridge,
    OVSController,
    OVSKernelSwitch,
    OVSSwitch,
    RemoteController,
    Ryu,
    Switch,
    UserSwitch,
)

__all__ = ["CPULimitedHost", "Controller", "DefaultController", "Host", "Node",
           "NullController", "OVSBridge", "OVSController", "OVSKernelSwitch", "OVSSwitch",
           "RemoteController", "Ryu", "Switch", "UserSwitch"]
