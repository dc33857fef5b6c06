"""The demo LLM engine's continuous batching as a discrete-event model in virtual time.

:func:`simulate_llm` predicts what ``tailwise serve-demo --kind llm`` does with
the same arrivals: it replays the scheduling of
:class:`tailwise.server.engine.Engine` step by step, in integer nanoseconds,
under the law the two share, :class:`tailwise.laws.llm.EngineConfig` (a step
costs ``EngineConfig.step_ns(prefill_tokens, decoding)``, the step law rounded
to the nanosecond). In real time the engine sleeps on an absolute timeline; in
virtual time its steps simply run back to back. One engine's rules are in
:mod:`tailwise.sim.llm_engine`.

Replicas: ``replicas`` identical engines behind a router that picks at arrival
(a 400 or 429 counts as routed): ``round_robin`` (in arrival order),
``random`` (uniform, one draw per request from the ``rng`` given) or
``least_outstanding`` (fewest waiting + running, ties to the lowest index).

Disaggregated serving (``prefill_replicas`` > 0; ``replicas`` then counts the
decode engines): the router above spreads requests over the prefill engines
(:mod:`tailwise.sim.llm_prefill`); a prefilled sequence then goes, when its KV
transfer lands, to the decode engine with the fewest waiting + running (ties
to the lowest index); transfers landing at the same instant go in request
order.

Results are indexed like the inputs. A timeout is reported as 504 even when
tokens were already emitted (a streaming demo sends that 504 as an error event
after its 200 header); ``first_token_ns`` and ``token_times`` keep what was
emitted before. ``replica`` is the engine that answered
(the decode engine when disaggregated; -1 there for a request no decode engine
took: 400, 429, expired before its prefill step, or max_tokens == 1).
``token_times`` keeps every token's emission instant (None for a request that
got none) and costs memory: turn it off for very long runs. Every request
needs at least 1 prompt token and max_tokens >= 1 (else :class:`BadInput`).
``jump=False`` to :func:`_simulate` takes every decode step on its own (for
checking: the numbers are the same).

The scenario file's ``llm:`` section is :mod:`tailwise.sim.llm_scenario`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailwise.errors import BadInput
from tailwise.laws.llm import KV_ALLOCATIONS, KV_PREEMPTIONS, EngineConfig
from tailwise.sim.llm_engine import IDLE_NS, TRANSFER, LlmEngine, RequestTable
from tailwise.sim.llm_paged import PagedLlmEngine
from tailwise.sim.llm_prefill import PrefillEngine

ROUTINGS = ("round_robin", "random", "least_outstanding")


@dataclass(frozen=True)
class LlmSpec:
    engine: EngineConfig
    replicas: int = 1
    routing: str = "round_robin"
    prefill_replicas: int = 0  # >0: disaggregated; `replicas` then means decode replicas
    transfer_ns: int = 0
    transfer_ns_per_token: float = 0.0
    token_times: bool = True  # keep every token's time (for ITL); off for huge runs
    # Shared prompt prefixes (the workload): groups, and tokens every prompt of a group
    # starts with; cached only with engine.prefix_caching (paged KV).
    prefix_groups: int = 0
    prefix_tokens: int = 0


@dataclass
class LlmResult:
    first_token_ns: np.ndarray  # int64, -1 if none
    done_ns: np.ndarray  # int64, time of the answer (finish, rejection, timeout)
    http_status: np.ndarray  # 200, 400, 429, 504
    replica: np.ndarray  # the engine that answered (decode engine when disaggregated)
    token_times: list[list[int] | None] | None  # per request, token emission instants (ns)
    steps: int  # engine steps simulated (all engines)
    preempted: np.ndarray | None = None  # per request, times preempted (paged KV)
    preemptions: int = 0  # all engines
    prefix_hits: int = 0  # admissions that skipped a cached prefix's prefill
    peak_running: int = 0  # the most sequences one engine ran at once


def _route(
    engines: Sequence[LlmEngine | PrefillEngine],
    order: list[int],
    times: list[int],
    routing: str,
    rng: np.random.Generator | None,
) -> None:
    """Offer the requests in ``order`` at ``times`` to the engines, then run them dry."""
    n_eng = len(engines)
    if routing == "least_outstanding" and n_eng > 1:
        for i in order:
            t = times[i]
            best, best_load = 0, -1
            for k, eng in enumerate(engines):
                if eng.next_ns < t:
                    eng.advance(t)
                load = eng.outstanding
                if best_load < 0 or load < best_load:
                    best, best_load = k, load
            engines[best].submit(i, t)
    else:
        # Engines that do not look at each other can each run through their own share.
        if n_eng == 1:
            shares = [order]
        else:
            if routing == "random":
                assert rng is not None
                picks = rng.integers(0, n_eng, size=len(order)).tolist()
            else:
                picks = [k % n_eng for k in range(len(order))]
            shares = [[] for _ in range(n_eng)]
            for i, k in zip(order, picks, strict=True):
                shares[k].append(i)
        for eng, share in zip(engines, shares, strict=True):
            for i in share:
                t = times[i]
                if eng.next_ns < t:
                    eng.advance(t)
                eng.submit(i, t)
    for eng in engines:
        eng.advance(IDLE_NS)


def _check(
    spec: LlmSpec, arrivals_ns: np.ndarray, prompt_tokens: np.ndarray, max_tokens: np.ndarray
) -> None:
    cfg = spec.engine
    if not len(arrivals_ns) == len(prompt_tokens) == len(max_tokens):
        raise BadInput(
            "prompt_tokens",
            f"{len(arrivals_ns)}, {len(prompt_tokens)}, {len(max_tokens)} values",
            "one prompt length and one max_tokens per arrival",
        )
    if spec.routing not in ROUTINGS:
        raise BadInput("routing", spec.routing, " | ".join(ROUTINGS))
    if spec.replicas < 1 or spec.prefill_replicas < 0:
        raise BadInput(
            "replicas", (spec.replicas, spec.prefill_replicas), "replicas >= 1, prefill >= 0"
        )
    if spec.transfer_ns < 0 or spec.transfer_ns_per_token < 0:
        raise BadInput("transfer", spec.transfer_ns, "a duration of at least 0")
    if min(cfg.max_num_seqs, cfg.kv_cache_tokens, cfg.max_model_len) < 1 or cfg.max_waiting < 0:
        raise BadInput("engine", cfg, "positive limits and max_waiting >= 0")
    if (
        cfg.step_ns(0, 0) < 1
        or min(cfg.prefill_s_per_token, cfg.decode_s_per_seq, cfg.kv_s_per_token) < 0
    ):
        raise BadInput("engine.base_s", cfg.base_s, "a step cost of at least 1 ns")
    if cfg.request_timeout_s <= 0:
        raise BadInput("engine.request_timeout_s", cfg.request_timeout_s, "a positive timeout")
    if cfg.kv_allocation not in KV_ALLOCATIONS:
        raise BadInput("engine.kv_allocation", cfg.kv_allocation, " | ".join(KV_ALLOCATIONS))
    if cfg.kv_allocation == "paged":
        _check_paged(spec)
    if len(prompt_tokens) and (prompt_tokens.min() < 1 or max_tokens.min() < 1):
        raise BadInput("prompt_tokens", "a count below 1", "at least 1 prompt and 1 output token")
    if cfg.prefix_caching and cfg.kv_allocation != "paged":
        raise BadInput("prefix_caching", True, "paged KV (kv_allocation: paged)")
    if spec.prefix_groups and len(prompt_tokens) and prompt_tokens.min() <= spec.prefix_tokens:
        raise BadInput("prefix_tokens", spec.prefix_tokens, "fewer tokens than every prompt")


def _check_paged(spec: LlmSpec) -> None:
    cfg = spec.engine
    if spec.prefill_replicas:
        raise BadInput("kv_allocation", "paged", "reserve with prefill replicas (disaggregated)")
    if not 1 <= cfg.kv_block_tokens <= cfg.kv_cache_tokens:
        raise BadInput("kv_block_tokens", cfg.kv_block_tokens, "1 .. kv_cache_tokens")
    if not 0 <= cfg.kv_watermark < 1:
        raise BadInput("kv_watermark", cfg.kv_watermark, "a share of the blocks in [0, 1)")
    if cfg.kv_preemption not in KV_PREEMPTIONS or cfg.kv_swap_s_per_block < 0:
        raise BadInput("kv_preemption", cfg.kv_preemption, " | ".join(KV_PREEMPTIONS))
    if cfg.prefix_caching and cfg.kv_preemption == "swap":
        raise BadInput("prefix_caching", True, "recompute preemption with prefix caching")


def simulate_llm(
    spec: LlmSpec,
    arrivals_ns: np.ndarray,
    prompt_tokens: np.ndarray,
    max_tokens: np.ndarray,
    rng: np.random.Generator,
    groups: np.ndarray | None = None,
) -> LlmResult:
    """Every request's first-token and answer instants on the engines of ``spec``;
    ``groups``: each request's shared-prefix group (default: all in group 0)."""
    return _simulate(spec, arrivals_ns, prompt_tokens, max_tokens, rng, groups=groups)


