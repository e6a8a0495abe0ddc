"""Two RoCE engines on loopback, as the engine's tests run them: B serves, A writes."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from testbed.workloads import roce


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(tmp_path: Path, binary: Path, a: roce.Engine, b: roce.Engine,
             timeout: float = 30) -> tuple[roce.Result, roce.Result]:
    """B started and ready, then A run to its end; both results."""
    rb = subprocess.Popen([str(binary), str(b.save(tmp_path / "b.conf")),
                           str(tmp_path / "b.json")], stdout=subprocess.PIPE, text=True)
    try:
        assert rb.stdout is not None and rb.stdout.readline().strip() == "ready"
        subprocess.run([str(binary), str(a.save(tmp_path / "a.conf")),
                        str(tmp_path / "a.json")], check=True, timeout=timeout,
                       stdout=subprocess.DEVNULL)
    finally:
        rb.terminate()
        rb.wait(timeout=10)
    return roce.read_result(tmp_path / "a.json"), roce.read_result(tmp_path / "b.json")
