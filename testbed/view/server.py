"""The live view's server: its own process (so it never takes the run's interpreter), aiohttp
on 127.0.0.1 only, one page and a small JSON API.

    python -m testbed.view.server --live OUT_DIR --port P     (started by `--live`)
    python -m testbed.view.server --replay OUT_DIR --port P   (`testbed view OUT_DIR`)

    GET /                 the page (page.html: plain SVG and JavaScript, no build step)
    GET /api/info         {"mode": "live" | "replay", "run": name}
    GET /api/layout       the fabric up now (live) or ?phase=SLUG (replay): nodes and links
    GET /api/events       live: a frame every 0.25 s as server-sent events (EventSource)
    GET /api/replay       replay: every frame of the finished run

Live, the counters are read only while a page is connected, once per tick for all pages.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from testbed.core.system import port_free
from topologies.model import Topology

from .frames import STEP_S, replay
from .layout import layout

PAGE = Path(__file__).with_name("page.html")


class Live:
    """Frames of a running fabric, produced while at least one page listens."""

    def __init__(self, out_dir: Path):
        from .live import LiveSource  # reads sysfs, shared memory and netlink: live only
        self.source = LiveSource(out_dir)
        self.listeners: set[asyncio.Queue] = set()
        self.task: asyncio.Task | None = None
        # one thread reads the counters (netlink's client runs an event loop of its own,
        # which cannot start inside this one), so a slow read never holds a page up
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="counters")

    async def frame(self) -> dict:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.source.frame)

    async def produce(self) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while self.listeners:
            frame = await self.frame()
            for q in list(self.listeners):
                if q.qsize() < 8:  # a page that stopped reading does not pile frames up
                    q.put_nowait(frame)
            next_t += STEP_S
            await asyncio.sleep(max(0.0, next_t - loop.time()))
        self.task = None

    def listen(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        self.listeners.add(q)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.produce())
        return q


def app(out_dir: Path, mode: str) -> web.Application:
    application = web.Application()
    live = Live(out_dir) if mode == "live" else None
    replayed: dict = {}

    async def page(_: web.Request) -> web.FileResponse:
        return web.FileResponse(PAGE)

    async def info(_: web.Request) -> web.Response:
        return web.json_response({"mode": mode, "run": out_dir.name})

    async def layout_of(request: web.Request) -> web.Response:
        if live is not None:
            await live.frame()  # follows live.json
            if live.source.layout is None:
                return web.json_response({"nodes": [], "links": [], "phase": None})
            return web.json_response(live.source.layout)
        slug = request.query.get("phase", "")
        path = out_dir / "topologies" / f"{slug}.json"
        if "/" in slug or not path.exists():
            raise web.HTTPNotFound(text=f"no phase {slug!r} in {out_dir}")
        return web.json_response({**layout(Topology.from_json(path.read_text())),
                                  "phase": slug})

    async def events(request: web.Request) -> web.StreamResponse:
        if live is None:
            raise web.HTTPNotFound(text="a finished run: see /api/replay")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        q = live.listen()
        try:
            while True:
                frame = await q.get()
                await resp.write(f"data: {json.dumps(frame)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            live.listeners.discard(q)
        return resp

    async def replay_all(_: web.Request) -> web.Response:
        if mode != "replay":
            raise web.HTTPNotFound(text="a running fabric: see /api/events")
        if not replayed:
            replayed.update(await asyncio.get_running_loop().run_in_executor(
                None, replay, out_dir))
        return web.json_response({k: replayed[k] for k in ("phases", "frames")})

    application.router.add_get("/", page)
    application.router.add_get("/api/info", info)
    application.router.add_get("/api/layout", layout_of)
    application.router.add_get("/api/events", events)
    application.router.add_get("/api/replay", replay_all)
    return application


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.view.server")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--live", type=Path, metavar="OUT_DIR")
    mode.add_argument("--replay", type=Path, metavar="OUT_DIR")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    why = port_free(args.port)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    out_dir = (args.live or args.replay).resolve()
    web.run_app(app(out_dir, "live" if args.live else "replay"), host="127.0.0.1",
                port=args.port, print=None, access_log=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
