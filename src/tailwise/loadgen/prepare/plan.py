"""Stage 1 of a run: from what the user wrote to a :class:`Prepared` run.

Every user input is parsed here, before anything starts, so a mistake costs
nothing and gives one line naming the field (:class:`tailwise.errors.BadInput`):
targets and rendered request bodies, the arrival schedule, the window, SLOs,
caps and timeouts, and how many worker processes the run asks for. Nothing here
opens a connection or reads a clock (only :func:`run_directory` creates the
run's directory).

The stages below it: :mod:`~tailwise.loadgen.execute.local` runs a prepared plan in
one process, :mod:`~tailwise.loadgen.scale.driver` across workers, and
:mod:`~tailwise.loadgen.conclude` turns what happened into the summary and the
output files; :mod:`~tailwise.loadgen.runner` chooses between them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import re
import resource
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tailwise import arrivals, credentials
from tailwise.arrivals import Schedule, check_planned, parse_schedule
from tailwise.errors import BadInput
from tailwise.files import output_directory
from tailwise.limits import (
    MAX_CONCURRENCY,
    MAX_IN_FLIGHT,
    MAX_PROMPT_WORDS,
    MAX_RAY_WORKERS,
    MAX_WORKERS_PER_CORE,
    within,
)
from tailwise.loadgen.engine.sessions import (
    SessionPlan,
    parse_turns,
    read_conversations,
    session_plan,
)
from tailwise.loadgen.engine.watch import LossWatch, Sequential, plan_looks
from tailwise.loadgen.llm import apis, openai
from tailwise.loadgen.llm.apis.rerank import RanksDocuments
from tailwise.loadgen.observe.gpu_metrics import GpuPlan, plan_gpu
from tailwise.loadgen.observe.server_metrics import ScrapePlan, plan_scrape
from tailwise.loadgen.prepare import documents, image_rows, images
from tailwise.loadgen.prepare.exact_prompts import exact_prompts
from tailwise.loadgen.prepare.trace_bodies import Replay, read_replay, trace_prompts
from tailwise.loadgen.transport.targets import (
    Target,
    describe,
    parse_header,
    parse_method,
    parse_url,
    read_bodies_jsonl,
    read_body,
    render,
)
from tailwise.metrics.percentiles import parse_percentiles
from tailwise.metrics.slo import SLO, or_default, parse_slo
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.units import parse_confidence, parse_count, parse_duration_ns, parse_fraction

DEFAULT_MAX_IN_FLIGHT = 10_000  # per process, when the user sets no --max-in-flight


@dataclass
class RunOptions:
    """Everything a run can be told, as the user wrote it (parsed in :func:`prepare`)."""

    urls: list[str]
    rate: str | None = None
    arrival: str = "poisson"
    trace_speed: str | None = None  # with --arrival trace:FILE: "2x" replays twice as fast
    duration: str | None = None  # "auto": until every SLO is decided, up to max_duration
    max_duration: str | None = None  # the cap of --duration auto (None: 300s)
    # How sure every verdict must be (--confidence; a float or "95%"), and under --duration
    # auto the whole run's confidence in its decisions (knee steering trials
    # use less: they only choose the next rate; see tailwise.knee)
    confidence: float | str = CONFIDENCE
    requests: int | str | None = None
    warmup: str = "auto"  # MSER-5's transient (tailwise.metrics.steady), or a duration
    seed: int = 0
    slo: list[str] = field(default_factory=list)
    attainment: str = "99%"
    max_in_flight: int | str | None = None
    concurrency: int | str | None = None
    think: str = "0s"  # closed loop: between requests; sessions: between turns
    turns: int | str = 1  # > 1: each arrival is a session of this many chat turns
    timeout: str = "30s"
    connect_timeout: str = "5s"
    grace: str = "2s"
    max_send_lag: str | None = None  # a user bound; by default only flippable verdicts
    method: str | None = None
    header: list[str] = field(default_factory=list)
    body: str | None = None
    bodies: str | None = None
    out: str | None = None
    force: bool = False  # --out may name a directory that holds an earlier run
    name: str | None = None
    insecure: bool = False
    progress: bool | None = None
    label: str | None = None  # shown before the live line (a sweep step: "[2/5] 40/s")
    # OpenAI-compatible LLM endpoints (see tailwise.loadgen.llm.openai)
    api: str | None = None
    model: str | None = None
    max_tokens: int | str = 128
    input_tokens: int | str = 128
    api_key: str | None = None  # never written anywhere
    extra_body: str | None = None
    stream: bool = True
    unique_prompts: bool = True  # a per-request nonce at the start of each prompt
    ignore_eos: bool = False  # ask the server to generate exactly max_tokens
    # Kinds that rank documents (see loadgen.prepare.documents): per request, a number or a
    # distribution; None: the defaults (10 documents of 128 words).
    documents: int | str | None = None
    document_tokens: int | str | None = None
    prompts: str | None = None  # a JSONL dataset
    shared_prefix: int | str = 0
    # Chat with images (see loadgen.prepare.images): per request, N or a distribution; their size
    images: int | str = 0
    image_size: str = "512x512"
    tokenizer: str | None = None  # a tokenizer.json, for servers that report no usage
    # The server's Prometheus metrics, scraped beside the load (see loadgen.observe.server_metrics):
    # None: the target's /metrics for an LLM run when it answers; "off": never.
    server_metrics: str | None = None
    server_metrics_interval: str = "1s"
    # GPU telemetry beside the load (see loadgen.observe.gpu_metrics): None/"off", "nvml" or
    # "dcgm=URL", sampled every gpu_metrics_interval.
    gpu_metrics: str | None = None
    gpu_metrics_interval: str = "500ms"
    # Knee trials: stop sending once an SLO is certainly lost (see loadgen.engine.watch).
    stop_on_slo_loss: bool = False
    # Scale-out (see loadgen.scale.driver): worker processes ("auto": one per core), and a
    # Ray cluster to spread them over.
    workers: int | str | None = None
    ray: str | None = None
    percentiles: str | None = None  # --percentiles 50,90,99,99.9: the ones to show


@dataclass
class Prepared:
    """A run with every input parsed: what :mod:`~tailwise.loadgen.execute.local` needs.

    The stages read these parsed values only. ``opts`` is the options as given, kept for
    run.json (what the user asked) and the preflight's hints (what they typed)."""

    opts: RunOptions
    targets: list[Target]
    payloads: list[list[bytes]]
    schedule: Schedule | None
    horizon_ns: int | None
    max_count: int | None
    warmup_ns: int
    slos: list[SLO]
    max_in_flight: int
    concurrency: int | None
    think_ns: int
    timeout_ns: int
    connect_timeout_ns: int
    grace_ns: int
    max_send_lag_ns: int | None
    method: str
    headers: list[tuple[str, str]]
    streaming: bool = False
    counter: openai.TokenCounter | None = None
    prompt_tokens: list[int] | None = None  # per request body, counted locally
    nonce: bytes | None = None  # the placeholder each request replaces (unique prompts)
    # --shared-prefix: cache hits are the point. --no-unique-prompts only drops the nonce:
    # a high hit rate then is still flagged, since the prompts repeat by accident of the seed.
    reuse_asked: bool = False
    workers: int | None = None  # worker processes; None: one process, or Ray's CPU count
    share: tuple[int, int] = (0, 1)  # (index, count): this process's share of the plan
    scrape: ScrapePlan | None = None  # the server's /metrics, scraped by the driver
    gpu: GpuPlan | None = None  # GPU telemetry, sampled by the driver
    sessions: SessionPlan | None = None  # multi-turn sessions (--turns), with their state
    percentiles: tuple[float, ...] = ()  # --percentiles, parsed
    images: images.ImageLoad | None = None  # the images each body carries (--images, datasets)
    confidence: float = CONFIDENCE  # --confidence: the level every verdict is decided at
    auto_warmup: bool = True  # --warmup auto: the window starts past MSER-5's transient
    until_decided: bool = False  # --duration auto: the run ends once every SLO is decided
    stop_on_slo_loss: bool = False  # stop sending once an SLO is certainly lost (knee trials)
    api: str | None = None  # the --api kind's name (validated); None: plain HTTP
    insecure: bool = False  # --insecure: no TLS certificate checks
    ray: str | None = None  # --ray ADDRESS: the workers are Ray actors
    cap_given: bool = False  # --max-in-flight given: the whole run's, split among workers
    label: str = ""  # shown before the live line (a sweep step: "[2/5] 40/s")
    progress: bool | None = None  # the live line; None: when stderr is a terminal
    # An LLM run asks the server what it is (llama.cpp's slots: server_props) unless
    # --server-metrics off, which asks the server for nothing but the run's requests.
    ask_server: bool = False

    @property
    def scaled_out(self) -> bool:
        """Whether the run goes to worker processes or Ray actors instead of this process."""
        return (self.workers is not None and self.workers > 1) or bool(self.ray)


