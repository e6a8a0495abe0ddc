"""What the live view costs a run: the same permutation run twice on a quiet
machine, without and with `--live` and a page open in headless Chromium the whole time;
the CPU the view's server and the browser took, and each run's headroom and results.

    sudo .venv/bin/python scripts/bench_live_view.py OUTDIR

Prints a Markdown table (docs/BENCHMARKS.md, "The live view's cost").
"""
from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.workloads.launch import free_port

REPO = Path(__file__).resolve().parents[1]
SPEC = """name: live-cost
topology: {kind: fattree, params: {k: 4, rate_mbps: 20}}
links: {buffer_pkts: 100, mtu_bytes: 9000}
experiments:
  - type: permutation
    patterns: ["stride:8"]
    routings: [ecmp]
    duration_s: 20
    omit_s: 3
    repeats: 2
"""
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (those still alive)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except (OSError, IndexError, ValueError):
            continue
    return total


def with_arg(arg: str) -> list[int]:
    """Processes whose command line holds `arg` (the browser's own user-data-dir)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if arg.encode() in (proc / "cmdline").read_bytes():
                    out.append(int(proc.name))
            except OSError:
                continue
    return out


def rows(out: Path) -> list[dict]:
    with open(out / "metrics" / "permutation.csv") as fh:
        return list(csv.DictReader(fh))


def run(spec: Path, out: Path, live: bool) -> dict:
    argv = [sys.executable, "-m", "testbed.cli", "run", str(spec), "--out", str(out)]
    port = free_port()
    if live:
        argv += ["--live", "--live-port", str(port)]
    t0 = time.time()
    proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server_cpu = browser_cpu = 0.0
    driver = None
    if live:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        while proc.poll() is None:  # the view's server listens once the run has started
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        server = int(subprocess.run(["ss", "-H", "-ltnp", f"sport = :{port}"],
                                    capture_output=True, text=True).stdout
                     .split("pid=")[1].split(",")[0])
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        profile = tempfile.mkdtemp(prefix="bench-live-")
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--window-size=1500,800", f"--user-data-dir={profile}"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get(f"http://127.0.0.1:{port}/")
        browser: dict[int, float] = {}  # the browser's processes (they come and go)
        while proc.poll() is None:
            server_cpu = max(server_cpu, cpu_s([server]))
            for pid in with_arg(profile):
                browser[pid] = max(browser.get(pid, 0.0), cpu_s([pid]))
            time.sleep(1)
        browser_cpu = sum(browser.values())
        frames = int(driver.execute_script("return document.body.dataset.frames || 0"))
        driver.quit()
    else:
        frames = 0
    err = proc.communicate()[1]
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {err[-2000:]}")
    perm = rows(out)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "server_cpu_pct": 100 * server_cpu / wall,
            "browser_cpu_pct": 100 * browser_cpu / wall, "frames": frames,
            "idle": [float(r["machine_idle_mean"]) for r in perm],
            "ovs_p90": [float(r["ovs_thread_p90_core"]) for r in perm],
            "normalised": [float(r["normalised_to_ideal"]) for r in perm],
            "cpu_bound": summary["cpu_bound"]}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=False)
    spec = out / "spec.yaml"
    spec.write_text(SPEC)
    results = {"without": run(spec, out / "without", False),
               "with": run(spec, out / "with", True)}
    (out / "live_cost.json").write_text(json.dumps(results, indent=1))
    print("| | machine idle (mean per repeat) | OVS thread p90 (core) | stride:8 ECMP normalised "
          "| CPU-bound | view server CPU | browser CPU |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} --live | {' / '.join(f'{v:.0%}' for v in r['idle'])} | "
              f"{' / '.join(f'{v:.2f}' for v in r['ovs_p90'])} | "
              f"{' / '.join(f'{v:.3f}' for v in r['normalised'])} | {r['cpu_bound']} | "
              f"{r['server_cpu_pct']:.1f}% | {r['browser_cpu_pct']:.1f}% |")
    print(f"frames received by the page: {results['with']['frames']} in "
          f"{results['with']['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
