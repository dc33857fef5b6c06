"""``tailwise serve-demo``: the built-in targets on uvicorn + starlette (``tailwise[server]``).

* ``llm``: OpenAI-compatible completions, chat and Responses (streaming or not) on the
  continuous-batching engine of :mod:`tailwise.server.engine`, and rerank and score
  (:mod:`tailwise.server.rank_app`: one engine sequence per query-document pair);
* ``embed``: ``/v1/embeddings`` on the dynamic batcher of :mod:`tailwise.server.batcher`;
* ``http``: ``/predict``, the c-worker queueing lab of :mod:`tailwise.server.law`.

Every kind serves ``/health`` and ``/metrics`` (Prometheus text: the server's
own truth, to set beside what the client measured). The app runs inside
:class:`tailwise.instrument.LatencyMiddleware`, so ``/metrics`` also carries
per-route latency histograms and live percentiles, time to first chunk of
streams, requests in flight and the live Little's-law check. Binds 127.0.0.1 unless
told otherwise; port 0 picks a free port, and the first line on stdout is
``listening on URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import socket
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tailwise.errors import BadInput, MissingExtra
from tailwise.instrument import promtext as prom
from tailwise.laws.llm import EngineConfig
from tailwise.server import rank_app
from tailwise.server.batcher import BatchConfig, Batcher, BatchQueueFull
from tailwise.server.engine import STEP_BUCKETS_S, Engine, QueueFull
from tailwise.server.law import Law, QueueLab
from tailwise.server.llm_app import (
    EngineResponse,
    LLMRequest,
    WireError,
    error_body,
    parse_json,
    parse_request,
    parse_responses_request,
    renderer,
)

KINDS = ("llm", "embed", "http")


def _starlette() -> Any:
    try:
        import starlette.applications
        import starlette.responses
        import starlette.routing
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("serve-demo", "server", exc.name or "starlette") from None
    return starlette


@dataclass
class DemoConfig:
    kind: str = "llm"
    model: str = "tailwise-demo"
    engine: EngineConfig = field(default_factory=EngineConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    law: Law = field(default_factory=lambda: Law(0.005, "exp", 4))
    dim: int = 16


Handler = Callable[[Any], Awaitable[Any]]
Extra = Callable[[], str]  # more exposition text for /metrics (the instrumentation's)


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
    responses = _starlette().responses
    return responses.JSONResponse(payload, status_code=status, headers=headers)


def _refuse(exc: WireError) -> Any:
    return _json(exc.status, error_body(exc.status, str(exc), exc.kind))


# -- llm ----------------------------------------------------------------------


def _llm_routes(
    cfg: DemoConfig, engine: Engine, extra: Extra
) -> list[tuple[str, Handler, list[str]]]:
    def endpoint(api: str) -> Handler:
        async def handle(request: Any) -> Any:
            try:
                body = parse_json(await bounded_body(request))
                if api == "responses":
                    req = parse_responses_request(body, cfg.model)
                else:
                    req = parse_request(body, api == "chat", cfg.model)
            except WireError as exc:
                engine.stats.count(engine.stats.rejected, "bad_request")
                return _refuse(exc)
            try:
                return _admit(engine, req)
            except WireError as exc:
                return _refuse(exc)

        return handle

    async def models(request: Any) -> Any:
        entry = {
            "id": cfg.model,
            "object": "model",
            "owned_by": "tailwise",
            "max_model_len": cfg.engine.max_model_len,
        }
        return _json(200, {"object": "list", "data": [entry]})

    async def metrics(request: Any) -> Any:
        return _metrics_response(_llm_metrics(engine) + extra())

    return [
        ("/v1/completions", endpoint("completions"), ["POST"]),
        ("/v1/chat/completions", endpoint("chat"), ["POST"]),
        ("/v1/responses", endpoint("responses"), ["POST"]),
        ("/v1/models", models, ["GET"]),
        ("/metrics", metrics, ["GET"]),
        *_rank_routes(cfg, engine),
    ]


def _rank_routes(cfg: DemoConfig, engine: Engine) -> list[tuple[str, Handler, list[str]]]:
    """Rerank and score on the same engine (see :mod:`tailwise.server.rank_app`)."""

    def endpoint(route: str) -> Handler:
        async def handle(request: Any) -> Any:
            try:
                req = rank_app.parse_rank(await bounded_body(request), route, cfg.model)
                status, payload = await rank_app.rank(engine, req)
            except WireError as exc:
                engine.stats.count(engine.stats.rejected, "bad_request")
                return _refuse(exc)
            return _json(status, payload, {"Retry-After": "1"} if status == 429 else None)

        return handle

    rerank, score = endpoint("rerank"), endpoint("score")
    return [
        ("/v1/rerank", rerank, ["POST"]),
        ("/rerank", rerank, ["POST"]),
        ("/score", score, ["POST"]),
        ("/v1/score", score, ["POST"]),
    ]


def _admit(engine: Engine, req: LLMRequest) -> Any:
    why = engine.check(req.prompt_tokens, req.max_tokens)
    if why:
        engine.stats.count(engine.stats.rejected, "context_length")
        raise WireError(400, why)
    try:
        seq = engine.submit(req.prompt_tokens, req.max_tokens)
    except QueueFull:
        message = f"waiting queue full ({engine.config.max_waiting}); retry later"
        body = error_body(429, message, "rate_limit_error")
        return _json(429, body, {"Retry-After": "1"})
    return EngineResponse(engine, seq, renderer(req))


def _llm_metrics(engine: Engine) -> str:
    st, cfg = engine.stats, engine.config
    ex = prom.Exposition()
    ex.gauge("queue_depth", len(engine.waiting), "Requests waiting for admission.")
    ex.gauge("running_seqs", len(engine.running), "Sequences in the running batch.")
    ex.gauge("max_num_seqs", cfg.max_num_seqs, "Batch slots.")
    ex.gauge("kv_cache_used_tokens", engine.kv_used_tokens, "KV-cache tokens held.")
    ex.gauge("kv_cache_capacity_tokens", cfg.kv_cache_tokens, "KV-cache size in tokens.")
    usage = engine.kv_used_tokens / cfg.kv_cache_tokens if cfg.kv_cache_tokens else 0.0
    ex.gauge("kv_cache_usage_ratio", usage, "KV-cache held share, 0 to 1.")
    # vllm:num_preemptions_total's meaning (metrics.server reads both as "preemptions")
    ex.counter("preemptions", st.preemptions, "Sequences preempted (paged KV; recompute).")
    ex.gauge("output_tokens_per_second", engine.tokens_per_s(), "Output tokens/s, last 5 s.")
    ex.counter("requests_admitted", st.admitted, "Requests admitted to the batch.")
    ex.counter("requests_finished", st.finished, "Requests that generated all their tokens.")
    ex.labelled_counter(
        "requests_rejected",
        "reason",
        st.rejected,
        ("queue_full", "context_length", "bad_request"),
        "Requests refused before admission.",
    )
    ex.labelled_counter(
        "requests_aborted",
        "reason",
        st.aborted,
        ("timeout", "client_disconnected", "shutdown"),
        "Requests dropped after they were queued.",
    )
    ex.counter("engine_lag_seconds", st.lag_s, "Time the engine ran behind its cost model.")
    ex.counter("prompt_tokens", st.prompt_tokens, "Prompt tokens prefilled.")
    ex.counter("generation_tokens", st.generated_tokens, "Output tokens generated.")
    ex.histogram(
        "step_seconds",
        STEP_BUCKETS_S,
        st.step_seconds_buckets,
        st.steps,
        st.step_seconds_sum,
        "Engine step durations (the cost model's value).",
    )
    for name, hist, what in (
        ("request_queue_time_seconds", st.queue_time, "arrival to admission"),
        ("time_to_first_token_seconds", st.ttft, "arrival to the first token"),
    ):
        counts = hist.counts or [0] * len(hist.bounds)
        ex.histogram(name, hist.bounds, counts, hist.total, hist.sum_s, f"Per request: {what}.")
    return ex.render()


# -- embed --------------------------------------------------------------------


def _embed_routes(
    cfg: DemoConfig, batcher: Batcher, extra: Extra
) -> list[tuple[str, Handler, list[str]]]:
    async def embeddings(request: Any) -> Any:
        try:
            body = parse_json(await bounded_body(request))
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list) or not inputs:
                raise WireError(400, "input: expected a string or a non-empty list of strings")
            texts = [str(x) for x in inputs]
            if len(texts) > batcher.config.max_waiting:  # a retry could never fit: not a 429
                limit = batcher.config.max_waiting
                raise WireError(400, f"input: {len(texts)} inputs; the queue holds {limit}")
        except WireError as exc:
            return _refuse(exc)
        try:
            futures = batcher.submit(len(texts))
        except BatchQueueFull:
            message = f"batch queue full ({batcher.config.max_waiting} inputs); retry later"
            return _json(429, error_body(429, message, "rate_limit_error"), {"Retry-After": "1"})
        await asyncio.gather(*futures)
        tokens = sum(max(len(t.split()), 1) for t in texts)
        data = [
            {"object": "embedding", "index": i, "embedding": _vector(t, cfg.dim)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json(200, {"object": "list", "data": data, "model": cfg.model, "usage": usage})

    async def metrics(request: Any) -> Any:
        return _metrics_response(_embed_metrics(batcher) + extra())

    return [("/v1/embeddings", embeddings, ["POST"]), ("/metrics", metrics, ["GET"])]


def _vector(text: str, dim: int) -> list[float]:
    """A deterministic unit-ish vector per text (same text, same embedding)."""
    digest = hashlib.blake2b(text.encode(), digest_size=4 * dim).digest()
    return [round(v / 2**31 - 1.0, 6) for v in struct.unpack(f"<{dim}I", digest)]


def _embed_metrics(b: Batcher) -> str:
    st = b.stats
    ex = prom.Exposition()
    ex.gauge("queue_depth", len(b.queue), "Inputs waiting for a batch.")
    ex.gauge("running_batch_size", b.running_batch, "Inputs in the batch now running (0: idle).")
    ex.counter("batches", st.batches, "Batches run.")
    ex.counter("inputs", st.items, "Inputs embedded.")
    ex.counter("busy_seconds", st.busy_s, "Time spent running batches.")
    ex.counter("requests_rejected", st.rejected, "Requests refused: queue full.")
    bounds = [2.0**i for i in range(b.config.max_batch.bit_length() + 1)]
    counts = [0] * len(bounds)
    for size, n in st.batch_size_counts.items():
        counts[next(i for i, bound in enumerate(bounds) if size <= bound)] += n
    ex.histogram("batch_size", bounds, counts, st.batches, st.items, "Inputs per batch.")
    return ex.render()


# -- http ---------------------------------------------------------------------


@dataclass
class _HttpState:
    lab: QueueLab
    in_flight: int = 0


def _http_routes(state: _HttpState, extra: Extra) -> list[tuple[str, Handler, list[str]]]:
    async def predict(request: Any) -> Any:
        try:
            raw = await bounded_body(request)
            if raw:
                parse_json(raw)
        except WireError as exc:
            return _refuse(exc)
        lab = state.lab
        state.in_flight += 1
        try:
            due_s = lab.finish_at(lab.now_s())
            await asyncio.sleep(max(due_s - lab.now_s(), 0.0))
        finally:
            state.in_flight -= 1
        lab.served += 1
        return _json(200, {"ok": True})

    async def metrics(request: Any) -> Any:
        lab = state.lab
        ex = prom.Exposition()
        ex.gauge("in_flight", state.in_flight, "Requests queued or in service.")
        ex.gauge("busy_workers", lab.busy_workers(lab.now_s()), "Workers serving now.")
        ex.gauge("workers", lab.law.workers, "FCFS workers (0: unlimited).")
        ex.counter("requests_served", lab.served, "Responses sent.")
        ex.counter("busy_seconds", lab.busy_s, "Work handed to workers (utilization = rate/c).")
        return _metrics_response(ex.render() + extra())

    return [("/predict", predict, ["GET", "POST"]), ("/metrics", metrics, ["GET"])]


# -- assembly -----------------------------------------------------------------


def _metrics_response(text: str) -> Any:
    return _starlette().responses.Response(text, media_type=prom.CONTENT_TYPE)


def build_app(cfg: DemoConfig) -> Any:
    """The app for ``cfg.kind`` in the latency middleware; its engine starts and stops with it."""
    from tailwise.instrument import LatencyMiddleware, LatencyTracker, exposition

    st = _starlette()
    tracker = LatencyTracker(cfg.kind)
    held: list[LatencyMiddleware] = []  # the middleware wraps the app the routes belong to

    def extra() -> str:
        return exposition(*held)

    workers: list[Engine | Batcher] = []
    if cfg.kind == "llm":
        engine = Engine(cfg.engine)
        workers.append(engine)
        routes = _llm_routes(cfg, engine, extra)
    elif cfg.kind == "embed":
        batcher = Batcher(cfg.batch)
        workers.append(batcher)
        routes = _embed_routes(cfg, batcher, extra)
    else:
        routes = _http_routes(_HttpState(QueueLab(cfg.law)), extra)

    async def health(request: Any) -> Any:
        return _json(200, {"status": "ok", "kind": cfg.kind})

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        for w in workers:
            w.start()
        yield
        for w in workers:
            await w.stop()

    table = [st.routing.Route(path, fn, methods=methods) for path, fn, methods in routes]
    table.append(st.routing.Route("/health", health, methods=["GET"]))
    app = st.applications.Starlette(routes=table, lifespan=lifespan)
    held.append(LatencyMiddleware(app, tracker))
    return held[0]


MAX_BODY_BYTES = 16 << 20  # far above any prompt a demo target models


async def bounded_body(request: Any, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, refused (413) past ``limit`` bytes: by its Content-Length before a
    byte is read, else as it streams in. An 800 MiB body was buffered whole (860 MB RSS)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise WireError(413, f"request body of {length} bytes; at most {limit}")
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise WireError(413, f"request body over {limit} bytes")
        parts.append(part)
    return b"".join(parts)


MAX_PIPELINED = 32  # requests parsed ahead of their answers, per connection
FEED_BYTES = 4096  # what is parsed at a time while requests are pipelined


def bounded_pipeline() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with its pipeline bounded.

    uvicorn parses every request in a read and queues those pipelined behind the one
    being answered, and resumes reading after each answer: 500 connections pipelining
    2,000 requests each held 2.4 GB, /health unanswered for 20 s. Here a connection's
    bytes are parsed :data:`FEED_BYTES` at a time, only while fewer than
    :data:`MAX_PIPELINED` requests wait, and the socket is not read while bytes wait
    unparsed: per connection at most 32 queued requests and one read (256 KiB) held.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedPipeline(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.held = bytearray()

        def data_received(self, data: bytes) -> None:
            self.held += data
            self.feed()

        def feed(self) -> None:
            held = self.held
            while held and len(self.pipeline) < MAX_PIPELINED:
                if self.transport.is_closing():
                    held.clear()
                    return
                piece = bytes(held[:FEED_BYTES])
                del held[:FEED_BYTES]
                super().data_received(piece)
            if held:
                self.flow.pause_reading()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # starts the next queued request, resumes reading
            if self.held:
                self.feed()

    return BoundedPipeline


def stopping_server() -> type[Any]:
    """uvicorn's server, ending with exit 0 after a stop asked by SIGINT or SIGTERM.

    uvicorn raises a caught signal again once it has shut down, so the process died of
    it (exit 143 after SIGTERM) although every connection was closed as documented.
    """
    import signal

    import uvicorn

    class StoppingServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            stops = (signal.SIGINT, signal.SIGTERM)
            before = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    return StoppingServer


def serve(cfg: DemoConfig, host: str, port: int, lifetime_s: float | None) -> None:
    """Bind, print ``listening on URL``, serve until SIGINT/SIGTERM or the lifetime ends."""
    _starlette()
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit this. Without it, uvloop serving a socket we
    # bound leaves Nagle on, and a token written right after the headers waits
    # for the client's delayed ACK: a 40 ms TTFT that no engine produced.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise BadInput("--port", port, f"a free port, or 0 to pick one ({exc.strerror})") from None
    sock.listen(4096)  # before the line is printed, so a client may connect at once
    bound = sock.getsockname()
    config = uvicorn.Config(
        build_app(cfg),
        loop="uvloop" if sys.platform != "win32" else "asyncio",
        http=bounded_pipeline(),
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,  # then cut: under a flood SIGTERM -> exit 0 within 4 s
    )
    server = stopping_server()(config)
    print(f"listening on http://{bound[0]}:{bound[1]}", flush=True)

    async def main() -> None:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        started = time.monotonic()
        while not task.done():
            if lifetime_s is not None and time.monotonic() - started > lifetime_s:
                server.should_exit = True
            await asyncio.sleep(0.2)
        await task

    asyncio.run(main())


def describe(cfg: DemoConfig) -> str:
    """One line on what the target is, for stderr at start-up."""
    if cfg.kind == "llm":
        e = cfg.engine
        return (
            f"llm target: step = {e.base_s * 1e3:g} ms + {e.prefill_s_per_token * 1e3:g} ms x "
            f"prefill tokens + {e.decode_s_per_seq * 1e3:g} ms x decoding seqs"
            + (f" + {e.kv_s_per_token * 1e3:g} ms x KV tokens" if e.kv_s_per_token else "")
            + f"; max_num_seqs {e.max_num_seqs}, KV {e.kv_cache_tokens} tokens "
            + (
                f"(paged, blocks of {e.kv_block_tokens}, watermark {e.kv_watermark:g})"
                if e.kv_allocation == "paged"
                else "(reserved)"
            )
            + f", chunked prefill {e.prefill_chunk_tokens or 'off'}, waiting queue {e.max_waiting}"
        )
    if cfg.kind == "embed":
        b = cfg.batch
        return (
            f"embed target: batch = {b.base_s * 1e3:g} ms + {b.per_item_s * 1e3:g} ms x B, "
            f"max batch {b.max_batch}, max wait {b.max_wait_s * 1e3:g} ms"
        )
    law = cfg.law
    return (
        f"http target: {law.workers or 'unlimited'} FCFS workers, {law.distribution} "
        f"service, mean {law.service_s * 1e3:g} ms"
        + (
            f", stragglers {law.straggler_p:.2%} x{law.straggler_factor:g}"
            if law.straggler_p
            else ""
        )
        + (f", stall {law.stall_s:g}s every {law.period_s:g}s" if law.stall_s else "")
    )


def _paged_options(kw: dict[str, Any]) -> dict[str, Any]:
    """--kv-allocation, --kv-block-tokens and --kv-watermark, checked (BadInput)."""
    from tailwise.laws.llm import KV_ALLOCATIONS
    from tailwise.units import parse_count

    allocation = str(kw["kv_allocation"])
    if allocation not in KV_ALLOCATIONS:
        raise BadInput("--kv-allocation", allocation, " | ".join(KV_ALLOCATIONS))
    block = parse_count(str(kw["kv_block_tokens"]), "--kv-block-tokens")
    cache = parse_count(str(kw["kv_cache_tokens"]), "--kv-cache-tokens")
    if block > cache:
        raise BadInput("--kv-block-tokens", block, f"at most --kv-cache-tokens ({cache})")
    try:
        watermark = float(kw["kv_watermark"])
    except ValueError:
        watermark = math.nan
    if not 0.0 <= watermark < 1.0:
        raise BadInput("--kv-watermark", kw["kv_watermark"], "a share of the blocks, 0 <= w < 1")
    return {"kv_allocation": allocation, "kv_block_tokens": block, "kv_watermark": watermark}


def config_from_options(kw: dict[str, Any]) -> DemoConfig:
    """Build a :class:`DemoConfig` from ``serve-demo``'s option strings (BadInput when wrong)."""
    from tailwise.server.law import parse_law
    from tailwise.units import parse_count, parse_duration_ns

    def seconds(name: str) -> float:
        return parse_duration_ns(kw[name], "--" + name.replace("_", "-")) / 1e9

    def count(name: str, minimum: int = 1) -> int:
        return parse_count(str(kw[name]), "--" + name.replace("_", "-"), minimum=minimum)

    engine = EngineConfig(
        base_s=seconds("step_base"),
        prefill_s_per_token=seconds("per_prefill_token"),
        decode_s_per_seq=seconds("per_seq"),
        max_num_seqs=count("max_num_seqs"),
        kv_cache_tokens=count("kv_cache_tokens"),
        prefill_chunk_tokens=count("chunked_prefill", 0),
        max_waiting=count("max_waiting", 0),
        max_model_len=count("max_model_len"),
        request_timeout_s=seconds("request_timeout"),
        kv_s_per_token=seconds("per_kv_token"),
        **_paged_options(kw),
    )
    batch = BatchConfig(
        max_batch=count("max_batch"),
        max_wait_s=seconds("max_wait"),
        base_s=seconds("batch_base"),
        per_item_s=seconds("per_item"),
        max_waiting=count("max_waiting_inputs"),
    )
    law = parse_law(kw["service"], count("workers", 0), kw["stall"], kw["seed"], kw["straggler"])
    return DemoConfig(kw["kind"], kw["model"], engine, batch, law, count("dim"))