def watch_blind(p: Prepared) -> bool:
    """Whether no SLO-loss watch can judge the run, so nothing stops it early: ``--warmup
    auto`` over several processes, where no process sees the ranks that tell which
    requests no cut can reach (docs/sweep.md). The one rule for prepare (refusing
    ``--stop-on-slo-loss``), :func:`loss_watch` and the knee search (no early stop)."""
    return p.auto_warmup and (p.scaled_out or p.share[1] > 1)


def fd_budget() -> int:
    """Raise the open-file soft limit as far as allowed; connections need one each."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return max(16, soft - 64)


def _window(o: RunOptions, warmup_ns: int) -> tuple[int | None, int | None]:
    """(horizon_ns, max_count): the schedule's bounds; warm-up is inside the horizon."""
    count = parse_count(str(o.requests), "--requests") if o.requests is not None else None
    if o.duration == "auto":
        dur = parse_duration_ns(o.max_duration or "300s", "--max-duration", allow_zero=False)
        return warmup_ns + dur, count
    if o.duration is not None:
        dur = parse_duration_ns(o.duration, "--duration", allow_zero=False)
        return warmup_ns + dur, count
    if count is None and not _bounds_itself(o.arrival):
        return warmup_ns + 10_000_000_000, None  # the default: 10 s of measurement
    return None, count


