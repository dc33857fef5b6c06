"""``tailwise proxy``: a fault-injecting TCP proxy, HTTP/1.1-aware, with a ground-truth log.

Put it between tailwise (or any client) and a target to see how timeouts,
hedging and retries behave under the failure modes of real serving systems:
added latency, periodic stalls, stragglers, resets, black holes, truncated
streams, thin links, each on for a schedule. Every request it carried is logged
with what was done to it (:mod:`tailwise.proxy.truth`), so a run's numbers can
be checked against what really happened.

Modules, in the order bytes meet them: :mod:`~tailwise.proxy.faults` (what to
inject, each request's draw), :mod:`~tailwise.proxy.link` (one connection,
HTTP-aware), :mod:`~tailwise.proxy.pipe` (timed, bounded forwarding),
:mod:`~tailwise.proxy.truth` (the log), :mod:`~tailwise.proxy.server` (the process).
"""

from __future__ import annotations

import subprocess
import sys

from tailwise.proxy.faults import Faults, parse_faults
from tailwise.proxy.truth import read_truth

__all__ = ["Faults", "parse_faults", "read_truth", "spawn_proxy"]


def spawn_proxy(to: str, *args: str, lifetime: str = "600s") -> tuple[subprocess.Popen[str], str]:
    """Start ``tailwise proxy --to TO args...`` on a free loopback port; (process, base URL)."""
    cmd = [sys.executable, "-m", "tailwise", "proxy", "--listen", "127.0.0.1:0", "--to", to]
    proc = subprocess.Popen(
        [*cmd, "--lifetime", lifetime, *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"tailwise proxy did not start: {line!r}")
    return proc, line.removeprefix("listening on ")