def _simulate(
    spec: LlmSpec,
    arrivals_ns: np.ndarray,
    prompt_tokens: np.ndarray,
    max_tokens: np.ndarray,
    rng: np.random.Generator | None,
    jump: bool = True,
    groups: np.ndarray | None = None,
) -> LlmResult:
    """:func:`simulate_llm`; ``jump=False`` takes decode steps one by one (for checking)."""
    arrivals = np.asarray(arrivals_ns, dtype=np.int64)
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    outputs = np.asarray(max_tokens, dtype=np.int64)
    _check(spec, arrivals, prompts, outputs)
    cfg = spec.engine
    times = arrivals.tolist()
    run = RequestTable(cfg, prompts.tolist(), outputs.tolist(), times, spec.token_times)
    if spec.prefix_groups:
        run.group = [0] * len(times) if groups is None else np.asarray(groups).tolist()
        if run.group and not 0 <= min(run.group) <= max(run.group) < spec.prefix_groups:
            raise BadInput("groups", "out of range", f"groups 0..{spec.prefix_groups - 1}")
    order = np.argsort(arrivals, kind="stable").tolist()
    engines: list[LlmEngine] = []
    if spec.prefill_replicas == 0:
        prefix = (spec.prefix_groups, spec.prefix_tokens)
        engines = [_engine(run, cfg, k, jump, prefix) for k in range(spec.replicas)]
        _route(engines, order, times, spec.routing, rng)
    else:
        prefill = [
            PrefillEngine(run, cfg, k, spec.transfer_ns, spec.transfer_ns_per_token)
            for k in range(spec.prefill_replicas)
        ]
        _route(prefill, order, times, spec.routing, rng)
        moving = [i for i, s in enumerate(run.state) if s == TRANSFER]
        moving.sort(key=run.xfer.__getitem__)  # stable: same instant, request order
        engines = [LlmEngine(run, cfg, k, True, jump) for k in range(spec.replicas)]
        _route(engines, moving, run.xfer, "least_outstanding", None)
    return LlmResult(
        first_token_ns=np.array(run.first, dtype=np.int64),
        done_ns=np.array(run.done, dtype=np.int64),
        http_status=np.array(run.status, dtype=np.int64),
        replica=np.array(run.replica, dtype=np.int64),
        token_times=run.tokens,
        steps=run.steps,
        preempted=np.array(run.preempted, dtype=np.int64),
        preemptions=sum(e.preemptions for e in engines if isinstance(e, PagedLlmEngine)),
        prefix_hits=sum(
            e.cache.hits for e in engines if isinstance(e, PagedLlmEngine) and e.cache is not None
        ),
        peak_running=max((e.peak_running for e in engines), default=0),
    )


def _engine(
    run: RequestTable, cfg: EngineConfig, index: int, jump: bool, prefix: tuple[int, int]
) -> LlmEngine:
    """A colocated engine: reserving prompt + max_tokens of KV, or paged with preemption."""
    if cfg.kv_allocation == "paged":
        return PagedLlmEngine(run, cfg, index, jump, prefix)
    return LlmEngine(run, cfg, index, False, jump)