def _bounds_itself(arrival: str) -> bool:
    """Whether ``--arrival`` ends a run by itself (stages, a trace); an unknown name is
    refused later, by the schedule, in the order of the other options' checks."""
    kind = arrivals.find(arrival)
    return kind is not None and kind.own_span


def _llm_bodies(
    o: RunOptions, replay: Replay | None, counter: openai.TokenCounter | None, nonce: str = ""
) -> tuple[list[bytes], list[apis.Prompt]]:
    """Bodies and prompts; ``nonce`` (or "") starts every synthetic prompt after the shared
    prefix (with a tokenizer, inside the exact count)."""
    kind = apis.get(o.api)
    api = kind.name
    if not o.model:
        raise BadInput("--model", None, f"the model name the server serves, for --api {api}")
    if o.body is not None or o.bodies is not None:
        raise BadInput(
            "--body", "with --api", "either --api (tailwise builds the bodies) or --body"
        )
    rng = random.Random(o.seed)
    prompts: list[apis.Prompt]
    if replay is not None and replay.trace.input_lengths is not None:
        if o.prompts:
            raise BadInput("--prompts", o.prompts, "no dataset with a trace that has lengths")
        trace = replay.trace
        if counter is not None and trace.hash_ids is None and trace.input_lengths is not None:
            lengths = [max(1, k) for k in trace.input_lengths[: replay.rows]]
            prompts = list(exact_prompts(counter, lengths, o.seed))  # the trace's tokens
        else:
            prompts = list(trace_prompts(trace, replay.rows, o.seed))
        out_lengths = replay.trace.output_lengths
        max_tokens = (
            [max(1, k) for k in out_lengths[: replay.rows]]
            if out_lengths is not None
            else openai.sample_lengths(str(o.max_tokens), "--max-tokens", replay.rows, rng)
        )
    elif o.prompts:
        rows = openai.read_dataset(o.prompts)
        prompts = [openai.with_nonce(p, nonce) if nonce else p for p, _ in rows]
        drawn = openai.sample_lengths(str(o.max_tokens), "--max-tokens", len(rows), rng)
        max_tokens = [n if n is not None else d for (_, n), d in zip(rows, drawn, strict=True)]
    else:
        n = openai.N_PROMPTS
        lengths = openai.sample_lengths(str(o.input_tokens), "--input-tokens", n, rng)
        prefix = parse_count(str(o.shared_prefix), "--shared-prefix", minimum=0)
        # Sized before a word is drawn: 256 prompts of a million words are 1.8 GB of text.
        # The shared prefix is drawn once but copied into every prompt: it counts n times.
        words = sum(max(n_words - prefix, 1) + prefix for n_words in lengths)
        what = f"words over the {n} synthetic prompts (use --prompts for longer contexts)"
        field = "--shared-prefix" if prefix * n > MAX_PROMPT_WORDS else "--input-tokens"
        given = o.shared_prefix if field == "--shared-prefix" else o.input_tokens
        within(field, words, MAX_PROMPT_WORDS, what, given=given)
        if counter is not None:
            prompts = list(exact_prompts(counter, lengths, o.seed, prefix, nonce))
        else:
            prompts = list(openai.synthetic_prompts(lengths, o.seed, prefix, nonce))
        max_tokens = openai.sample_lengths(str(o.max_tokens), "--max-tokens", n, rng)
    by_row = replay is not None and replay.trace.input_lengths is not None
    prompts, max_tokens = _with_images(o, prompts, max_tokens, fixed=by_row or bool(o.prompts))
    extra = openai.parse_extra_body(o.extra_body)
    if isinstance(kind, RanksDocuments):
        return _ranking_bodies(o, kind, prompts, extra)
    if o.ignore_eos and kind.streams:  # only a generating API has an end of sequence
        extra.setdefault("ignore_eos", True)
    return openai.bodies(api, o.model, max_tokens, prompts, o.stream, extra), prompts


