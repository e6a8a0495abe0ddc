"""The live view in a real browser: headless Chromium from Debian's packages,
driven by Selenium through Debian's ChromeDriver, loads the page of `testbed run --live`
during a short PFC run, sees link loads change and a paused port drawn as paused, and
saves a screenshot; `testbed view` replays the same run with its slider; a port already in
use is refused before anything is created."""
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from testbed.workloads.launch import free_port

REPO = Path(__file__).resolve().parents[2]
SPEC = """name: it-view
topology: {kind: dumbbell}
experiments:
  - type: pfc_victim
    phases: [pfc]
    duration_s: 8
    omit_s: 2
"""
LOADS = "return [...document.querySelectorAll('line.link')].map(l => +l.dataset.load)"
PAUSED = "return [...document.querySelectorAll('circle.port[data-paused=\"1\"]')]" \
         ".map(c => c.dataset.port)"


@pytest.fixture
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1500,800",
                f"--user-data-dir={tempfile.mkdtemp(prefix='it-view-')}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


def test_live_view_and_replay_in_headless_chromium(tmp_path, browser):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out, port = tmp_path / "out", free_port()
    run = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                            str(out), "--live", "--live-port", str(port)], cwd=REPO,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, run)
        # the server listens on loopback only
        listening = subprocess.run(["ss", "-H", "-ltn", f"sport = :{port}"],
                                   capture_output=True, text=True).stdout.split()
        assert listening[3] == f"127.0.0.1:{port}", listening
        browser.get(f"http://127.0.0.1:{port}/")
        loads: list[list[float]] = []
        paused_seen: set[str] = set()
        shot = tmp_path / "live.png"
        t0, frames0 = time.time(), None
        while run.poll() is None and time.time() - t0 < 120:
            frames = int(browser.execute_script("return document.body.dataset.frames || 0"))
            if frames:
                frames0 = frames0 or (frames, time.time())
                loads.append(browser.execute_script(LOADS))
                paused = browser.execute_script(PAUSED)
                paused_seen |= set(paused)
                if paused and max(loads[-1]) > 0.3 and not shot.exists():
                    browser.save_screenshot(str(shot))
            time.sleep(0.5)
        frames1 = (int(browser.execute_script("return document.body.dataset.frames || 0")),
                   time.time())
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(30)
    assert run.returncode == 0, err[-2000:]
    assert f"live view: http://127.0.0.1:{port}/" in err
    # updated at least twice a second (4 frames a second are sent)
    assert frames0 is not None
    rate = (frames1[0] - frames0[0]) / (frames1[1] - frames0[1])
    assert rate >= 2, rate
    # link loads change: a link was near its rate, and the loads were not the same throughout
    assert max(max(s) for s in loads) > 0.5 and len({tuple(s) for s in loads}) > 2
    # the uplink PFC stops (sp1 toward the incast's leaf) is drawn as paused
    assert "sp1-eth1" in paused_seen, paused_seen
    assert shot.exists() and shot.stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok"
    with socket.socket() as s:  # the run's end stopped the view's server
        assert s.connect_ex(("127.0.0.1", port)) != 0

    # the same run replayed from its files, slider and all
    view_port = free_port()
    view = subprocess.Popen([sys.executable, "-m", "testbed.cli", "view", str(out),
                             "--port", str(view_port)], cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(view_port, view)
        browser.get(f"http://127.0.0.1:{view_port}/")
        deadline = time.time() + 30
        while not browser.execute_script("return document.body.dataset.replayFrames") and \
                time.time() < deadline:
            time.sleep(0.2)
        n = int(browser.execute_script("return document.body.dataset.replayFrames"))
        assert n >= 4 * 8  # 4 frames a second over the 8 s phase at least
        replay_paused, replay_max = set(), 0.0
        for i in range(0, n, 2):
            browser.execute_script("const s = document.getElementById('slider'); "
                                   f"s.value = {i}; s.dispatchEvent(new Event('input'));")
            time.sleep(0.05)
            replay_max = max(replay_max, max(browser.execute_script(LOADS)))
            replay_paused |= set(browser.execute_script(PAUSED))
            if replay_paused and replay_max > 0.5 and not (tmp_path / "replay.png").exists():
                browser.save_screenshot(str(tmp_path / "replay.png"))
        assert "sp1-eth1" in replay_paused and replay_max > 0.5
    finally:
        view.terminate()
        view.wait(30)

    # a port in use: refused with a clear message, before a results directory exists
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                               str(tmp_path / "refused"), "--live", "--live-port", str(taken)],
                              cwd=REPO, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert f"port {taken} on 127.0.0.1 is in use" in done.stderr, done.stderr
    assert not (tmp_path / "refused").exists()
