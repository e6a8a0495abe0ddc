"""Plots drawn only from a results directory's CSV files."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def draw_all(out_dir: Path) -> list[Path]:
    metrics = out_dir / "metrics"
    plots = out_dir / "plots"
    plots.mkdir(exist_ok=True)
    made = []
    from . import qos_plots
    for name, fn in (("queue_depth.csv", queue_depth), ("link_calibration.csv", link_calibration),
                     ("permutation.csv", permutation), ("cpu.csv", cpu),
                     *qos_plots.CSV_PLOTS.items()):
        if (metrics / name).exists() and _rows(metrics / name):
            made.append(fn(_rows(metrics / name), plots))
    made += qos_plots.pfc_timelines(out_dir, plots)
    from . import training_plots
    if (metrics / "training.csv").exists() and _rows(metrics / "training.csv"):
        made += training_plots.draw(_rows(metrics / "training.csv"), plots)
        made.append(training_plots.loss_curves(_rows(metrics / "training_iterations.csv"),
                                               plots))
    return made


def queue_depth(rows: list[dict], plots: Path) -> Path:
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    t = [float(r["t_s"]) for r in rows]
    ax.plot(t, [int(r["qlen_pkts"]) for r in rows], lw=0.8)
    ax.set_ylabel("queue depth (packets)")
    ax.set_title(f"Bottleneck egress queue ({rows[0]['port']})")
    ax2.plot(t, [int(r["drops_pkts"]) for r in rows], color="tab:red", lw=0.8)
    ax2.set_ylabel("drops (packets, cumulative)")
    ax2.set_xlabel("time (s)")
    return _save(fig, plots / "queue_depth.png")


def link_calibration(rows: list[dict], plots: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    rates = [float(r["rate_mbps"]) for r in rows]
    ax.plot(rates, rates, "k--", lw=0.8, label="configured")
    ax.plot(rates, [float(r["rate_mbps"]) * float(r["tcp_payload_limit"]) for r in rows], ":",
            color="gray", label="TCP payload limit")
    ax.plot(rates, [float(r["goodput_mbps"]) for r in rows], "o-", label="measured goodput")
    ax.set_xlabel("configured link rate (Mb/s)")
    ax.set_ylabel("iperf3 goodput (Mb/s)")
    ax.legend()
    return _save(fig, plots / "link_calibration.png")


# Hedera (Al-Fares et al., NSDI 2010), k=4 Fat-Tree testbed, means over its patterns, as
# fractions of the full bisection: drawn beside a run that has the same routings. Their
# "ECMP" behaved like one spanning tree (about 0.21-0.22 on stride-4/8), closer to `single`.
HEDERA_PUBLISHED_MEANS = {"nonblocking": 0.71, "ecmp": 0.44, "hedera": 0.67}


def permutation(rows: list[dict], plots: Path) -> Path:
    patterns = list(dict.fromkeys(r["pattern"] for r in rows))  # in the order they ran
    routings = list(dict.fromkeys(r["routing"] for r in rows))
    fig, ax = plt.subplots(figsize=(min(16, max(7, 0.55 * len(patterns) * len(routings) / 2)), 4))
    width = 0.8 / len(routings)
    for i, routing in enumerate(routings):
        vals, hatches = [], []
        for p in patterns:
            sel = [r for r in rows if r["pattern"] == p and r["routing"] == routing]
            vals.append(sum(float(r["normalised_to_ideal"]) for r in sel) / len(sel)
                        if sel else 0)
            hatches.append("//" if any(r["cpu_bound"] == "True" for r in sel) else "")
        bars = ax.bar([j + i * width for j in range(len(patterns))], vals, width,
                      label=routing)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)  # hatched: CPU-bound, not faithful
        if "hedera" in routings and routing in HEDERA_PUBLISHED_MEANS:
            ax.axhline(HEDERA_PUBLISHED_MEANS[routing], ls="--", lw=0.8,
                       color=bars[0].get_facecolor(),
                       label=f"{routing}: Hedera paper's testbed mean")
    ax.set_xticks([j + width * (len(routings) - 1) / 2 for j in range(len(patterns))], patterns,
                  rotation=45 if len(patterns) > 4 else 0, ha="right" if len(patterns) > 4
                  else "center", fontsize=8)
    ax.set_ylabel("aggregate throughput / ideal")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, plots / "permutation.png")


def cpu(rows: list[dict], plots: Path) -> Path:
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    t = [float(r["t_s"]) for r in rows]
    ax.plot(t, [float(r["machine_busy_fraction"]) for r in rows], label="machine (all cores)")
    ax.plot(t, [float(r["ovs_thread_core_fraction"]) for r in rows],
            label="OVS forwarding thread (one core)")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("CPU busy fraction")
    ax.legend(fontsize=8)
    ax2.plot(t, [int(r["ovs_rx_backlog_bytes"]) / 1e3 for r in rows], color="tab:red")
    ax2.set_ylabel("waiting in OVS (kB)")
    ax2.set_xlabel("time (s)")
    ax2.set_title("packets OVS has not forwarded yet (its receive sockets)", fontsize=9)
    return _save(fig, plots / "cpu.png")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