def _ranking_bodies(
    o: RunOptions, kind: RanksDocuments, queries: list[apis.Prompt], extra: dict[str, Any]
) -> tuple[list[bytes], list[apis.Prompt]]:
    """A ranking kind's bodies: each query with its drawn documents. The prompts handed
    back are query and documents as one text, what a ``--tokenizer`` counts as input."""
    docs, tokens = o.documents, o.document_tokens
    drawn = documents.rankings(queries, _spec(docs), _spec(tokens), o.seed)
    out = []
    for r in drawn:
        body = kind.ranking_body(o.model or "", r.query, r.documents)
        body.update(extra)
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out, [r.text() for r in drawn]


def _spec(value: int | str | None) -> str | None:
    return str(value) if value is not None else None


def _check_documents(o: RunOptions) -> None:
    """--documents and --document-tokens only where a kind sends documents."""
    if o.documents is None and o.document_tokens is None:
        return
    if isinstance(apis.find(o.api), RanksDocuments):
        return
    field = "--documents" if o.documents is not None else "--document-tokens"
    given = o.documents if o.documents is not None else o.document_tokens
    ranking = [n for n in apis.names() if isinstance(apis.get(n), RanksDocuments)]
    kinds = " or ".join([", ".join(ranking[:-1]), ranking[-1]] if len(ranking) > 1 else ranking)
    raise BadInput(field, given, f"only with --api {kinds} (the kinds that send documents)")


