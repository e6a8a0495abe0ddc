"""The one place that imports Ryu. Everything else imports Ryu names from here, so that a
move to the maintained fork (os-ken) is a change to this file only.

Ryu 4.34 imports `eventlet.wsgi.ALREADY_HANDLED`, which eventlet removed in 0.30.3, and the
eventlet versions that still have it do not run on Python 3.11. Defining the constant before
Ryu is imported is enough for everything the testbed uses (PLATFORM.md).
"""
from __future__ import annotations

import traceback

import eventlet.wsgi

if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
    eventlet.wsgi.ALREADY_HANDLED = object()

from eventlet.hubs import trampoline  # noqa: E402
from ryu.base import app_manager  # noqa: E402
from ryu.cmd import manager  # noqa: E402
from ryu.controller import ofp_event  # noqa: E402
from ryu.controller.controller import Datapath  # noqa: E402
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # noqa: E402
from ryu.lib import hub  # noqa: E402
from ryu.lib.packet import arp, ethernet, ipv4, packet, tcp  # noqa: E402
from ryu.ofproto import nicira_ext, ofproto_v1_3, ofproto_v1_3_parser  # noqa: E402

RyuApp = app_manager.RyuApp


class BackgroundWriter:
    """Appends text to files from a real OS thread, so that a write stalled by the disk
    never stalls the controller's green threads (the PFC executor among them)."""

    def __init__(self):
        from eventlet import patcher
        self._queue = patcher.original("queue").Queue()
        thread = patcher.original("threading").Thread(target=self._run, daemon=True)
        thread.start()

    def write(self, fh, text: str) -> None:
        self._queue.put((fh, text))

    def call(self, fn) -> None:
        """`fn()` in the writer's thread, in order with the writes (a whole file written
        and renamed into place, say)."""
        self._queue.put((None, fn))

    def _run(self) -> None:
        while True:
            fh, text = self._queue.get()
            if fh is None:
                try:
                    text()
                except Exception:  # noqa: BLE001 - the next call may succeed; the log says
                    traceback.print_exc()
                continue
            fh.write(text)
            if self._queue.empty():
                fh.flush()


def wait_readable(fd: int, timeout: float | None = None) -> bool:
    """Block this green thread (not the controller) until `fd` is readable or `timeout`
    seconds have passed; True if readable."""
    try:
        trampoline(fd, read=True, timeout=timeout, timeout_exc=TimeoutError)
        return True
    except TimeoutError:
        return False

OFP_VERSION = ofproto_v1_3.OFP_VERSION

__all__ = ["CONFIG_DISPATCHER", "Datapath", "MAIN_DISPATCHER", "OFP_VERSION", "RyuApp", "arp", "ethernet",
           "hub", "ipv4", "manager", "nicira_ext", "ofp_event", "ofproto_v1_3",
           "ofproto_v1_3_parser",
           "packet", "set_ev_cls", "tcp",
           "wait_readable", "BackgroundWriter"]
