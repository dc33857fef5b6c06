"""Pure ASGI middleware: per-route latency, in-flight requests, Little's law, first-chunk time.

::

    app = LatencyMiddleware(starlette_app, slos=["latency<=200ms@99%"])

Works for any ASGI app (Starlette, FastAPI, or bare); no import of either.
For each HTTP request it records, on the middleware's clock:

* latency, from the call to the moment the last body chunk was handed to the
  server (background tasks that run after the response do not count); into
  the app-wide tracker (``middleware.tracker``, whose request scope is open
  while the app runs, so ``tracker.stage(...)`` in an endpoint nests under it)
  and into the route's own tracker;
* time to first body chunk, for streaming responses (``more_body``), per route;
* the number in flight, integrated over time per bucket, so the window's
  time-averaged L can be set beside lambda x W from the same window: a live
  Little's-law check (:meth:`LatencyMiddleware.littles_law`).

A request fails (for goodput and error rate) on status >= 400, an exception,
or a response that never finished. The route is Starlette's route template
(``/items/{id}``) when there is one, else the raw path, up to ``max_routes``
distinct routes (then ``(other)``): labels must not grow without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailwise.clock import now_ns
from tailwise.instrument.tracker import Duration, LatencyTracker
from tailwise.instrument.window import Clock

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

UNMATCHED = "(unmatched)"
OTHER = "(other)"


class InFlight:
    """Requests in flight, and their time integral per bucket (request-ns per slot)."""

    def __init__(self, bucket_ns: int, n_buckets: int, clock: Clock) -> None:
        self.level = 0
        self._bucket_ns, self._n_buckets, self._clock = bucket_ns, n_buckets, clock
        self._last_ns = clock()
        self._area: dict[int, int] = {}
        self._lock = threading.Lock()

    def change(self, delta: int, at_ns: int) -> None:
        with self._lock:
            self._advance(at_ns)
            self.level += delta

    def _advance(self, at_ns: int) -> None:
        """Add ``level x elapsed`` to the slots between the last change and ``at_ns``."""
        span_ns = self._bucket_ns * (self._n_buckets + 1)
        last = max(self._last_ns, at_ns - span_ns)  # older slots are out of every window
        if self.level and at_ns > last:
            while last < at_ns:
                slot = last // self._bucket_ns
                seg_end = min((slot + 1) * self._bucket_ns, at_ns)
                self._area[slot] = self._area.get(slot, 0) + self.level * (seg_end - last)
                last = seg_end
            oldest = at_ns // self._bucket_ns - self._n_buckets - 1
            for old in [s for s in self._area if s < oldest]:
                del self._area[old]
        self._last_ns = max(self._last_ns, at_ns)

    def mean(self, start_ns: int, end_ns: int) -> float:
        """Time-averaged requests in flight over ``[start_ns, end_ns]`` (slot-aligned start)."""
        with self._lock:
            self._advance(end_ns)
            first = start_ns // self._bucket_ns
            area = sum(a for slot, a in self._area.items() if slot >= first)
        return area / (end_ns - start_ns) if end_ns > start_ns else 0.0


@dataclass
class RouteStats:
    latency: LatencyTracker
    first_chunk: LatencyTracker  # streaming responses only


@dataclass
class _Exchange:
    status: int = 0
    first_body_ns: int = -1
    done_ns: int = -1
    streaming: bool = False


class LatencyMiddleware:
    """Wrap an ASGI app; read ``tracker``, ``routes``, ``in_flight`` and :meth:`littles_law`."""

    def __init__(
        self,
        app: ASGIApp,
        tracker: LatencyTracker | None = None,
        *,
        slos: Sequence[str] = (),
        window: Duration = "60s",
        bucket: Duration = "1s",
        skip_paths: Sequence[str] = ("/metrics",),
        max_routes: int = 100,
        clock: Clock = now_ns,
    ) -> None:
        self.app = app
        self.tracker = tracker or LatencyTracker(
            "http", window=window, bucket=bucket, slos=slos, clock=clock
        )
        self.clock = self.tracker.clock
        self.skip_paths = frozenset(skip_paths)
        self.max_routes = max_routes
        self.routes: dict[str, RouteStats] = {}
        self._routes_lock = threading.Lock()
        t = self.tracker
        self.in_flight = InFlight(t.bucket_ns, t.n_buckets, self.clock)

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.skip_paths:
            await self.app(scope, receive, send)
            return
        ex = _Exchange()
        clock = self.clock

        async def watch(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                ex.status = int(message["status"])
            elif kind == "http.response.body":
                more = bool(message.get("more_body", False))
                if ex.first_body_ns < 0 and (message.get("body") or not more):
                    ex.first_body_ns, ex.streaming = clock(), more
                await send(message)
                if not more:
                    ex.done_ns = clock()
                return
            await send(message)

        start_ns = clock()
        self.in_flight.change(+1, start_ns)
        req = self.tracker.request()
        try:
            with req:
                req.start_ns = start_ns
                try:
                    await self.app(scope, receive, watch)
                finally:
                    self._finish(scope, ex, req)
        finally:
            self.in_flight.change(-1, req.end_ns if req.end_ns is not None else clock())

    def _finish(self, scope: MutableMapping[str, Any], ex: _Exchange, req: Any) -> None:
        """Close the request's books: its end, outcome, route and span attributes."""
        end_ns = ex.done_ns if ex.done_ns >= 0 else self.clock()
        ok = ex.done_ns >= 0 and 0 < ex.status < 400
        route = self._route(scope, ex.status)
        req.end_ns, req.ok = end_ns, ok
        req.attributes.update(
            {
                "http.route": route,
                "http.request.method": scope.get("method", ""),
                "http.response.status_code": ex.status,
            }
        )
        stats = self._route_stats(route)
        stats.latency.record(max(end_ns - req.start_ns, 0), ok)
        if ex.streaming and ex.first_body_ns >= 0:
            stats.first_chunk.record(max(ex.first_body_ns - req.start_ns, 0), True)

    def _route(self, scope: MutableMapping[str, Any], status: int) -> str:
        template = getattr(scope.get("route"), "path", None)
        if isinstance(template, str):
            return template
        if status == 404:
            return UNMATCHED
        path = str(scope.get("path", ""))
        return path if path in self.routes or len(self.routes) < self.max_routes else OTHER

    def _route_stats(self, route: str) -> RouteStats:
        stats = self.routes.get(route)
        if stats is None:
            with self._routes_lock:
                stats = self.routes.get(route)
                if stats is None:
                    stats = RouteStats(self._tracker_like(route), self._tracker_like(route))
                    self.routes[route] = stats
        return stats

    def _tracker_like(self, name: str) -> LatencyTracker:
        t = self.tracker
        return LatencyTracker(
            name,
            window=t.n_buckets * t.bucket_ns / 1e9,
            bucket=t.bucket_ns / 1e9,
            slos=[s.spec for s in t.slos],
            clock=t.clock,
        )

    def littles_law(self, window: Duration | None = None) -> dict[str, float]:
        """L (time-averaged in flight) vs. lambda x W over one window; keys as summary.json's."""
        stats = self.tracker.stats(window)
        l_measured = self.in_flight.mean(stats.start_ns, stats.end_ns)
        lam = stats.throughput_rps
        w_s = stats.mean_ms / 1e3
        lw = lam * w_s
        top = max(l_measured, lw)
        return {
            "l_measured": l_measured,
            "lambda_w": lw,
            "rel_gap": abs(l_measured - lw) / top if top > 0 else 0.0,
            "lambda_rps": lam,
            "w_ms": w_s * 1e3,
            "in_flight": float(self.in_flight.level),
        }
