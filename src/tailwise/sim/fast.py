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
from typing import Any

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


def split_fcfs(
    arrivals_ns: np.ndarray,
    service_ns: np.ndarray,
    replica: np.ndarray,
    replicas: int,
    servers: int,
) -> np.ndarray:
    """Departures when the route does not depend on state (round robin, random): each
    replica's share of the stream is its own FCFS queue, solved vectorised."""
    done = np.empty(len(arrivals_ns), dtype=np.int64)
    for r in range(replicas):
        mine = np.flatnonzero(replica == r)
        done[mine] = fcfs_servers(arrivals_ns[mine], service_ns[mine], servers)
    return done


# Below this many requests the pure-Python loop beats loading the compiled kernel.
COMPILED_MIN_REQUESTS = 200_000
_compiled: dict[str, Any] = {}


def jsq_single_servers(
    arrivals_ns: np.ndarray, service_ns: np.ndarray, replicas: int
) -> tuple[np.ndarray, np.ndarray]:
    """Join the shortest queue over ``replicas`` one-server FCFS queues: (done, replica).

    The count at a replica is its requests not yet departed (waiting or in
    service); ties go round robin: to the first tied replica at or after the one
    after the last choice, as the event engine breaks them; departures at an
    arrival's instant leave first, as there. Long runs use a Numba-compiled
    kernel when the ``fast`` extra is installed (same answers, ~20x faster).
    """
    kernel = jsq_compiled() if len(arrivals_ns) >= COMPILED_MIN_REQUESTS else None
    if kernel is not None:
        done, chosen = kernel(
            np.ascontiguousarray(arrivals_ns, np.int64),
            np.ascontiguousarray(service_ns, np.int64),
            replicas,
        )
        return done, chosen
    return jsq_python(arrivals_ns, service_ns, replicas)


def jsq_compiled() -> Any:
    """The kernel compiled by Numba (cached on disk), or None without Numba."""
    if "jsq" not in _compiled:
        try:
            import numba
        except ImportError:
            _compiled["jsq"] = None
        else:
            _compiled["jsq"] = numba.njit(cache=True, nogil=True)(jsq_kernel)
    return _compiled["jsq"]


def jsq_kernel(
    arrivals_ns: np.ndarray, service_ns: np.ndarray, replicas: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`jsq_python`'s rule in Numba's subset of Python (loops over int64 arrays).

    Each replica's departures leave in FCFS order, so a ring buffer per replica
    holds them; it doubles when a queue outgrows it.
    """
    n = arrivals_ns.shape[0]
    done = np.empty(n, np.int64)
    chosen = np.empty(n, np.int64)
    count = np.zeros(replicas, np.int64)
    head = np.zeros(replicas, np.int64)
    last = np.zeros(replicas, np.int64)
    cap = 64
    ring = np.empty((replicas, cap), np.int64)
    p = 0
    for i in range(n):
        a = arrivals_ns[i]
        for r in range(replicas):
            while count[r] > 0 and ring[r, head[r]] <= a:
                head[r] = (head[r] + 1) % cap
                count[r] -= 1
        j = p
        for k in range(replicas):
            r = p + k - replicas if p + k >= replicas else p + k
            if count[r] < count[j]:
                j = r
        p = j + 1 if j + 1 < replicas else 0
        free = last[j]
        end = (a if a > free else free) + service_ns[i]
        last[j] = end
        if count[j] == cap:  # grow every ring, unrolled so each starts at index 0
            bigger = np.empty((replicas, 2 * cap), np.int64)
            for r in range(replicas):
                for k in range(count[r]):
                    bigger[r, k] = ring[r, (head[r] + k) % cap]
                head[r] = 0
            ring = bigger
            cap *= 2
        ring[j, (head[j] + count[j]) % cap] = end
        count[j] += 1
        done[i] = end
        chosen[i] = j
    return done, chosen


def jsq_python(
    arrivals_ns: np.ndarray, service_ns: np.ndarray, replicas: int
) -> tuple[np.ndarray, np.ndarray]:
    """The join-shortest-queue loop in plain Python: one heap holds every pending
    departure as ``done << bits | replica`` (one int compares faster than a tuple)."""
    bits = max(1, (replicas - 1).bit_length())
    mask = (1 << bits) - 1
    # Counts twice over, so list.index(m, p) finds the first tie at or after p
    # cyclically in one C call; both halves are kept equal.
    count = [0] * (2 * replicas)
    last = [0] * replicas
    heap = [1 << 62]
    done = [0] * len(arrivals_ns)
    chosen = [0] * len(arrivals_ns)
    pop, push, index = heapq.heappop, heapq.heappush, count.index
    p = 0
    for i, (a, s) in enumerate(zip(arrivals_ns.tolist(), service_ns.tolist(), strict=True)):
        key = a << bits | mask
        while heap[0] <= key:
            k = pop(heap) & mask
            count[k] -= 1
            count[k + replicas] -= 1
        j = index(min(count), p)
        if j >= replicas:
            j -= replicas
        p = j + 1 if j + 1 < replicas else 0
        free = last[j]
        end = (a if a > free else free) + s
        last[j] = end
        count[j] += 1
        count[j + replicas] += 1
        push(heap, end << bits | j)
        done[i] = end
        chosen[i] = j
    return np.array(done, dtype=np.int64), np.array(chosen, dtype=np.int64)


def power_of_d_single_servers(
    arrivals_ns: np.ndarray, service_ns: np.ndarray, replicas: int, d: int, uniforms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Power of d choices over ``replicas`` one-server FCFS queues: (done, replica).

    Each arrival samples ``min(d, replicas)`` distinct replicas by a partial
    Fisher-Yates shuffle of ``0..replicas-1`` (one uniform per pick, from
    ``uniforms`` in order, as the event engine's router draws them) and joins
    the first of them with the fewest requests not yet departed; departures at
    an arrival's instant leave first. The shuffle keeps only the swapped
    positions, so a pick costs O(d) whatever the fleet's size.
    """
    bits = max(1, (replicas - 1).bit_length())
    mask = (1 << bits) - 1
    count = [0] * replicas
    last = [0] * replicas
    heap = [1 << 62]
    n = len(arrivals_ns)
    done = [0] * n
    chosen = [0] * n
    u = uniforms.tolist()
    picks = min(d, replicas)
    pop, push = heapq.heappop, heapq.heappush
    pos = 0
    for i, (a, s) in enumerate(zip(arrivals_ns.tolist(), service_ns.tolist(), strict=True)):
        key = a << bits | mask
        while heap[0] <= key:
            count[pop(heap) & mask] -= 1
        swapped: dict[int, int] = {}
        best, best_load = -1, -1
        for k in range(picks):
            pick = k + int(u[pos] * (replicas - k))
            pos += 1
            here, there = swapped.get(k, k), swapped.get(pick, pick)
            swapped[k], swapped[pick] = there, here
            if best < 0 or count[there] < best_load:
                best, best_load = there, count[there]
        free = last[best]
        end = (a if a > free else free) + s
        last[best] = end
        count[best] += 1
        push(heap, end << bits | best)
        done[i] = end
        chosen[i] = best
    return np.array(done, dtype=np.int64), np.array(chosen, dtype=np.int64)