def _with_images(
    o: RunOptions, prompts: list[apis.Prompt], max_tokens: list[int], fixed: bool
) -> tuple[list[apis.Prompt], list[int]]:
    """--images, --image-size and a dataset's own images, attached (see loadgen.prepare.images).
    ``fixed``: one body per dataset or trace row (else synthetic prompts, used in turn)."""
    rows = image_rows.read_row_images(o.prompts) if o.prompts else None
    if _multi_turn(o) and (images.asked(o.images) or rows):
        # a turn's body is rendered when it comes due: megabytes of history on the send path
        raise BadInput("--turns", o.turns, "1 with images (a session resends its history)")
    return images.attach(
        prompts,
        max_tokens,
        api=apis.get(o.api).name,
        count=o.images,
        size=o.image_size,
        seed=o.seed,
        targets=len(o.urls),
        rows=rows,
        fixed=fixed,
    )


def _requests(
    o: RunOptions,
    replay: Replay | None,
    counter: openai.TokenCounter | None = None,
    nonce: str = "",
) -> tuple[list[Target], list[list[bytes]], str, list[tuple[str, str]], list[apis.Prompt]]:
    """Targets, rendered requests per target, method, headers, and the LLM prompts if any."""
    if not o.urls:
        raise BadInput("URL", "", "at least one target URL")
    if o.api:
        apis.get(o.api)  # an unknown --api: one line naming the known kinds
    _check_documents(o)
    urls = [openai.api_url(u, o.api) for u in o.urls] if o.api else o.urls
    targets = [parse_url(u) for u in urls]
    headers = [parse_header(h) for h in o.header]
    for name, value in headers:
        credentials.remember_header(name, value)  # scrubbed from every output by value
    for url in o.urls:
        credentials.remember_url(url)
    if o.api:
        headers += openai.auth_header(o.api_key)
    if o.body is not None and o.bodies is not None:
        raise BadInput("--body", "with --bodies", "one of --body or --bodies")
    bodies: list[bytes | None] = [None]
    prompts: list[apis.Prompt] = []
    if o.api:
        llm_bodies, prompts = _llm_bodies(o, replay, counter, nonce)
        bodies = list(llm_bodies)
    elif images.asked(o.images):
        raise BadInput("--images", o.images, f"--api {' or '.join(images.IMAGE_KINDS)}")
    elif o.body is not None:
        bodies = [read_body(o.body)]
    elif o.bodies is not None:
        bodies = list(read_bodies_jsonl(o.bodies))
    method = parse_method(o.method) if o.method else ("POST" if bodies != [None] else "GET")
    payloads = [[render(t, method, headers, b) for b in bodies] for t in targets]
    return targets, payloads, method, headers, prompts


def _multi_turn(o: RunOptions) -> bool:
    return str(o.turns).strip() not in ("1", "")


def _nonce(o: RunOptions) -> str:
    """The run's prompt nonce: chat and completions only (an embedding has no prefix cache)."""
    if not o.unique_prompts or not _streams(o) or _multi_turn(o):
        return ""  # sessions ask for reuse: each turn resends its session's history
    return openai.new_nonce()


def _streams(o: RunOptions) -> bool:
    """Whether ``--api`` names a kind that generates a token stream."""
    kind = apis.find(o.api)
    return kind is not None and kind.streams


