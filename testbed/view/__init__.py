"""The live view in the browser: `testbed run --live`, `testbed up --live` and
`testbed view RESULTS` serve one page on 127.0.0.1 that draws the fabric and what its links,
queues and jobs do. `layout.py` and `frames.py` are pure (a topology's drawing, a frame from
counters, a finished run's frames from its files); `live.py` reads a running fabric's
counters; `server.py` is the aiohttp process that serves the page."""
