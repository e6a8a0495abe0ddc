"""RDMA congestion controls' parameters, kept in their papers' units at the papers' link
rate and scaled to the emulated link.

A scaled-down fabric keeps an algorithm's dynamics only if its timers and byte counters
stay the same number of packet times: a timer of T at the reference rate C_ref becomes
T * C_ref / C at the emulated rate C (same MTU), a byte counter keeps its bytes (the same
packets), and a rate step keeps its fraction of the line rate. `scaled()` does that and
the run records both sets of values. HPCC's one time, the base round trip T, is the
emulated path's own (measured, not scaled): it is what its packets take.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

ROCE_MTUS = (256, 512, 1024, 2048, 4096)   # the path MTUs RoCE allows (payload bytes)
# a RoCEv2 packet's headers inside the IP MTU: IPv4 20, UDP 8, BTH 12, ICRC 4
ROCE_OVERHEAD = 20 + 8 + 12 + 4
# and on the wire, where the switches' rates count it: Ethernet 14 more
WIRE_OVERHEAD = 14 + ROCE_OVERHEAD
# TCP's segments of the same payload, compared on the same flows: IPv4 20, TCP 20 and its
# timestamps option 12 (wire: Ethernet 14 more)
TCP_OVERHEAD = 20 + 20 + 12
# HPCC's telemetry room on every data packet (testbed/dataplane/bpf/int_wire.h)
INT_LEN = 2 + 5 * 8


def wire_bytes(size_bytes: int, mtu: int, headers: int = ROCE_OVERHEAD) -> int:
    """What a WRITE of `size_bytes` puts on each link: its payload and every packet's
    headers (`headers` inside the IP MTU, and Ethernet's)."""
    return size_bytes + -(-size_bytes // mtu) * (14 + headers)


def ideal_fct_us(size_bytes: int, mtu: int, bottleneck_mbps: float,
                 base_rtt_s: float | None, headers: int = ROCE_OVERHEAD) -> float:
    """A WRITE's completion time alone on its path: its bytes on the wire at the slowest
    link, and one base round trip (the last packet out and its ACK back; HPCC's ideal).
    A TCP flow of the same payload per segment: `headers` TCP_OVERHEAD."""
    return (wire_bytes(size_bytes, mtu, headers) * 8 / bottleneck_mbps
            + (base_rtt_s or 0.0) * 1e6)


class PaperParams:
    """A congestion control's parameters in its paper's units at `ref_gbps`: scaled to an
    emulated link by packet times (`scaled`, each class's own), recorded both ways."""
    ref_gbps: float

    def time_factor(self, link_mbps: float) -> float:
        """One reference packet time, in the emulated link's (same packet size)."""
        return self.ref_gbps * 1000 / link_mbps

    def rate_factor(self, link_mbps: float) -> float:
        """The emulated line rate as a fraction of the reference one."""
        return link_mbps / (self.ref_gbps * 1000)

    def scaled(self, link_mbps: float) -> dict[str, float]:
        raise NotImplementedError

    def record(self, link_mbps: float) -> dict:
        """Both sets of values, for the results."""
        return {"paper": asdict(self), "at_link_mbps": link_mbps,  # type: ignore[call-overload]
                "scaled": self.scaled(link_mbps)}

    def positive(self, path: str, names: tuple[str, ...]) -> None:
        for name in names:
            if not getattr(self, name) > 0:
                raise ValueError(f"{path}.{name}: must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Dcqcn(PaperParams):
    """DCQCN (Zhu et al., SIGCOMM'15) at its reference 40 Gb/s, as the paper and its
    authors' ns-3 code (bobzhuyb/ns3-rdma) give them: g = 1/256, the alpha timer K = 55 us,
    the increase timer T = 55 us, the byte counter B = 10 MB, F = 5 fast-recovery steps,
    R_AI = 40 Mb/s; R_HAI = 200 Mb/s and the 100 Mb/s minimum rate are that code's
    (the paper's hyper-increase step was not at hand). The receiver's CNP interval,
    50 us, is the engine's (`cnp_interval_us`)."""
    ref_gbps: float = 40.0
    g: float = 1 / 256
    alpha_us: float = 55.0
    timer_us: float = 55.0
    byte_counter_bytes: int = 10_000_000
    f: int = 5
    rai_mbps: float = 40.0
    rhai_mbps: float = 200.0
    min_mbps: float = 100.0
    cnp_interval_us: float = 50.0

    def check(self, path: str = "dcqcn") -> None:
        if not 0 < self.g <= 1:
            raise ValueError(f"{path}.g: in (0, 1], got {self.g}")
        self.positive(path, ("ref_gbps", "alpha_us", "timer_us", "rai_mbps", "rhai_mbps",
                             "min_mbps", "cnp_interval_us"))
        if self.byte_counter_bytes < 0 or self.f < 1:
            raise ValueError(f"{path}: byte_counter_bytes >= 0 and f >= 1 "
                             f"(got {self.byte_counter_bytes}, {self.f})")
        if 0 < self.byte_counter_bytes < 1024:
            raise ValueError(f"{path}.byte_counter_bytes: 0 (none) or at least 1024 "
                             f"(got {self.byte_counter_bytes})")

    def scaled(self, link_mbps: float) -> dict[str, float]:
        """The engine's values at `link_mbps`: times in ns (and the CNP interval in us),
        rates in b/s."""
        time, rate = self.time_factor(link_mbps), self.rate_factor(link_mbps)
        return {"g": self.g, "alpha_ns": max(1, round(self.alpha_us * 1000 * time)),
                "timer_ns": max(1, round(self.timer_us * 1000 * time)),
                "byte_counter": self.byte_counter_bytes, "f": self.f,
                "rai_bps": self.rai_mbps * 1e6 * rate, "rhai_bps": self.rhai_mbps * 1e6 * rate,
                "min_bps": self.min_mbps * 1e6 * rate,
                "cnp_interval_us": max(1, round(self.cnp_interval_us * time))}



def dcqcn_line(scaled: dict[str, float]) -> str:
    """The engine's config line for DCQCN (engine.c)."""
    s = scaled
    return (f"dcqcn {s['g']!r} {int(s['alpha_ns'])} {int(s['timer_ns'])} "
            f"{int(s['byte_counter'])} {int(s['f'])} {s['rai_bps']!r} {s['rhai_bps']!r} "
            f"{s['min_bps']!r}")


@dataclass(frozen=True)
class Timely(PaperParams):
    """TIMELY (Mittal et al., SIGCOMM'15) at its reference 10 Gb/s, as the paper's
    Algorithm 1 and the HPCC code's defaults give them: T_low 50 us, T_high 500 us, the
    minimum RTT that normalises the gradient 20 us, the RTT-difference EWMA weight 0.875,
    beta 0.8, the additive step delta 10 Mb/s, hyper-active increase (5 delta) after 5
    increases in a row; the minimum rate, 0.1% of the line, is the HPCC code's."""
    ref_gbps: float = 10.0
    t_low_us: float = 50.0
    t_high_us: float = 500.0
    min_rtt_us: float = 20.0
    alpha: float = 0.875
    beta: float = 0.8
    delta_mbps: float = 10.0
    hai_n: int = 5
    min_mbps: float = 10.0

    def check(self, path: str = "timely") -> None:
        if not 0 < self.alpha <= 1 or not 0 < self.beta <= 1:
            raise ValueError(f"{path}: alpha and beta in (0, 1] (got {self.alpha}, "
                             f"{self.beta})")
        self.positive(path, ("ref_gbps", "t_low_us", "t_high_us", "min_rtt_us", "delta_mbps",
                             "min_mbps"))
        if self.t_low_us >= self.t_high_us:
            raise ValueError(f"{path}.t_low_us: below t_high_us (got {self.t_low_us} >= "
                             f"{self.t_high_us})")
        if self.hai_n < 1:
            raise ValueError(f"{path}.hai_n: at least 1, got {self.hai_n}")

    def scaled(self, link_mbps: float) -> dict[str, float]:
        """The engine's values at `link_mbps`: times in ns, rates in b/s."""
        time, rate = self.time_factor(link_mbps), self.rate_factor(link_mbps)
        return {"t_low_ns": round(self.t_low_us * 1000 * time),
                "t_high_ns": round(self.t_high_us * 1000 * time),
                "min_rtt_ns": max(1, round(self.min_rtt_us * 1000 * time)),
                "alpha": self.alpha, "beta": self.beta,
                "delta_bps": self.delta_mbps * 1e6 * rate, "hai_n": self.hai_n,
                "min_bps": self.min_mbps * 1e6 * rate}



@dataclass(frozen=True)
class Hpcc(PaperParams):
    """HPCC (Li et al., SIGCOMM'19) at its reference 100 Gb/s: the target utilisation eta
    0.95 and maxStage 5 (the paper's), the additive step R_AI 40 Mb/s and the minimum rate
    100 Mb/s (the HPCC code's run.py and config at 100 Gb/s). Its base round trip T is the
    emulated path's (`base_rtt_us` of the engine), not a parameter."""
    ref_gbps: float = 100.0
    eta: float = 0.95
    max_stage: int = 5
    rai_mbps: float = 40.0
    min_mbps: float = 100.0

    def check(self, path: str = "hpcc") -> None:
        if not 0 < self.eta <= 1:
            raise ValueError(f"{path}.eta: in (0, 1], got {self.eta}")
        if self.max_stage < 0:
            raise ValueError(f"{path}.max_stage: >= 0, got {self.max_stage}")
        self.positive(path, ("ref_gbps", "rai_mbps", "min_mbps"))

    def scaled(self, link_mbps: float) -> dict[str, float]:
        rate = self.rate_factor(link_mbps)
        return {"eta": self.eta, "max_stage": self.max_stage,
                "rai_bps": self.rai_mbps * 1e6 * rate, "min_bps": self.min_mbps * 1e6 * rate}



@dataclass(frozen=True)
class Nscc(PaperParams):
    """A UEC-like NSCC (the Ultra Ethernet transport's network-signal-based congestion
    control) as the UEC's htsim model runs it (ultraethernet/uet-htsim, uec.cpp), at its
    reference network: 100 Gb/s, a 12 us round trip, 4086-byte packets. Per acknowledged
    byte: fair increase 5 packets per window, proportional increase 4 packets per window
    per round trip of delay below the target, eta 0.15 packet per round trip, fast
    increase 0.25 once a window was acknowledged under 1 us of delay (1/12 of the round
    trip: applied as that share of the emulated T); a mark with the delay
    above target cuts by gamma 0.8 of the delay's excess (at most halving, once per round
    trip), the delay's EWMA weighing 0.0125; quick adapt when the delay passed 4 targets
    (or a loss came) and under 1/2^3 of the most window was acknowledged in a round trip
    plus target; the window at most 1.5 BDP, the target one round trip (the model's without
    trimming), its adjustments every 8 packets. Applied as shares of the reference BDP and
    round trip to the emulated network's (its link rate and measured T)."""
    ref_gbps: float = 100.0
    ref_rtt_us: float = 12.0
    ref_mss_bytes: float = 4086.0
    fi_pkts: float = 5.0
    eta_pkts: float = 0.15
    alpha_pkts: float = 4.0
    fi_scale: float = 0.25
    gamma: float = 0.8
    md_floor: float = 0.5
    delay_alpha: float = 0.0125
    fast_us: float = 1.0
    qa_delay_targets: float = 4.0
    qa_gate: int = 3
    maxwnd_bdp: float = 1.5
    target_rtts: float = 1.0
    fulfil_pkts: float = 8.0

    def check(self, path: str = "nscc") -> None:
        for name in ("gamma", "md_floor", "delay_alpha"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{path}.{name}: in (0, 1], got {getattr(self, name)}")
        self.positive(path, ("ref_gbps", "ref_rtt_us", "ref_mss_bytes", "maxwnd_bdp",
                             "target_rtts", "fulfil_pkts"))
        for name in ("fi_pkts", "eta_pkts", "alpha_pkts", "fi_scale", "fast_us",
                     "qa_delay_targets"):
            if getattr(self, name) < 0:
                raise ValueError(f"{path}.{name}: >= 0, got {getattr(self, name)}")
        if not 0 <= self.qa_gate <= 16:
            raise ValueError(f"{path}.qa_gate: 0..16, got {self.qa_gate}")

    def scaled(self, link_mbps: float) -> dict[str, float]:
        """Shares of the BDP and of the round trip (the same at every link rate: the
        engine applies them to its own)."""
        bdp = self.ref_gbps * 1e9 * self.ref_rtt_us * 1e-6 / 8
        return {"fi_bdp": self.fi_pkts * self.ref_mss_bytes / bdp,
                "eta_bdp": self.eta_pkts * self.ref_mss_bytes / bdp,
                "alpha_bdp": self.alpha_pkts * self.ref_mss_bytes / bdp,
                "fi_scale": self.fi_scale, "gamma": self.gamma, "md_floor": self.md_floor,
                "delay_alpha": self.delay_alpha, "fast_rtt": self.fast_us / self.ref_rtt_us,
                "qa_delay_targets": self.qa_delay_targets, "qa_gate": self.qa_gate,
                "maxwnd_bdp": self.maxwnd_bdp, "target_rtt": self.target_rtts,
                "fulfil_pkts": self.fulfil_pkts}


def nscc_line(s: dict[str, float], base_rtt_ns: int) -> str:
    """The engine's config line for NSCC (engine.c)."""
    return (f"nscc {s['fi_bdp']!r} {s['eta_bdp']!r} {s['alpha_bdp']!r} {s['fi_scale']!r} "
            f"{s['gamma']!r} {s['md_floor']!r} {s['delay_alpha']!r} {s['fast_rtt']!r} "
            f"{s['qa_delay_targets']!r} {int(s['qa_gate'])} {s['maxwnd_bdp']!r} "
            f"{s['target_rtt']!r} {s['fulfil_pkts']!r} {base_rtt_ns}")


def timely_line(s: dict[str, float]) -> str:
    """The engine's config line for TIMELY (engine.c)."""
    return (f"timely {int(s['t_low_ns'])} {int(s['t_high_ns'])} {int(s['min_rtt_ns'])} "
            f"{s['alpha']!r} {s['beta']!r} {s['delta_bps']!r} {int(s['hai_n'])} "
            f"{s['min_bps']!r}")


def hpcc_line(s: dict[str, float], base_rtt_ns: int) -> str:
    """The engine's config line for HPCC (engine.c)."""
    return (f"hpcc {s['eta']!r} {int(s['max_stage'])} {s['rai_bps']!r} {s['min_bps']!r} "
            f"{base_rtt_ns}")


@dataclass(frozen=True)
class Irn(PaperParams):
    """IRN's loss recovery (Mittal et al., SIGCOMM'18) at its reference 40 Gb/s: RTO_low
    100 us while at most N = 3 packets are in flight, else RTO_high 320 us (the paper's,
    as the conweave ns-3 code runs them); the in-flight cap (BDP-FC) is the longest path's
    bandwidth-delay product in packets, from the emulated base round trip."""
    ref_gbps: float = 40.0
    rto_low_us: float = 100.0
    rto_high_us: float = 320.0
    n: int = 3

    def check(self, path: str = "irn") -> None:
        if not 0 < self.rto_low_us <= self.rto_high_us:
            raise ValueError(f"{path}: 0 < rto_low_us <= rto_high_us (got "
                             f"{self.rto_low_us}, {self.rto_high_us})")
        if self.ref_gbps <= 0 or self.n < 1:
            raise ValueError(f"{path}: ref_gbps > 0 and n >= 1 (got {self.ref_gbps}, "
                             f"{self.n})")

    def scaled(self, link_mbps: float) -> dict[str, float]:
        time = self.time_factor(link_mbps)
        return {"rto_low_us": max(1, round(self.rto_low_us * time)),
                "rto_high_us": max(1, round(self.rto_high_us * time)), "n": self.n}



USER_CC_PARAMS = 8      # user_cc_api.h


@dataclass(frozen=True)
class UserCc:
    """A user's own congestion control for the RoCE engine: a C header (`source`, a path
    from the working directory) implementing testbed/workloads/roce/user_cc_api.h,
    compiled into the engine for the run. `params` reach it in their order (at most 8), as
    written: a control that wants its timers in packet times reads the line rate and the
    base round trip it is given. `ecn`: the switches mark the RoCE class for it and the
    receivers send CNPs; `telemetry`: its data packets collect HPCC's per-hop records and
    its ACKs echo them."""
    source: str
    params: dict[str, float] = field(default_factory=dict)
    ecn: bool = True
    telemetry: bool = False

    def check(self, path: str = "user_cc") -> None:
        if not self.source.endswith(".h") or not Path(self.source).is_file():
            raise ValueError(f"{path}.source: a C header that exists (got {self.source!r}; "
                             f"paths are relative to the working directory, {Path.cwd()})")
        if len(self.params) > USER_CC_PARAMS:
            raise ValueError(f"{path}.params: at most {USER_CC_PARAMS} (got "
                             f"{len(self.params)})")

    def line(self, base_rtt_us: float) -> str:
        """The engine's config line: the base round trip, then the parameters."""
        return " ".join(["user", str(round(base_rtt_us * 1000)),
                         *(repr(float(v)) for v in self.params.values())])


def bdp_packets(base_rtt_us: float, link_mbps: float, packet_bytes: int) -> int:
    """A bandwidth-delay product in whole packets (at least one)."""
    return max(1, -(-round(base_rtt_us * link_mbps / 8) // packet_bytes))


MAX_SPRAY_ENTROPIES = 256   # source ports a sprayed QP cycles through (engine.c)
IRN_WIN = 4096              # sequences IRN tracks beyond a QP's oldest unacknowledged (engine.c)


def spray_reorder(reorder_pkts: int, bdp_pkts: int) -> int:
    """The reordering a sprayed QP's IRN waits out before it takes a hole as lost: the
    spec's, but below IRN's in-flight cap of `bdp_pkts` (nothing is acknowledged further
    beyond a hole than the cap reaches, so a larger threshold would leave every loss to
    the timer)."""
    return min(reorder_pkts, bdp_pkts - 1)


@dataclass(frozen=True)
class DcqcnPlus(PaperParams):
    """DCQCN+ (Gao et al., ICNP'18) as a third-party reimplementation in the HPCC code base
    runs it (ParaleonPlus, scheme dcqcn_plus; the paper's own table was not at hand): the
    receiver visits its congested flows one every scan = 1 us, a CNP at most every 45 us
    per flow, forgetting a flow 200 us after its last mark; the sender's period T is at
    least 50 us (alpha every T, an increase every 2T), F = 5 fast-recovery steps (DCQCN's),
    g = 1/256; the minimum rate is DCQCN's (0.25% of the line). That code runs DCQCN and
    DCQCN+ with the same microseconds at one link rate; here both take DCQCN's 40 Gb/s as
    the reference, so that their timers keep that ratio in packet times."""
    ref_gbps: float = 40.0
    g: float = 1 / 256
    min_tau_us: float = 50.0
    f: int = 5
    min_share: float = 0.0025
    scan_us: float = 1.0
    min_interval_us: float = 45.0
    entry_timeout_us: float = 200.0

    def check(self, path: str = "dcqcn_plus") -> None:
        if not 0 < self.g <= 1 or not 0 < self.min_share < 1:
            raise ValueError(f"{path}: g in (0, 1] and min_share in (0, 1) (got {self.g}, "
                             f"{self.min_share})")
        self.positive(path, ("ref_gbps", "min_tau_us", "scan_us", "entry_timeout_us"))
        if self.f < 1 or self.min_interval_us < 0:
            raise ValueError(f"{path}: f >= 1 and min_interval_us >= 0")

    def scaled(self, link_mbps: float) -> dict[str, float]:
        time = self.time_factor(link_mbps)
        return {"g": self.g, "min_tau_ns": round(self.min_tau_us * 1000 * time), "f": self.f,
                "min_bps": self.min_share * link_mbps * 1e6,
                "scan_ns": max(1, round(self.scan_us * 1000 * time)),
                "min_interval_ns": round(self.min_interval_us * 1000 * time),
                "entry_timeout_ns": round(self.entry_timeout_us * 1000 * time)}


    def line(self, link_mbps: float) -> str:
        """The engine's config line (engine.c)."""
        s = self.scaled(link_mbps)
        return (f"dcqcn_plus {s['g']!r} {int(s['min_tau_ns'])} {int(s['f'])} "
                f"{s['min_bps']!r} {int(s['scan_ns'])} {int(s['min_interval_ns'])} "
                f"{int(s['entry_timeout_ns'])}")


def split_bytes(nbytes: int, parts: int) -> list[int]:
    """`nbytes` in `parts` as even as whole bytes go (the first ones a byte more)."""
    return [nbytes // parts + (k < nbytes % parts) for k in range(parts)]