def check_seed(seed: object, field: str = "--seed") -> int:
    """A schedule seed: NumPy's generators take a whole number from 0 to 2**64 - 1."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise BadInput(field, seed, "a whole number from 0 to 2**64 - 1")
    return seed


def prepare(o: RunOptions) -> Prepared:
    check_seed(o.seed)
    o = replace(o, confidence=parse_confidence(o.confidence))
    warmup_ns = 0 if o.warmup == "auto" else parse_duration_ns(o.warmup, "--warmup")
    horizon_ns, max_count = _window(o, warmup_ns)
    replay = read_replay(o.arrival, o.trace_speed, horizon_ns, max_count)
    counter = openai.TokenCounter(o.tokenizer) if o.tokenizer else None
    nonce = _nonce(o) if replay is None else ""
    targets, payloads, method, headers, prompts = _requests(o, replay, counter, nonce)
    streaming = bool(_streams(o) and o.stream)
    prompt_tokens = [counter.count_prompt(p) for p in prompts] if counter and prompts else None
    attain = parse_fraction(o.attainment, "--attainment")
    slos = [parse_slo(s, attain) for s in o.slo]
    for s in slos:
        if s.needs_llm and not streaming:
            raise BadInput(
                "--slo", s.spec, "a metric an HTTP run measures (latency, e2e, service, send_lag)"
            )
    slos = or_default(slos)
    concurrency = parse_count(str(o.concurrency), "--concurrency") if o.concurrency else None
    if concurrency is not None:
        within("--concurrency", concurrency, MAX_CONCURRENCY, "closed-loop users")
    schedule = None
    if concurrency is None:
        schedule = parse_schedule(
            o.arrival,
            o.rate,
            seed=o.seed,
            horizon_ns=horizon_ns,
            max_count=max_count,
            trace=replay.trace if replay is not None else None,
        )
        if horizon_ns is None:
            horizon_ns = schedule.horizon_ns  # stages bound the run themselves
        field_name, given = ("--rate", o.rate) if o.rate is not None else ("--arrival", o.arrival)
        over = f" for {o.duration}" if o.duration and o.requests is None else ""
        check_planned(schedule, field_name, f"{given}{over}")
    elif o.rate is not None:
        raise BadInput(
            "--rate", o.rate, "no rate with --concurrency (closed loop sets its own pace)"
        )
    elif horizon_ns is None and max_count is None:
        raise BadInput("--duration", None, "a duration or --requests for a closed-loop run")
    workers = _scale_out(o, concurrency)
    sessions = _sessions(o, payloads, concurrency, workers, method, headers)
    budget = fd_budget()
    cap = (
        parse_count(str(o.max_in_flight), "--max-in-flight")
        if o.max_in_flight
        else min(DEFAULT_MAX_IN_FLIGHT, budget)
    )
    within("--max-in-flight", cap, MAX_IN_FLIGHT, "outstanding requests")
    shown = parse_percentiles(o.percentiles) if o.percentiles else ()
    prepared = Prepared(
        percentiles=shown,
        images=images.load(prompts),
        opts=o,
        targets=targets,
        payloads=payloads,
        schedule=schedule,
        horizon_ns=horizon_ns,
        max_count=max_count,
        warmup_ns=warmup_ns,
        slos=slos,
        max_in_flight=concurrency or cap,
        concurrency=concurrency,
        think_ns=parse_duration_ns(o.think, "--think"),
        timeout_ns=parse_duration_ns(o.timeout, "--timeout", allow_zero=False),
        connect_timeout_ns=parse_duration_ns(
            o.connect_timeout, "--connect-timeout", allow_zero=False
        ),
        grace_ns=parse_duration_ns(o.grace, "--grace"),
        max_send_lag_ns=parse_duration_ns(o.max_send_lag, "--max-send-lag", allow_zero=False)
        if o.max_send_lag is not None
        else None,
        method=method,
        headers=headers,
        streaming=streaming,
        counter=counter,
        prompt_tokens=prompt_tokens,
        nonce=nonce.encode() if nonce else None,
        reuse_asked=parse_count(str(o.shared_prefix), "--shared-prefix", minimum=0) > 0
        or _multi_turn(o),
        workers=workers,
        sessions=sessions,
        scrape=plan_scrape(
            o.server_metrics,
            o.server_metrics_interval,
            targets[0].url,
            llm=bool(o.api),
            insecure=o.insecure,
        ),
        gpu=plan_gpu(o.gpu_metrics, o.gpu_metrics_interval, o.insecure),
        confidence=float(o.confidence),
        auto_warmup=o.warmup == "auto",
        until_decided=o.duration == "auto",
        stop_on_slo_loss=o.stop_on_slo_loss,
        api=o.api,
        insecure=o.insecure,
        ray=o.ray,
        cap_given=bool(o.max_in_flight),
        label=o.label or "",
        progress=o.progress,
        ask_server=bool(o.api) and str(o.server_metrics).strip().lower() != "off",
    )
    if prepared.stop_on_slo_loss and watch_blind(prepared):
        raise BadInput(
            "--stop-on-slo-loss",
            "with --warmup auto over several processes",
            "a fixed --warmup (e.g. 2s), or one process",
        )
    sequential(prepared)  # a --duration auto the run cannot honour fails here, before traffic
    return prepared


def _sessions(
    o: RunOptions,
    payloads: list[list[bytes]],
    concurrency: int | None,
    workers: int | None,
    method: str,
    headers: list[tuple[str, str]],
) -> SessionPlan | None:
    turns = parse_turns(o.turns)
    if turns == 1:
        return None
    kind = apis.find(o.api)
    if kind is None or not kind.sessions:
        talk = " or ".join(n for n in apis.names() if apis.get(n).sessions)
        raise BadInput("--turns", o.turns, f"--api {talk} (a session is a conversation)")
    if concurrency is not None or workers is not None or o.ray:
        raise BadInput("--turns", o.turns, "one open-loop process (no --concurrency, --workers)")
    think_ns = parse_duration_ns(o.think, "--think")
    raw = [b.split(b"\r\n\r\n", 1)[1] for b in payloads[0]]  # the JSON bodies rendered
    plan = session_plan(raw, turns, think_ns, method, headers)
    if o.prompts:
        plan.conversations = read_conversations(o.prompts)
        rng = random.Random(o.seed + 1)
        n = openai.N_PROMPTS
        plan.default_max_tokens = openai.sample_lengths(str(o.max_tokens), "--max-tokens", n, rng)
    return plan


def _scale_out(o: RunOptions, concurrency: int | None) -> int | None:
    """Worker processes asked for (None: a single process, or as many as Ray has CPUs)."""
    if o.workers is None and not o.ray:
        return None
    if concurrency is not None:
        given = o.workers or f"--ray {o.ray}"
        raise BadInput("--workers", given, "one process for --concurrency (closed loop)")
    return parse_workers(o.workers, ray=bool(o.ray))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_workers(text: int | str | None, *, ray: bool) -> int | None:
    """``--workers``: N, or ``auto`` (this machine's cores; with ``--ray``, the cluster's CPUs)."""
    if text is None or str(text).strip() == "auto":
        return None if ray or text is None else available_cores()
    n = parse_count(str(text), "--workers")
    if ray:
        within("--workers", n, MAX_RAY_WORKERS, "Ray workers")
    else:
        cores = available_cores()
        what = f"worker processes ({MAX_WORKERS_PER_CORE} per core, {cores} cores here)"
        within("--workers", n, MAX_WORKERS_PER_CORE * cores, what)
    return n


def run_directory(o: RunOptions, target: Target) -> Path:
    if o.out:
        path = Path(o.out)
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        name = o.name or re.sub(r"[^A-Za-z0-9.]+", "-", f"{target.host}-{target.port}").strip("-")
        path = Path("runs") / f"{stamp}-{name}"
        n = 2
        while path.exists():
            path = Path("runs") / f"{stamp}-{name}-{n}"
            n += 1
    return output_directory(path, force=o.force)


def plan_window_end(p: Prepared, rows: int, last_scheduled_ns: int) -> int:
    """The window's end for a plan that produced ``rows`` rows, the last due at the given offset."""
    n, last = rows, last_scheduled_ns
    count_ran_out = p.max_count is not None and n >= p.max_count
    if p.horizon_ns is not None and not count_ran_out:
        return p.horizon_ns
    # Count-bounded: the window closes one mean gap after the last intended instant. With
    # fewer than two rows (or all at one instant) there is no observed gap: the plan's own
    # rate gives it (one request at 1/s: a 1 s window, not 1 ns and "1e9/s offered").
    gap = last // (n - 1) if n > 1 else 0
    if gap <= 0:
        gap = _nominal_gap_ns(p)
    end = last + gap
    return min(end, p.horizon_ns) if p.horizon_ns is not None else end


