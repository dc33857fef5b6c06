"""Scrape the server's Prometheus ``/metrics`` during a run, beside the load.

A daemon thread, not a task on the engine's loop: a scrape's socket wait and
its parsing never delay a send. Its work is bounded: one GET per interval
(1 s by default, 100 ms to 60 s), a timeout under the interval, at most
:data:`MAX_BODY_BYTES` read, and only the lines of a known server's metrics
parsed (:func:`tailwise.metrics.server.read_exposition`). Each scrape is one
line of ``server_metrics.jsonl``, appended and flushed as it happens, so a
killed run keeps them; at the end the file gets run-relative times and the
summary its ``server_metrics`` section, with a timeline of the server's gauges
beside the client's TTFT and latency over the same intervals.

By default an LLM run (``--api``) scrapes its target's ``/metrics`` when the
first scrape, before the run, answers with a known server's metrics; a plain
HTTP run scrapes only a URL the user names. ``--server-metrics off`` turns it
off. The API key is never sent to the metrics URL.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailwise import credentials
from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.metrics import derive
from tailwise.metrics.server import read_exposition, summarize_server
from tailwise.records import Records
from tailwise.units import parse_duration_ns

FILE = "server_metrics.jsonl"
MAX_BODY_BYTES = 8 << 20
MIN_INTERVAL_NS = 100_000_000
MAX_INTERVAL_NS = 60_000_000_000
MAX_TIMEOUT_S = 2.0
MAX_ROWS = 100_000  # kept in memory: 27 hours at one scrape a second
TIMELINE_POINTS = 240


def rewrite_samples(path: Path, rows: list[dict[str, Any]], internal: tuple[str, ...]) -> None:
    """A sampler's file written again at the run's end: each row with ``t_s`` (run time,
    from ``t_ns``) first and its ``internal`` keys left out, scrubbed of known secrets.
    A write that fails leaves the appended file as it was (the summary still has them)."""
    lines = []
    for r in rows:
        out = {"t_s": round(r["t_ns"] / 1e9, 6)}
        out.update({k: v for k, v in r.items() if k not in internal})
        lines.append(json.dumps(out, separators=(",", ":")))
    with contextlib.suppress(OSError):
        path.write_text(credentials.scrub("\n".join(lines) + ("\n" if lines else "")))


def every(stop: threading.Event, interval_ns: int, work: Callable[[], None]) -> None:
    """Call ``work`` every ``interval_ns`` until ``stop`` is set (a sampler thread's loop).

    A call that overruns its period skips the missed ticks rather than bursting to catch
    up: a slow scrape must not turn into several back to back."""
    due = now_ns() + interval_ns
    while not stop.wait(max(0.0, (due - now_ns()) / 1e9)):
        work()
        due += interval_ns
        if due < now_ns():
            due = now_ns() + interval_ns


@dataclass(frozen=True)
class ScrapePlan:
    url: str
    interval_ns: int
    explicit: bool  # named by the user: kept even when the first scrape fails
    insecure: bool = False


def plan_scrape(
    given: str | None, interval: str, target_url: str, *, llm: bool, insecure: bool = False
) -> ScrapePlan | None:
    """``--server-metrics`` (None: the target's /metrics for an LLM run), or None when off."""
    interval_ns = parse_duration_ns(interval, "--server-metrics-interval", allow_zero=False)
    if not MIN_INTERVAL_NS <= interval_ns <= MAX_INTERVAL_NS:
        raise BadInput("--server-metrics-interval", interval, "a duration from 100ms to 60s")
    if given is not None and given.strip().lower() == "off":
        return None
    if given is None:
        if not llm:
            return None
        parts = urllib.parse.urlsplit(target_url)
        return ScrapePlan(f"{parts.scheme}://{parts.netloc}/metrics", interval_ns, False, insecure)
    credentials.remember_url(given)  # its user, password, token: scrubbed from every output
    parts = urllib.parse.urlsplit(given.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or len(given) > 2048:
        shown = credentials.masked_url(given)
        raise BadInput("--server-metrics", shown, "an http(s) URL of Prometheus metrics, or off")
    return ScrapePlan(given.strip(), interval_ns, True, insecure)


def fetch(url: str, timeout_s: float, insecure: bool = False) -> str:
    """One scrape's text, all of it within ``timeout_s``; raises :class:`ScrapeError`
    with a short kind."""
    try:
        status, _, body = get_within(
            url, timeout_s, MAX_BODY_BYTES, accept="text/plain", insecure=insecure
        )
    except TimeoutError:
        raise ScrapeError("timeout") from None
    except http.client.HTTPException:  # a broken answer: cut chunks, a bad status line
        raise ScrapeError("malformed") from None
    except (OSError, ValueError):
        raise ScrapeError("unreachable") from None
    if not 200 <= status < 300:
        raise ScrapeError(f"http_{status}")
    if len(body) > MAX_BODY_BYTES:
        raise ScrapeError("too_large")
    return _decode(body)


DECODE_SLICE_BYTES = 1 << 20


def _decode(body: bytes) -> str:
    """``body`` as text, a slice at a time with the interpreter lock given back between
    slices: one decode of 8 MB held it for milliseconds, beside the load generator."""
    parts, start, n = [], 0, len(body)
    while start < n:
        end = body.find(b"\n", min(start + DECODE_SLICE_BYTES, n))
        end = n if end < 0 else end + 1
        parts.append(body[start:end].decode("utf-8", errors="replace"))
        start = end
        _give_way()
    return "".join(parts)


def _give_way() -> None:
    """Let the load generator's thread take the interpreter lock (a scrape's parsing runs
    in a thread beside it: :func:`time.sleep` releases the lock, even for 0 s)."""
    time.sleep(0)


ReadIf = Callable[[int, str], bool]


def get_within(
    url: str,
    timeout_s: float,
    max_bytes: int,
    *,
    accept: str,
    insecure: bool = False,
    read_if: ReadIf = lambda status, kind: 200 <= status < 300,
) -> tuple[int, str, bytes]:
    """``GET url``: (status, Content-Type, body), the whole exchange (connecting, the
    answer's head, its body) within ``timeout_s``.

    A socket timeout bounds one read only: a server that answers a byte a second holds
    a reader through its head for as long as it likes (42 s was measured before the first
    request of a run). Here a timer cuts the socket at the deadline, wherever the reader
    is, and the exchange raises TimeoutError. The body is read only where ``read_if``
    (status, content type) says so, and not past ``max_bytes`` (more: too large). No
    redirect is followed, no proxy is used; a URL's user and password go as Basic auth.
    """
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=_ssl(insecure))
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    headers = {"Accept": accept}
    if parts.username is not None:
        token = f"{parts.username}:{parts.password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    deadline = time.monotonic() + timeout_s
    timer = threading.Timer(timeout_s, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     headers=headers)  # fmt: skip
        resp = conn.getresponse()
        kind = resp.headers.get("Content-Type", "") or ""
        body = read_by(resp, deadline, max_bytes) if read_if(resp.status, kind) else b""
        if expired.is_set():
            raise TimeoutError("the answer outlived its deadline")
        return resp.status, kind, body
    except (OSError, http.client.HTTPException, ValueError):
        if expired.is_set():
            raise TimeoutError("the answer outlived its deadline") from None
        raise
    finally:
        timer.cancel()
        conn.close()


def read_by(resp: Any, deadline: float, max_bytes: int) -> bytes:
    """An HTTP answer's body, read by ``deadline`` (monotonic s), stopping once past
    ``max_bytes`` (the caller sees more than ``max_bytes``: too large). A socket timeout
    bounds one read only, and a server that trickles bytes forever would hold the caller
    (and the run) with it: past the deadline, raises TimeoutError."""
    parts: list[bytes] = []
    size = 0
    while size <= max_bytes:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer outlived its deadline")
        part: bytes = resp.read1(READ_BYTES) if hasattr(resp, "read1") else resp.read(READ_BYTES)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _ssl(insecure: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


READ_BYTES = 65_536


class ScrapeError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Scraper:
    """The background scrapes of one run, written to ``directory / FILE``."""

    def __init__(self, plan: ScrapePlan, directory: Path) -> None:
        self.plan = plan
        self.path = directory / FILE
        self.rows: list[dict[str, Any]] = []
        self.note = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timeout_s = min(MAX_TIMEOUT_S, plan.interval_ns / 1e9 * 0.8)
        # The wall clock's offset from the monotonic one, read once, to place the run's
        # wall-clock start (the only form a scaled-out run reports) on the monotonic clock.
        self._unix_minus_mono_ns = time.time_ns() - now_ns()

    def scrape_once(self, timeout_s: float | None = None) -> dict[str, Any]:
        start = now_ns()
        row: dict[str, Any] = {"t_mono_ns": start}
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        try:
            text = fetch(self.plan.url, timeout_s, self.plan.insecure)
            reading = read_exposition(text, pace=_give_way)
        except ScrapeError as exc:
            row["error"] = exc.kind
            return row
        finally:
            row["took_ms"] = round((now_ns() - start) / 1e6, 3)
        if reading is None:
            row["error"] = "unknown_metrics"  # Prometheus text, but no server we know
        else:
            row["reading"] = reading
        return row

    def start(self) -> bool:
        """Scrape once now; start the thread if that worked or the user named the URL.

        The scrapes that bracket the run (this one, before the clock, and the last, after
        it: the counters' ends) are off the clock: each gets the full :data:`MAX_TIMEOUT_S`,
        not the interval's share, since a busy server answering a 100 ms interval's scrape
        late would cost the whole counter section."""
        first = self.scrape_once(MAX_TIMEOUT_S)
        if "reading" not in first and not self.plan.explicit:
            self.note = f"{credentials.masked_url(self.plan.url)}: {first['error']}; not scraped"
            return False
        self.path.write_text("")
        self._keep(first)
        self._thread = threading.Thread(target=self._loop, name="tailwise-scrape", daemon=True)
        self._thread.start()
        return True

    def _loop(self) -> None:
        every(self._stop, self.plan.interval_ns, lambda: self._keep(self.scrape_once()))

    def _keep(self, row: dict[str, Any]) -> None:
        if len(self.rows) >= MAX_ROWS:
            return
        self.rows.append(row)
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
        except OSError:
            pass  # the rows stay in memory; the file is rewritten at the end

    def stop(self) -> None:
        """Stop after one last scrape (the counters' end of the window)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self._timeout_s + 1.0)
        if not self._thread.is_alive():
            self._keep(self.scrape_once(MAX_TIMEOUT_S))

    def finish(
        self, t0_unix_s: float, window_ns: tuple[int, int], records: Records, llm: bool
    ) -> dict[str, Any]:
        """Run-relative times in the file, and the summary's ``server_metrics`` section."""
        t0_mono = round(t0_unix_s * 1e9) - self._unix_minus_mono_ns
        rows = [
            {
                "t_ns": r["t_mono_ns"] - t0_mono,
                "t_end_ns": r["t_mono_ns"] - t0_mono + round(r["took_ms"] * 1e6),
                **r,
            }
            for r in self.rows
        ]
        self._rewrite(rows)
        client = client_ttft_ms(records, window_ns) if llm else None
        doc = {
            "url": credentials.masked_url(self.plan.url),
            "interval_s": self.plan.interval_ns / 1e9,
        }
        doc.update(summarize_server(rows, window_ns, client, _answered_ns(records, window_ns)))
        doc["timeline"] = timeline(rows, records, llm)
        return doc

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        rewrite_samples(self.path, rows, ("t_ns", "t_end_ns"))


def _answered_ns(records: Records, window_ns: tuple[int, int]) -> int:
    """When the window's last answered request ended (run-relative), at least its end: a
    scrape begun earlier misses the tokens of the requests still draining (on a busy
    machine the first scrape past the window's end came mid-drain, and a trace replay's
    server-side prompt tokens read 4,736 of 7,548)."""
    if not len(records):
        return window_ns[1]
    done = records.done_ns[records.in_window & (records.done_ns >= 0)]
    return max(window_ns[1], int(done.max())) if len(done) else window_ns[1]


def client_ttft_ms(records: Records, window_ns: tuple[int, int]) -> dict[str, Any] | None:
    """The client's TTFT over the window's successful requests: mean and percentiles, ms."""
    ttft = derive.ttft_ns(records)
    sel = ttft[(ttft >= 0) & records.in_window] / 1e6 if len(records) else np.empty(0)
    if not len(sel):
        return None
    out: dict[str, Any] = {"mean": round(float(sel.mean()), 3), "count": len(sel)}
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        out[key] = round(float(np.percentile(sel, q)), 3)
    return out


def timeline(rows: list[dict[str, Any]], records: Records, llm: bool) -> dict[str, list[Any]]:
    """Columns over the scrapes (at most :data:`TIMELINE_POINTS`): the server's gauges, and
    the client's p50 TTFT and latency of the requests completed since the previous scrape."""
    ok = [r for r in rows if r.get("reading")]
    step = max(1, -(-len(ok) // TIMELINE_POINTS))
    picked = ok[step - 1 :: step] if ok else []
    cols: dict[str, list[Any]] = {"t_s": [round(r["t_ns"] / 1e9, 3) for r in picked]}
    for name in ("running", "waiting", "kv_cache_usage"):
        if any(name in r["reading"]["values"] for r in picked):
            cols[name] = [r["reading"]["values"].get(name) for r in picked]
    edges = [r["t_ns"] for r in picked]
    latency = derive.latency_ns(records)
    done = records.done_ns
    series = [("client_latency_p50_ms", latency)]
    if llm:
        series.append(("client_ttft_p50_ms", derive.ttft_ns(records)))
    for name, values in series:
        col: list[float | None] = []
        for i, end in enumerate(edges):
            begin = edges[i - 1] if i else -(2**62)
            sel = values[(done > begin) & (done <= end) & (values >= 0)]
            col.append(round(float(np.median(sel)) / 1e6, 3) if len(sel) else None)
        cols[name] = col
    return cols
