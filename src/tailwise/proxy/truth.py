"""The proxy's ground truth: one JSON line per request, per connection, and at start and end.

Lines, by ``kind`` (times are integer ns since the proxy started, on
CLOCK_MONOTONIC, the clock tailwise's records use; ``origin_monotonic_ns`` on
the first line places that start on it):

* ``start`` - where it listens, where it forwards, the faults and their seed;
* ``request`` - one per request, written when it is finished with: ``n`` (order
  of arrival), ``conn``, ``t_ns`` (its first byte arrived), ``method``, ``path``
  (without the query string, which may carry credentials), ``faults`` (those
  drawn for it, plus ``stall`` / ``bandwidth`` when they held its bytes),
  ``delay_ns`` and ``slow_factor`` drawn, ``stall_ns`` and ``shaped_ns`` held,
  when its first byte was forwarded (``fwd_ns``), the target's first and last
  response byte (``up_first_ns``, ``up_done_ns``), the first and last byte sent
  to the client (``out_first_ns``, ``out_done_ns``), ``status``, ``bytes_up``,
  ``bytes_down``, the ``outcome`` (``ok``, ``reset``, ``dropped``,
  ``truncated``, ``upstream_closed``, ``client_closed``, ``unfinished``), and two
  derived numbers: ``upstream_ns`` (the target's own time) and ``added_ns``
  (what the proxy added: its whole residence time minus the target's);
* ``connection`` - one per client connection, at its close;
* ``end`` - counts by outcome and by fault.

No header is ever parsed, so no header value (an API key, a cookie) can reach
the file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import IO, Any

from tailwise.errors import BadInput

FLUSH_S = 0.2


class Exchange:
    """One request and its response, as the proxy saw and shaped them."""

    __slots__ = (
        "bytes_down",
        "bytes_up",
        "conn",
        "decision",
        "fwd_ns",
        "method",
        "n",
        "out_done_ns",
        "out_first_ns",
        "outcome",
        "shaped_ns",
        "stall_ns",
        "status",
        "t_ns",
        "up_done_ns",
        "up_first_ns",
        "url",
    )

    def __init__(self, n: int, conn: int, t_ns: int, decision: Any) -> None:
        self.n = n
        self.conn = conn
        self.t_ns = t_ns
        self.decision = decision
        self.method = ""
        self.url = b""
        self.fwd_ns: int | None = None
        self.up_first_ns: int | None = None
        self.up_done_ns: int | None = None
        self.out_first_ns: int | None = None
        self.out_done_ns: int | None = None
        self.status = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.stall_ns = 0
        self.shaped_ns = 0
        self.outcome = ""

    def row(self) -> dict[str, Any]:
        d = self.decision
        faults = d.names()
        faults += [n for n, v in (("stall", self.stall_ns), ("bandwidth", self.shaped_ns)) if v]
        upstream_ns = added_ns = None
        if self.fwd_ns is not None and self.up_done_ns is not None:
            upstream_ns = self.up_done_ns - self.fwd_ns
            if self.out_done_ns is not None:
                added_ns = self.out_done_ns - self.t_ns - upstream_ns
        return {
            "kind": "request",
            "n": self.n,
            "conn": self.conn,
            "t_ns": self.t_ns,
            "method": self.method,
            "path": self.url.split(b"?", 1)[0].decode("latin-1"),
            "faults": faults,
            "delay_ns": d.delay_ns,
            "slow_factor": d.slow_factor,
            "stall_ns": self.stall_ns,
            "shaped_ns": self.shaped_ns,
            "fwd_ns": self.fwd_ns,
            "up_first_ns": self.up_first_ns,
            "up_done_ns": self.up_done_ns,
            "out_first_ns": self.out_first_ns,
            "out_done_ns": self.out_done_ns,
            "status": self.status,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "outcome": self.outcome,
            "upstream_ns": upstream_ns,
            "added_ns": added_ns,
        }


class TruthLog:
    """Appends lines; flushed every :data:`FLUSH_S` and at the end (a killed proxy keeps most)."""

    def __init__(self, path: Path | None) -> None:
        self._fh: IO[str] | None = None
        if path is not None:
            try:
                self._fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
            except OSError as exc:
                raise BadInput("--log", str(path), f"a writable file ({exc.strerror})") from None
        self.outcomes: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.requests = 0

    def write(self, row: dict[str, Any]) -> None:
        if row.get("kind") == "request":
            self.requests += 1
            self.outcomes[row["outcome"]] += 1
            self.faults.update(row["faults"])
        if self._fh is not None:
            self._fh.write(json.dumps(row, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self, t_ns: int, connections: int) -> None:
        self.write(
            {
                "kind": "end",
                "t_ns": t_ns,
                "requests": self.requests,
                "connections": connections,
                "outcomes": dict(self.outcomes),
                "faults": dict(self.faults),
            }
        )
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_truth(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``start`` line and the ``request`` lines in order of arrival (``n``).

    A partial last line (a proxy killed mid-write) is skipped.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput("truth", str(path), f"a readable proxy log ({exc.strerror})") from None
    start: dict[str, Any] = {}
    requests: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.split("\n")[:-1], 1):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise BadInput(f"{path}:{lineno}", line[:60], "a line of a tailwise proxy log")
        if row.get("kind") == "start":
            start = row
        elif row.get("kind") == "request":
            requests.append(row)
    requests.sort(key=lambda r: r["n"])
    return start, requests
