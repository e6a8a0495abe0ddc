"""Facts that more than one layer computes: each is written here once."""
from __future__ import annotations

ETHERNET_HEADER_BYTES = 14
IP_TCP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12
IP_UDP_HEADER_BYTES = 28
CLASS_MINOR_BASE = 0x10  # HTB class 1:(0x10 + c) and its tbf gate carry traffic class c


def frame_bytes(mtu_bytes: int) -> int:
    """Largest Ethernet frame for an MTU: what HTB, byte limits and thresholds count."""
    return mtu_bytes + ETHERNET_HEADER_BYTES


def tcp_payload_fraction(mtu_bytes: int) -> float:
    """iperf3 goodput counts TCP payload: MTU - 52 (IP, TCP with timestamps) of every
    MTU + 14 bytes that HTB counts (1448 / 1514 = 95.6% at 1500)."""
    return (mtu_bytes - IP_TCP_HEADER_BYTES) / frame_bytes(mtu_bytes)


def udp_payload_fraction(mtu_bytes: int) -> float:
    """The same for UDP datagrams of a full MTU (IP 20 + UDP 8)."""
    return (mtu_bytes - IP_UDP_HEADER_BYTES) / frame_bytes(mtu_bytes)


def htb_burst_bytes(rate_mbps: float, burst_us: int, mtu_bytes: int) -> int:
    """HTB's burst (and cburst) for a port: `burst_us` of the link's rate, at least two
    frames; 0 means tc's default. The emulated switch forwards with jitter (OVS's thread
    stalls for a few ms); without this allowance a port fed at exactly its own rate loses
    every stalled millisecond for good, its queue random-walks to the limit and drops
    packets a real switch would not (docs/FIDELITY.md)."""
    if not burst_us:
        return 0
    return max(2 * frame_bytes(mtu_bytes), int(rate_mbps * burst_us / 8))


TC_HTB_DEFAULT_MTU = 1600  # tc's htb: without `burst`, rate / HZ + this many bytes


def htb_default_burst(rate_bytes_per_s: int) -> int:
    """tc's bucket for an HTB class given no `burst` (the hosts' NICs): rate / HZ + 1600
    bytes, HZ = 1e9 with high-resolution timers (/proc/net/psched)."""
    return rate_bytes_per_s // 1_000_000_000 + TC_HTB_DEFAULT_MTU


def class_minor(cls: int) -> int:
    """Minor number of traffic class `cls`'s HTB class and of its tbf gate's handle."""
    return CLASS_MINOR_BASE + cls
