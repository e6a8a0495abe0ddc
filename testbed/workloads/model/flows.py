"""iperf3 flows as data: what a flow is, how its client is invoked, what its output says,
and how flows of a traffic pattern get their ports. Pure: the fabric runs them
(testbed/net/traffic.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass

BASE_PORT = 5201


@dataclass(frozen=True, kw_only=True)
class Flow:
    src: str
    dst: str
    duration_s: float
    omit_s: float = 1.0
    port: int = BASE_PORT
    dscp: int = 0  # marked by the sender's socket (iperf3 --dscp); selects a traffic class
    udp_mbps: float | None = None  # UDP at this rate instead of TCP
    nbytes: int | None = None  # a finite flow of this size (its completion time is measured,
    #                            FlowRunner.run_finite); duration_s is its budget
    interval_s: float | None = None  # the receiver's goodput every this many seconds too

    def server_args(self) -> list[str]:
        """The receiver reports its own intervals (in JSON, which the client fetches with
        --get-server-output): what arrived, not what the sender wrote into its socket."""
        return ["-J", "-i", f"{self.interval_s:g}"] if self.interval_s else []

    def client_args(self) -> list[str]:
        args = ["-t", f"{self.duration_s:g}", "-O", f"{self.omit_s:g}"]
        if self.interval_s:
            args += ["-i", f"{self.interval_s:g}", "--get-server-output"]
        if self.dscp:
            args += ["--dscp", str(self.dscp)]
        if self.udp_mbps is not None:
            args += ["-u", "-b", f"{int(self.udp_mbps * 1e6)}", "-l", "1400"]
        return args


@dataclass(frozen=True, kw_only=True)
class FlowResult:
    src: str
    dst: str
    goodput_mbps: float
    sent_mbps: float
    retransmits: int
    max_cwnd_bytes: int
    sender_cc: str
    receiver_cc: str
    error: str = ""
    seconds: float = 0.0  # a finite flow's completion time (request to last byte)
    # the receiver's goodput in each interval of `interval_s` (Flow.interval_s), omitted
    # seconds included: what the flow carried before, during and after a fault
    interval_s: float = 0.0
    intervals_mbps: tuple[float, ...] = ()
    started: float = 0.0  # wall clock when its client was started (to place faults on it)
    local_port: int = 0   # the data connection's source port (iperf3's control connection
    #                       to the same server port is another)


def iperf3_json(text: str) -> dict:
    """iperf3's JSON report out of its output, which also holds what the process wrote to
    stderr: a remote server's shell may write a line or two before it (a shell start-up
    file's warnings) or after. ValueError when there is no report."""
    try:
        return json.loads(text)
    except ValueError:
        lines = text.splitlines(keepends=True)
        first = next((i for i, line in enumerate(lines) if line.rstrip() == "{"), None)
        if first is None:
            raise
        data, _ = json.JSONDecoder().raw_decode("".join(lines[first:]))
        return data


