"""The RAG pipeline as an HTTP service: Starlette + uvicorn + ``LatencyMiddleware``.

``POST /rag`` (or GET) runs the pipeline of ``rag_pipeline.py``; its stages nest
under the HTTP request because the middleware's tracker *is* the pipeline's
tracker. ``/metrics`` serves the Prometheus text (per-route histograms, live
percentiles, stage budgets' raw numbers, SLOs, burn rates, Little's law);
``/budget`` answers the budget table as Markdown.

Run: ``python examples/instrument/service.py --port 8000`` (needs
``tailwise[server]``), then e.g. ``tailwise run http://127.0.0.1:8000/rag
--rate 20/s --duration 20s`` and ``curl 127.0.0.1:8000/metrics``.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import uvicorn
from rag_pipeline import make_tracker, stages  # same folder: run as a script
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tailwise.instrument import LatencyMiddleware, exposition
from tailwise.instrument.promtext import CONTENT_TYPE

tracker = make_tracker()
tracker.burn_monitor("latency<=300ms@99%")  # the SRE workbook's 1h/5m, 6h/30m, 3d/6h rules
rng = random.Random(0)


async def rag(request: Request) -> Response:
    tokens = await stages(tracker, random.Random(rng.random()))
    return JSONResponse({"answer": "...", "tokens": tokens})


async def metrics(request: Request) -> Response:
    return Response(exposition(app), media_type=CONTENT_TYPE)


async def budget(request: Request) -> Response:
    return PlainTextResponse(tracker.budget().markdown() + "\n")


def build() -> Any:
    routes = [
        Route("/rag", rag, methods=["GET", "POST"]),
        Route("/metrics", metrics),
        Route("/budget", budget),
    ]
    return LatencyMiddleware(Starlette(routes=routes), tracker, skip_paths=("/metrics", "/budget"))


app = build()

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--port", type=int, default=8000)
    a = ap.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")
