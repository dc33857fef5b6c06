"""``tailwise demo``: a continuous-batching LLM server on loopback, swept past its knee.

The target is ``tailwise serve-demo --kind llm`` with its defaults (see
docs/demo-server.md): about 147 requests/s of 128-token prompts with 16-token
answers saturate it. The sweep offers 30 to 150 requests/s, each step a real
open-loop run with its own directory that lasts until its SLO is decided (up to
:data:`STEP_CAP`), and prints offered load against throughput and goodput, TTFT
and TPOT, with the knee and the band whose ends are decided.

Chosen so that the demo decides, honestly, in about two minutes: a 95% TTFT SLO
(a 99% one needs several hundred requests with no miss even where it holds by
far, more than a short step offers), short answers (a rate high enough that a
step holds hundreds of requests in seconds), and rates around the knee (about
100/s) that a step decides on either side.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from tailwise.capacity import llm_idle_ttft_s, llm_saturated_rps, llm_saturated_rps_upper
from tailwise.errors import ExitCode
from tailwise.laws.llm import EngineConfig
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Step, Sweep
from tailwise.report.meta import collect
from tailwise.report.render import sweep_report
from tailwise.report.text import console as text_console
from tailwise.report.text import print_sweep
from tailwise.server import spawn_demo

DEMO_RATES = (30.0, 60.0, 80.0, 100.0, 120.0, 150.0)
PROMPT_TOKENS, OUTPUT_TOKENS = 128, 16
DEMO_SLOS = ["ttft<=300ms@95%"]
STEP_CAP = "15s"  # the longest a step runs when its SLO stays undecided (window "auto")


def demo_options(base_url: str, window: str) -> RunOptions:
    return RunOptions(
        urls=[base_url + "/v1/completions"],
        api="openai-completions",
        model="tailwise-demo",
        max_tokens=OUTPUT_TOKENS,
        input_tokens=PROMPT_TOKENS,
        arrival="poisson",
        duration=window,
        max_duration=STEP_CAP if window == "auto" else None,
        warmup="1s",
        timeout="8s",  # bounds each step's drain past the knee; late answers count as misses
        slo=list(DEMO_SLOS),
    )


def _step_line(console: Console, i: int, n: int, rate: float, step: Step | None) -> None:
    if step is None:
        return  # the run's own live line shows the step while it runs
    s = step.summary
    r = s.rates
    dist = s.distribution("ttft_ms")
    ttft = dist.p99 if dist is not None else None
    ttft_text = f"{ttft:.0f}ms" if ttft is not None else "-"
    console.print(
        f"[{i + 1}/{n}] {rate:>3g}/s  throughput {r.throughput_rps or 0.0:4.1f}/s  "
        f"goodput {r.goodput_rps or 0.0:4.1f}/s  TTFT p99 {ttft_text:>6}  {s.verdict}"
    )


def run_demo(
    window: str = "auto", rates: tuple[float, ...] = DEMO_RATES, argv: list[str] | None = None
) -> int:
    """The demo: a server, a sweep past its knee, the report; ``argv`` (the command line
    without the program) goes into the report's metadata."""
    console = text_console()
    cfg = EngineConfig()
    law = (cfg.base_s, cfg.prefill_s_per_token, cfg.decode_s_per_seq, cfg.max_num_seqs)
    # One prompt per prefill step (a filling engine) to all of a batch's in one (a backlog)
    capacity = (
        llm_saturated_rps(*law, PROMPT_TOKENS, OUTPUT_TOKENS),
        llm_saturated_rps_upper(*law, PROMPT_TOKENS, OUTPUT_TOKENS),
    )
    proc, base = spawn_demo("llm")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path("runs") / f"{stamp}-demo-sweep"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        console.print(
            f"[bold]tailwise demo[/bold]: an LLM server with continuous batching at {base}"
        )
        console.print(
            f"  {PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS}-token answers; closed form: "
            f"saturates at {capacity[0]:.0f}-{capacity[1]:.0f} req/s, idle TTFT "
            f"{llm_idle_ttft_s(cfg.base_s, cfg.prefill_s_per_token, PROMPT_TOKENS) * 1e3:.1f} ms"
        )
        console.print(
            f"  SLO per request: {', '.join(DEMO_SLOS)}; each step runs until it is decided "
            f"(up to {STEP_CAP})\n"
        )
        started = time.monotonic()
        sweep = Sweep(demo_options(base, window), out_dir, lambda *a: _step_line(console, *a))
        sweep.extra["meta"] = collect(argv if argv is not None else ["demo"])
        sweep.run_rates(list(rates))
        doc = sweep.write()
        report = sweep_report(out_dir) if sweep.steps else ""
        console.print()
        print_sweep(doc)
        console.print(f"[dim]saved     {out_dir}/ (sweep.json and one run directory per step)")
        if report:
            console.print(f"[dim]report    {report}[/dim]")
        console.print(f"[dim]took      {time.monotonic() - started:.0f} s[/dim]\n")
        _explain(console, doc, capacity)
        _next_steps(console, out_dir)
        found = doc["knee_rps"] is not None and not sweep.note
        return ExitCode.PASS if found else ExitCode.INVALID
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _explain(console: Console, doc: dict[str, Any], capacity_rps: tuple[float, float]) -> None:
    """Say how the measured server compares with its closed form, and why when it falls short.

    The demo server runs its cost model in real time on this machine's cores: on a
    busy machine its steps take longer than the model says, and it serves less. That
    is the truth about this server here, not a client error (the client's own error
    is judged per step), so it is said plainly. The closed form is a range: one prompt
    per prefill step (an engine filling as requests arrive) up to a whole batch's
    prompts in one (a backlog admitted at once).
    """
    peak = max((row["throughput_rps"] for row in doc["steps"]), default=0.0)
    low, high = capacity_rps
    allowed = f"the {low:.0f}-{high:.0f}/s its cost model allows"
    try:
        load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count() or 1} cores"
    except OSError:
        load = f"{os.cpu_count() or 1} cores"
    if peak >= 0.9 * low:
        console.print(
            f"The server peaked at {peak:.1f}/s, within {allowed}. The TTFT SLO is lost "
            "before that: near saturation requests wait for a batch slot, so the knee "
            "sits below the capacity.\n"
        )
        return
    console.print(
        f"[yellow]The server peaked at {peak:.1f}/s, below {allowed}.[/yellow] It runs on "
        f"this machine ({load}); when other work holds the cores its steps take longer "
        "than the model says, so this knee is the server's on this busy machine.\n"
    )


