"""Resource budgets: the documented limits every run, scenario and plan is sized against.

A run is sized before it is built: the arrival plan's request count, the worker
processes, closed-loop users, synthetic prompt text, a scenario's replicas,
fan-out and failure events, a scenario file's size and YAML structure. Anything
beyond a limit here is refused up front with one line naming the option and the
limit (:class:`~tailwise.errors.BadInput`, exit code 2), so a typo such as
``--rate 1e9/s`` or ``replicas: 1000000000`` costs nothing instead of the
machine's memory. docs/run.md ("Limits") lists them; change both together.

The bounds are generous on purpose: each is one or two orders of magnitude past
what a single machine (or a Ray cluster of them) can actually drive, and well
below where a 64-bit nanosecond clock, a NumPy allocation or a process table
gives out.
"""

from __future__ import annotations

from tailwise.errors import BadInput

# Rates (units.parse_rate_rps): one request per 11.6 days up to a billion per second.
MIN_RATE_RPS = 1e-6
MAX_RATE_RPS = 1e9
# Requests one run or one simulation may plan (rate x window, or --requests): each
# planned request becomes a record row (about 100 bytes in memory, 200 on disk).
MAX_PLANNED_REQUESTS = 100_000_000
# Worker processes: per core of this machine for local workers, in all with Ray.
MAX_WORKERS_PER_CORE = 4
MAX_RAY_WORKERS = 4_096
# Closed-loop users (one connection each) and the cap on outstanding requests.
MAX_CONCURRENCY = 100_000
MAX_IN_FLIGHT = 1_000_000
# Synthetic prompts: the words of all distinct prompts together (about 7 bytes each).
MAX_PROMPT_WORDS = 16_000_000
# Scenarios: replicas (and servers in all), fan-out legs, repeated runs, failure events.
MAX_REPLICAS = 10_000
MAX_SERVERS = 100_000  # replicas x servers per replica, over every stage
MAX_FANOUT = 1_000
MAX_RUNS = 10_000  # --replications x --vary values
MAX_TIMED_EVENTS = 10_000_000  # expected breakdowns (every replica) or autoscaler ticks
MAX_SLOW_FACTOR = 1e6  # a straggler is at most a million times slower
# Scenario files: bytes read, YAML nodes after aliases are expanded, nesting depth.
MAX_SCENARIO_BYTES = 4 * 1024 * 1024
MAX_YAML_NODES = 1_000_000
MAX_YAML_DEPTH = 64
# Input files read whole (--prompts, --bodies, --body @file, trace files): bytes read at
# most, whatever the file claims to be (a device such as /dev/zero never ends).
MAX_INPUT_FILE_BYTES = 256 * 1024 * 1024
# Gamma arrival burstiness: below 0.01 nearly every gap is 0 (bursts of 100+ at one instant).
MIN_BURSTINESS = 0.01

LIMITS_DOC = "docs/run.md#limits"


def within(field: str, value: float, limit: float, what: str, given: object = None) -> None:
    """Refuse ``value`` above ``limit`` with one line naming the field and the limit.

    ``given`` is what the user wrote, when ``value`` was derived from it (a rate
    times a duration); by default the value itself.
    """
    if not value <= limit:  # also NaN
        shown = given if given is not None else _plain(value)
        raise BadInput(field, shown, f"at most {limit:,.0f} {what} (limits: {LIMITS_DOC})")


def _plain(value: float) -> object:
    """1e9 as 1000000000, not 1000000000.0; huge or fractional values as they are."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e18:
        return int(value)
    return value
