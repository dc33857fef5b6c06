"""Option decorators and output helpers shared by more than one command module."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tailwise import arrivals
from tailwise.errors import ExitCode
from tailwise.loadgen.llm import apis
from tailwise.metrics.uncertainty import CONFIDENCE

F = TypeVar("F", bound=Callable[..., Any])


def invoked_argv() -> list[str] | None:
    """The arguments tailwise was started with (for a report's metadata), if known."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    argv = obj.get("argv") if isinstance(obj, dict) else None
    return list(argv) if isinstance(argv, list) else None


def _api_kind(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--api``: a registered API kind's name (else one line listing the known kinds)."""
    return apis.get(value).name if value is not None else None


def run_options(f: F) -> F:
    """The load-generator options of run, sweep and knee."""
    opts = [
        click.option("--rate", help="Offered rate, e.g. 500/s (open loop)."),
        click.option(
            "--arrival",
            default="poisson",
            show_default=True,
            # The registry's forms, so a kind registered before the CLI is built shows too.
            help=" | ".join(kind.form for kind in arrivals.kinds())
            + " (a trace: offsets, Azure CSV, Mooncake JSONL)",
        ),
        click.option(
            "--trace-speed",
            help="Replay a trace faster (2x) or slower (0.5x): offsets divided by it.",
        ),
        click.option(
            "--duration",
            help="Measurement window, e.g. 60s (default 10s), or auto: until every SLO is "
            "decided at --confidence, up to --max-duration.",
        ),
        click.option(
            "--confidence",
            default=f"{100 * CONFIDENCE:g}%",
            show_default=True,
            help="How sure a verdict must be (80%-99.9%): a pass or fail is wrong at most "
            "1 - this; intervals are shown at this level. Lower decides sooner.",
        ),
        click.option(
            "--max-duration",
            help="The cap of --duration auto (default 300s for run, 120s per step or trial "
            "of sweep and knee).",
        ),
        click.option("--requests", "requests", help="Stop after this many requests."),
        click.option(
            "--warmup",
            default="auto",
            show_default=True,
            help="Recorded and flagged but excluded from statistics: a duration, or auto "
            "(the initial transient that MSER-5 finds, when there is one).",
        ),
        click.option("--seed", default=0, show_default=True, type=int, help="Schedule seed."),
        click.option(
            "--slo",
            multiple=True,
            help='"latency<=200ms", "p99(latency)<=200ms", "error_rate<=1%" (repeatable).',
        ),
        click.option(
            "--attainment",
            default="99%",
            show_default=True,
            help="Share of requests a per-request SLO must reach.",
        ),
        click.option("--max-in-flight", help="Cap on outstanding requests (client queue beyond)."),
        click.option("--concurrency", help="CLOSED-LOOP mode with N users (for comparison)."),
        click.option(
            "--think",
            default="0s",
            show_default=True,
            help="Think time: closed loop, between requests; with --turns, between turns.",
        ),
        click.option(
            "--turns",
            default="1",
            show_default=True,
            help="Chat turns per session (--api openai-chat): each arrival starts a "
            "session whose turns carry the conversation so far.",
        ),
        click.option("--timeout", default="30s", show_default=True, help="Total request timeout."),
        click.option("--connect-timeout", default="5s", show_default=True),
        click.option(
            "--grace",
            default="2s",
            show_default=True,
            help="On Ctrl-C/SIGTERM, how long in-flight requests may finish.",
        ),
        click.option(
            "--max-send-lag",
            help="Optional: send-lag p99 above this marks the run invalid. By default the "
            "run is invalid only when the client's own lag could flip a verdict.",
        ),
        click.option("-X", "--method", help="HTTP method (default GET, or POST with a body)."),
        click.option(
            "-H", "--header", multiple=True, help="'Name: value' (repeatable; never saved)."
        ),
        click.option("--body", help="Request body: a literal, or @file."),
        click.option("--bodies", help="JSONL file: one body per line, used in turn."),
        click.option("-o", "--out", help="Run directory (default runs/<UTC time>-<target>/)."),
        click.option(
            "--force",
            is_flag=True,
            help="Let --out name a directory that holds an earlier run (its files are replaced).",
        ),
        click.option("--name", help="Name for the default run directory."),
        click.option("--insecure", is_flag=True, help="Skip TLS certificate verification."),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Live status line (default: when stderr is a terminal).",
        ),
        click.option(
            "--api",
            callback=_api_kind,
            help="The endpoint's API kind: "
            + " | ".join(apis.names())
            + " (TTFT, ITL, TPOT, token rates).",
        ),
        click.option("--model", help="Model name the server serves (with --api)."),
        click.option(
            "--max-tokens",
            default="128",
            show_default=True,
            help="Output tokens to ask for: N, uniform:A-B, normal:M,SD or lognormal:MEDIAN,SIGMA.",
        ),
        click.option(
            "--input-tokens",
            default="128",
            show_default=True,
            help="Synthetic prompt length in words (~tokens); the same forms.",
        ),
        click.option(
            "--documents",
            help="rerank, tei-rerank, score: documents per request, N or a distribution "
            "as --max-tokens (default 10, at most 10,000).",
        ),
        click.option(
            "--document-tokens",
            help="rerank, tei-rerank, score: words (~tokens) per document; the same forms "
            "(default 128).",
        ),
        click.option("--prompts", help="JSONL dataset: prompt, messages or ShareGPT rows."),
        click.option(
            "--shared-prefix",
            default="0",
            show_default=True,
            help="Words every synthetic prompt starts with (prefix caching).",
        ),
        click.option(
            "--images",
            default="0",
            show_default=True,
            help="Synthetic PNG images per chat request (--api openai-chat): N or a "
            "distribution as --max-tokens; a --prompts row may name its own ('images').",
        ),
        click.option(
            "--image-size",
            default="512x512",
            show_default=True,
            help="Width x height of the synthetic images, in pixels (1 to 4096 each).",
        ),
        click.option(
            "--tokenizer",
            help="tokenizer.json to count tokens when the server "
            "reports no usage (pip install 'tailwise[tokenizers]').",
        ),
        click.option(
            "--server-metrics",
            help="Prometheus URL scraped during the run (vLLM, SGLang, TGI, llama.cpp); "
            "default with --api: the target's /metrics if it answers; off to disable "
            "(and the one GET /props that reads llama.cpp's slot count).",
        ),
        click.option(
            "--server-metrics-interval",
            default="1s",
            show_default=True,
            help="Time between scrapes (100ms to 60s).",
        ),
        click.option(
            "--gpu-metrics",
            help="GPU telemetry on the run's timeline: nvml (this machine's GPUs; pip install "
            "'tailwise[gpu]') or dcgm=http://HOST:9400/metrics (a DCGM exporter); adds "
            "energy per output token and per good request.",
        ),
        click.option(
            "--gpu-metrics-interval",
            default="500ms",
            show_default=True,
            help="Time between GPU samples (100ms to 60s).",
        ),
        click.option("--api-key", help="Bearer token (default $OPENAI_API_KEY); never saved."),
        click.option("--extra-body", help="JSON object merged into each request body."),
        click.option(
            "--stream/--no-stream",
            default=True,
            show_default=True,
            help="Stream chat/completions responses (with --api).",
        ),
        click.option(
            "--unique-prompts/--no-unique-prompts",
            default=True,
            show_default=True,
            help="Start every prompt with a per-request nonce, so a prefix cache cannot "
            "serve one request from another (--shared-prefix words come before it).",
        ),
        click.option(
            "--ignore-eos",
            is_flag=True,
            help="Send ignore_eos: true, so the server generates exactly --max-tokens.",
        ),
        click.option(
            "--workers",
            help="Load-generator processes sharing one arrival plan: N, or auto (one per "
            "core; with --ray, one per CPU of the cluster). See docs/scale.md.",
        ),
        click.option(
            "--ray",
            help="Run the workers as actors on a Ray cluster: auto, local, HOST:6379 or "
            "ray://HOST:10001 (pip install 'tailwise[ray]').",
        ),
        click.option(
            "--stop-on-slo-loss",
            is_flag=True,
            help="Stop sending once an SLO can no longer pass (judged over all workers).",
        ),
        click.option(
            "--percentiles",
            help="Percentiles to show, vLLM-bench style: 50,90,99,99.9 (others are "
            "added to summary.json under p<q>).",
        ),
        click.option(
            "--preflight/--no-preflight",
            default=True,
            show_default=True,
            help="Send one cheap request to each target first; stop at once on an error "
            "answer, a wrong model or an unreachable target (exit 7 or 6).",
        ),
        click.option(
            "--dashboard",
            is_flag=True,
            help="Serve the live figures as charts on http://127.0.0.1 (a page updated each "
            "second) until the command ends.",
        ),
        click.option(
            "--dashboard-port",
            type=int,
            default=0,
            show_default=True,
            help="With --dashboard: the port (0: a free one).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print summary.json to stdout."),
        click.option("-q", "--quiet", is_flag=True, help="No terminal summary."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


_SERVE_OPTIONS = [
    ("--model", "tailwise-demo", "llm/embed: the served model name."),
    ("--step-base", "4ms", "llm: fixed cost of an engine step (a)."),
    ("--per-prefill-token", "20us", "llm: cost per prompt token prefilled in a step (b)."),
    ("--per-seq", "300us", "llm: cost per decoding sequence in a step (c)."),
    ("--max-num-seqs", "32", "llm: batch slots."),
    ("--kv-cache-tokens", "131072", "llm: KV budget; admission waits when full."),
    ("--per-kv-token", "0us", "llm: cost per KV token the decoding sequences attend to."),
    ("--kv-allocation", "reserve", "llm: reserve (prompt + max_tokens at admission) or paged."),
    ("--kv-block-tokens", "16", "llm, paged: tokens per KV block."),
    ("--kv-watermark", "0.01", "llm, paged: share of blocks admission leaves free."),
    ("--chunked-prefill", "0", "llm: prefill token budget per step (0: off)."),
    ("--max-waiting", "128", "llm: waiting queue bound; full -> 429."),
    ("--max-model-len", "4096", "llm: context limit; longer -> 400."),
    ("--request-timeout", "60s", "llm: server-side deadline per request."),
    ("--max-batch", "32", "embed: inputs per batch."),
    ("--max-wait", "5ms", "embed: longest wait for a batch to fill."),
    ("--batch-base", "4ms", "embed: fixed cost of a batch (c0)."),
    ("--per-item", "900us", "embed: cost per input in a batch (c1)."),
    ("--max-waiting-inputs", "4096", "embed: queue bound in inputs; full -> 429."),
    ("--dim", "16", "embed: embedding dimension."),
    ("--workers", "4", "http: FCFS workers (0: unlimited)."),
    ("--service", "exp:5ms", "http: service time, <duration> or exp:<duration>."),
]


def serve_options(f: F) -> F:
    """serve-demo's model options, one per row of _SERVE_OPTIONS."""
    for name, default, help_text in reversed(_SERVE_OPTIONS):
        f = click.option(name, default=default, show_default=True, help=help_text)(f)
    return f


def json_flag(f: F) -> F:
    """The --json flag of every plan command."""
    return click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")(f)


def emit_plan(result: Any, as_json: bool, code: int = ExitCode.PASS) -> None:
    """Print a plan's result as a table, or as JSON with --json; exit ``code`` (0)."""
    from tailwise.report.plan import print_plan

    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        print_plan(result)
    sys.exit(code)