def _nominal_gap_ns(p: Prepared) -> int:
    rate = p.schedule.rate_rps if p.schedule is not None else None
    if rate is not None and rate > 0:
        return max(int(1e9 / rate), 1)
    return 1_000_000_000  # no rate to go by (a trace, stages): one second


def sequential(p: Prepared) -> Sequential | None:
    """The decision watch of a ``--duration auto`` run (None for a fixed length).

    Raises BadInput where the run cannot be sequential: no steady open-loop rate, or
    spread over several processes (each would see only its share)."""
    if not p.until_decided:
        return None
    rate = p.schedule.rate_rps if p.schedule is not None else None
    if not rate:  # None unless steady: a closed loop, a shape or a trace
        raise BadInput(
            "--duration", "auto", "a fixed duration unless the run has one steady --rate"
        )
    if p.scaled_out:
        raise BadInput("--duration", "auto", "a fixed duration with --workers or --ray")
    assert p.horizon_ns is not None
    looks = plan_looks(float(rate) * (p.horizon_ns - p.warmup_ns) / 1e9, p.confidence)
    window = (p.warmup_ns, p.horizon_ns)
    return Sequential(p.slos, window, looks, auto_warmup=p.auto_warmup)


def loss_watch(p: Prepared) -> LossWatch | None:
    """The SLO-loss watch of a run (None where it cannot judge: not a steady open-loop rate;
    or ``--warmup auto`` over several processes, where no process sees the ranks that
    tell which requests no cut can reach: those trials run to their end)."""
    if p.schedule is None or p.horizon_ns is None or watch_blind(p):
        return None
    rate = p.schedule.rate_rps
    if not rate:  # None unless steady: a shape or a trace has no one rate to judge
        return None
    expected = float(rate) * (p.horizon_ns - p.warmup_ns) / 1e9
    watch = LossWatch(p.slos, (p.warmup_ns, p.horizon_ns), expected, auto_warmup=p.auto_warmup)
    return watch if watch.limits else None


def run_json(p: Prepared, started_unix: float) -> dict[str, Any]:
    opts = asdict(p.opts)
    opts.pop("header", None)  # header values may carry credentials: never written
    opts.pop("api_key", None)
    if opts.get("body") and not str(opts["body"]).startswith("@"):
        opts["body"] = f"<{len(str(opts['body']).encode())} bytes, not saved>"
    opts["urls"] = [t.url for t in p.targets]
    if opts.get("server_metrics") and str(opts["server_metrics"]).lower() != "off":
        opts["server_metrics"] = credentials.masked_url(str(opts["server_metrics"]))
    if str(opts.get("gpu_metrics") or "").startswith("dcgm="):
        opts["gpu_metrics"] = "dcgm=" + credentials.masked_url(str(opts["gpu_metrics"])[5:])
    return {
        "started_utc": dt.datetime.fromtimestamp(started_unix, dt.UTC).isoformat(),
        "options": opts,
        "requests": describe(p.targets, p.method, p.headers),
        "window_ns": [p.warmup_ns, p.horizon_ns],
        "slos": [s.spec for s in p.slos],
        **({"images": images.run_doc(p.images)} if p.images else {}),
    }
