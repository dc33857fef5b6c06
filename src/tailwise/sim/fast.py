"""Vectorised fast paths for FCFS queues without routing, batching or hedging.

One server: the Lindley recursion ``D_n = max(A_n, D_{n-1}) + S_n``. Writing
``X_n = D_n - (S_1 + ... + S_n)`` gives ``X_n = max(A_n - (S_1 + ... +
S_{n-1}), X_{n-1})``, a running maximum, so the whole run is two cumulative
sums and one ``np.maximum.accumulate``: no Python loop.

c servers: Kiefer-Wolfowitz, a heap of the servers' free instants (the loop is
in Python but touches one heap entry per customer).
"""

from __future__ import annotations

import heapq

import numpy as np


def fcfs_one_server(arrivals_ns: np.ndarray, service_ns: np.ndarray) -> np.ndarray:
    """Departure instants of a single FCFS server (arrivals sorted ascending)."""
    work = np.cumsum(service_ns, dtype=np.int64)
    before = work - service_ns  # S_1 + ... + S_{n-1}
    return np.maximum.accumulate(arrivals_ns - before) + work


def fcfs_servers(arrivals_ns: np.ndarray, service_ns: np.ndarray, servers: int) -> np.ndarray:
    """Departure instants of ``servers`` FCFS servers sharing one queue."""
    if servers == 1:
        return fcfs_one_server(arrivals_ns, service_ns)
    free = [0] * servers
    done = np.empty(len(arrivals_ns), dtype=np.int64)
    replace = heapq.heapreplace
    for i, (a, s) in enumerate(zip(arrivals_ns.tolist(), service_ns.tolist(), strict=True)):
        end = (a if a > free[0] else free[0]) + s
        replace(free, end)
        done[i] = end
    return done