def parse_iperf3(src: str, dst: str, text: str) -> FlowResult:
    """Goodput is what the receiver got (payload bits per second), after the omit period."""
    try:
        data = iperf3_json(text)
    except ValueError:
        return FlowResult(src=src, dst=dst, goodput_mbps=0.0, sent_mbps=0.0, retransmits=0,
                          max_cwnd_bytes=0, sender_cc="", receiver_cc="",
                          error=f"unparsable iperf3 output: {text[:200]!r}")
    end = data.get("end", {})
    if "error" in data:
        return FlowResult(src=src, dst=dst, goodput_mbps=0.0, sent_mbps=0.0, retransmits=0,
                          max_cwnd_bytes=0, sender_cc="", receiver_cc="", error=data["error"])
    streams = end.get("streams", [{}])
    server = data.get("server_output_json") or {}
    spans = [i.get("sum", {}) for i in server.get("intervals", [])]
    return FlowResult(
        src=src, dst=dst,
        goodput_mbps=end.get("sum_received", {}).get("bits_per_second", 0.0) / 1e6,
        sent_mbps=end.get("sum_sent", {}).get("bits_per_second", 0.0) / 1e6,
        retransmits=int(end.get("sum_sent", {}).get("retransmits", 0)),
        max_cwnd_bytes=int(streams[0].get("sender", {}).get("max_snd_cwnd", 0)),
        sender_cc=end.get("sender_tcp_congestion", ""),
        receiver_cc=end.get("receiver_tcp_congestion", ""),
        interval_s=round(sorted(sp.get("seconds", 0.0) for sp in spans)[len(spans) // 2], 3)
        if spans else 0.0,
        intervals_mbps=tuple(round(sp.get("bits_per_second", 0.0) / 1e6, 4) for sp in spans),
        local_port=int((data.get("start", {}).get("connected") or [{}])[0].get("local_port", 0)))


def sent_mbps(text: str) -> float | None:
    """What an iperf3 client sent (Mb/s, over its life) from its JSON output, also when it
    was interrupted: its end summary, or, when it stopped on an error before writing one
    (the server gone), the sum of its interval reports. None when the output holds neither
    (the client died without writing its JSON)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    end = (data.get("end") or {}).get("sum_sent") or {}
    if end.get("seconds"):
        return float(end.get("bits_per_second", 0.0)) / 1e6
    spans = [i.get("sum", {}) for i in data.get("intervals") or []]
    seconds = sum(float(sp.get("seconds", 0.0)) for sp in spans)
    if seconds <= 0:
        return None
    return sum(float(sp.get("bytes", 0)) for sp in spans) * 8 / seconds / 1e6


def outage(intervals_mbps: tuple[float, ...] | list[float], interval_s: float,
           faults_s: list[float], window_s: float = 2.0, slack_s: float = 0.4,
           floor_fraction: float = 0.05) -> dict:
    """How long a flow carried (almost) nothing because of a fault. `faults_s`: when each
    fault struck, in seconds after the flow started. An interval below `floor_fraction` of
    the flow's median is dead; a run of dead intervals that begins within `window_s` after
    a fault is that fault's outage; `slack_s` earlier too, because the flow's clock starts
    when iperf3 has connected, a little after the runner started it (the fault time is
    placed on the flow's clock from the runner's). Stalls away from any fault (TCP
    recovering a congestion loss holds back what arrived after the hole) are not counted. `blackholed_s`: the outages' total, `longest_s` the longest, `resumed`
    whether the flow carried traffic again after its last one. The resolution is one
    interval."""
    rates = list(intervals_mbps)
    if not rates or interval_s <= 0:
        return {"blackholed_s": None, "longest_s": None, "resumed": None}
    positive = sorted(r for r in rates if r > 0)
    floor = floor_fraction * positive[len(positive) // 2] if positive else 0.0
    dead = [r <= floor for r in rates]
    runs: list[tuple[int, int]] = []  # [start, end) of each dead run
    i = 0
    while i < len(dead):
        if dead[i]:
            j = i
            while j < len(dead) and dead[j]:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    hit = {run for run in runs for t in faults_s
           if t - slack_s <= run[0] * interval_s <= t + window_s}
    lengths = [(e - s) * interval_s for s, e in hit]
    resumed = all(e < len(dead) for _, e in hit)
    return {"blackholed_s": round(sum(lengths), 3),
            "longest_s": round(max(lengths, default=0.0), 3), "resumed": resumed}


def probe_argv(dst_ip: str, interval_s: float, seconds: float) -> list[str]:
    """A ping every `interval_s` for `seconds`, each reply printed with its arrival time
    (-D): the probe whose missing replies time a failure at the network's own speed."""
    return ["ping", "-n", "-D", "-i", f"{interval_s:.4f}", "-w", f"{seconds:.0f}",
            "-W", "1", dst_ip]


def parse_probe(text: str) -> list[tuple[int, float]]:
    """(icmp_seq, arrival time) of every reply in `ping -D` output."""
    out = []
    for line in text.splitlines():
        if "icmp_seq=" not in line or not line.startswith("["):
            continue
        try:
            t = float(line[1:line.index("]")])
            seq = int(line.split("icmp_seq=")[1].split()[0])
        except (ValueError, IndexError):
            continue
        out.append((seq, t))
    return sorted(out)


def probe_outage(replies: list[tuple[int, float]], interval_s: float, fault_t: float,
                 min_lost: int = 2, before_s: float = 0.5, after_s: float = 1.0) -> float:
    """How long the path of a probe was broken by a failure at `fault_t` (wall clock): the
    longest run of missing replies between two that arrived from `before_s` before to
    `after_s` after it (arrival times lag the sending by the queues' delay, and what was
    queued on a port that goes down is lost with it), in probes times the interval. A run
    shorter than `min_lost` probes is not counted (one probe dropped by a full queue is
    congestion, not the failure); 0.0 if the failure broke nothing on this path."""
    longest = 0
    for (seq_a, t_a), (seq_b, t_b) in zip(replies, replies[1:]):
        lost = seq_b - seq_a - 1
        if lost >= min_lost and t_b >= fault_t - before_s and t_a <= fault_t + after_s:
            longest = max(longest, lost)
    return round(longest * interval_s, 4)


def parse_finite(f: Flow, text: str) -> FlowResult:
    """A finite flow's completion time from the reader's JSON (one round)."""
    try:
        seconds = float(json.loads(text)["round_s"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return FlowResult(src=f.src, dst=f.dst, goodput_mbps=0.0, sent_mbps=0.0, retransmits=0,
                          max_cwnd_bytes=0, sender_cc="", receiver_cc="",
                          error=f"finite flow did not finish: {text[-200:]!r}")
    rate = (f.nbytes or 0) * 8 / seconds / 1e6 if seconds > 0 else 0.0
    return FlowResult(src=f.src, dst=f.dst, goodput_mbps=rate, sent_mbps=rate, retransmits=0,
                      max_cwnd_bytes=0, sender_cc="", receiver_cc="", seconds=seconds)


def assign_ports(pairs: list[tuple[str, str]], duration_s: float, omit_s: float,
                 nbytes: int | None = None, interval_s: float | None = None) -> list[Flow]:
    """One flow per pair, each receiver's servers on distinct ports (finite flows of
    `nbytes` when given; the receiver's goodput every `interval_s` when given)."""
    used: dict[str, int] = {}
    flows = []
    for src, dst in pairs:
        port = BASE_PORT + used.get(dst, 0)
        used[dst] = used.get(dst, 0) + 1
        flows.append(Flow(src=src, dst=dst, duration_s=duration_s, omit_s=omit_s, port=port,
                          nbytes=nbytes, interval_s=interval_s))
    return flows


Conn = tuple[str, str, int, int]  # a TCP connection: (src ip, dst ip, src port, dst port)


def crosses(conns: set[Conn] | list[Conn], conn: Conn) -> bool:
    """Whether the connection `conn` is among `conns` (seen on a link:
    measure/linkflows.py), in either direction (data or ACKs)."""
    a, b, sp, dp = conn
    return any(c == (a, b, sp, dp) or c == (b, a, dp, sp) for c in conns)


def carried_nothing(results: list[FlowResult]) -> str | None:
    """What a set of flows says about a broken fabric: the flows that carried no byte (no
    goodput, no completion), counted and the first named with its error; None when every
    flow carried something."""
    dead = [r for r in results if r.goodput_mbps <= 0 and r.seconds <= 0]
    if not dead:
        return None
    first = dead[0]
    return (f"{len(dead)} of {len(results)} flows carried nothing ({first.src}->{first.dst}: "
            f"{first.error or '0 Mb/s'})")
