"""A loopback DCGM exporter for the tests: the fixture text of a real one, with a known power.

Serves ``tests/fixtures/gpu/dcgm_exporter.txt`` over HTTP/1.1 from an asyncio
server in a thread of the test process. Each scrape rewrites GPU ``i``'s
``DCGM_FI_DEV_POWER_USAGE`` to ``watts[i]`` and its
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ) to the fixture's value plus
``watts[i] x seconds since the server started x 1000``: a constant power whose
energy over any span the test can compute by hand. ``body`` replaces the whole
answer (hostile exporters); ``energy=False`` leaves the counter out, and
``reset_after`` scrapes makes the counter drop to zero (a driver reload);
``model_name`` replaces the GPUs' ``modelName`` label (escaped as the format wants).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "dcgm_exporter.txt"
_LINE = re.compile(r'^(DCGM_FI_DEV_\w+)\{gpu="(\d+)".*\} (\S+)$')


class Exporter:
    def __init__(
        self,
        watts: tuple[float, ...] = (300.0, 100.0),
        *,
        body: bytes | Callable[[], bytes] | None = None,
        energy: bool = True,
        reset_after: int | None = None,
        model_name: str | None = None,
    ) -> None:
        self.watts = watts
        self.body = body
        self.energy = energy
        self.reset_after = reset_after
        self.model_name = model_name
        self.scrapes = 0
        self.started = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    # -- the answer ----------------------------------------------------------------

    def text(self, now: float) -> bytes:
        self.scrapes += 1
        if self.body is not None:
            return self.body() if callable(self.body) else self.body
        lines = []
        for line in FIXTURE.read_text().splitlines():
            m = _LINE.match(line)
            if m and m.group(1) == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                if not self.energy:
                    continue
                gpu = int(m.group(2))
                reset = self.reset_after is not None and self.scrapes > self.reset_after
                base = 0.0 if reset else float(m.group(3))
                mj = base + self.watts[gpu] * (now - self.started) * 1000.0
                line = line[: m.start(3)] + str(int(mj))
            elif m and m.group(1) == "DCGM_FI_DEV_POWER_USAGE":
                line = line[: m.start(3)] + f"{self.watts[int(m.group(2))]:.6f}"
            lines.append(line)
        text = "\n".join(lines) + "\n"
        if self.model_name is not None:
            quoted = self.model_name.replace("\\", "\\\\").replace('"', '\\"')
            text = text.replace('modelName="NVIDIA H100 80GB HBM3"', f'modelName="{quoted}"')
        return text.encode()

    # -- the server ----------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path != b"/metrics":
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                else:
                    body = self.text(time.monotonic())
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            loop.run_until_complete(main())

    def __enter__(self) -> Exporter:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        if loop is not None:
            for task in asyncio.all_tasks(loop):
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"