def _next_steps(console: Console, sweep_dir: Path) -> None:
    console.print("[bold]Goodput[/bold] tracks throughput until the batch is full; past the knee")
    console.print("requests queue for a slot, TTFT explodes and goodput collapses while")
    console.print("throughput stays flat. Next, point tailwise at your own endpoint:\n")
    console.print(
        "  tailwise run http://localhost:8000/v1/chat/completions --api openai-chat \\\n"
        "      --model MODEL --rate 5/s --duration 60s --slo 'ttft<=500ms' --slo 'tpot<=50ms'\n"
        "  tailwise sweep http://localhost:8000/v1/chat/completions --api openai-chat \\\n"
        "      --model MODEL --rates 1,2,4,8,16 --duration 30s --slo 'ttft<=500ms'\n"
        "  tailwise serve-demo --kind llm      # this demo's server, to experiment with"
    )
    console.print(
        "\nOr fit a model to this sweep and ask it how many servers 100/s needs. The demo"
        "\nsweeps one prompt length, so calibrate cannot tell prefill from the rest (it says"
        "\nso under `assumes`) and grades its fit: good, plan capacity answers; POOR, it"
        "\nanswers only with --accept-poor-fit, every row marked extrapolated (exit 8):\n"
    )
    console.print(
        f"  tailwise calibrate {sweep_dir} -o model.yaml\n"
        "  tailwise plan capacity --model model.yaml --rate 100/s"
    )
