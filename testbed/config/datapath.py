"""Which Open vSwitch datapath forwards the fabric's packets, and what differs between them.

`user` (netdev, in ovs-vswitchd's own thread) is the one every test and benchmark has run
on; `kernel` (the openvswitch module) is the one a user's VM usually has; `auto` takes the
kernel's when its module is loaded. The code paths that differ are named here, once, as
`Traits`; the fabric and the checks ask these instead of comparing names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Datapath = Literal["user", "kernel"]
SETTINGS = ("user", "kernel", "auto")


@dataclass(frozen=True)
class Traits:
    """What a datapath changes for the testbed.

    - `send_socket`: OVS hands every forwarded packet to the egress veth through one
      AF_PACKET socket whose send buffer must hold every switch queue full at once, or
      packets vanish uncounted (docs/FIDELITY.md); the run sizes and checks it. The kernel
      datapath queues straight into the port's qdisc: no such socket.
    - `tail_drop_countable`: a full tail-drop fifo's drops are counted exactly once. Not on
      the userspace datapath, whose `sendmmsg` loop re-offers a rejected packet (hence
      `links.drop: head` by default); the kernel's `dev_queue_xmit` drops it once.
    - `socket_drops`: packets can be dropped at OVS's receive sockets (counted in the
      conservation check); the kernel datapath has none.
    - `offloads_off`: veth checksum/segmentation offloads must be off (userspace: TCP
      carries nothing otherwise; both: queues must hold MTU-size frames, not 64 KB
      segments), so both turn them off.
    - `measured`: the testbed's numbers were measured on it (docs/BENCHMARKS.md).
    """
    name: Datapath
    send_socket: bool
    tail_drop_countable: bool
    socket_drops: bool
    offloads_off: bool
    measured: bool


TRAITS: dict[str, Traits] = {
    "user": Traits(name="user", send_socket=True, tail_drop_countable=False,
                   socket_drops=True, offloads_off=True, measured=True),
    "kernel": Traits(name="kernel", send_socket=False, tail_drop_countable=True,
                     socket_drops=False, offloads_off=True, measured=False),
}


def choose(setting: str, kernel_available: bool) -> Traits:
    """The datapath a run uses for the spec's `datapath` setting, given whether this
    machine has the openvswitch kernel module. ValueError, saying why, when `kernel` is
    asked for and there is none."""
    if setting not in SETTINGS:
        raise ValueError(f"datapath: one of {', '.join(SETTINGS)} (got {setting!r})")
    if setting == "kernel" and not kernel_available:
        raise ValueError("datapath: kernel needs the openvswitch kernel module, which this "
                         "machine does not have (`modprobe openvswitch` failed); use user or "
                         "auto")
    if setting == "user" or (setting == "auto" and not kernel_available):
        return TRAITS["user"]
    return TRAITS["kernel"]
