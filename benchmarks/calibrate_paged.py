"""Calibrate with ample KV, predict a tight-KV configuration, measure it (issue 24).

The demo LLM server runs paged KV (``--kv-allocation paged``) with a context
cost (``--per-kv-token``):

1. sweep it with an ample KV cache (131072 tokens: nothing is ever preempted)
   and short outputs (64 tokens), prompts uniform 32-512;
2. ``tailwise calibrate`` the sweep: base, prefill, decode, slots and the
   context term (kv_per_token) from the streams;
3. sweep another configuration of the server: long outputs (256 tokens) and a
   KV cache of 8192 tokens, where about half the slots' full contexts fit, so
   sequences are preempted and recomputed. The KV size, block size and
   waiting-queue bound are the server's settings (read off its command line,
   as one reads vLLM's block count from its log), not fitted;
4. predict every step of that sweep on the simulator (the same experiment,
   replicated to 3000 requests: the model's answer, not one draw of it), with
   the calibrated model and with the server's *true* law (which separates the
   calibration's error from the model's);
5. the knee on every side: the rate at which TTFT p95 reaches 1 s, log-linear
   between the steps around it (one knee search of 300-request trials
   scattered by +-20% here: it could not resolve a 15% target).

Target (issue 24): predicted knee within 15% of the measured knee.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from calibrate_llama import crossing_rps, predicted_ttft
from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.calibrate import calibrate, write_model
from tailwise.calibrate.steps import load_steps
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Sweep
from tailwise.server import spawn_demo
from tailwise.sim.scenario import Scenario, load_scenario, parse_scenario

TOLERANCE = 0.15
KV_US = 0.5  # the demo's context cost, us per KV token
TRUTH = ["--step-base", "4ms", "--per-prefill-token", "20us", "--per-seq", "300us"]
SERVE = [*TRUTH, "--per-kv-token", f"{KV_US}us", "--kv-allocation", "paged"]
TIGHT_KV = 8192
OUTPUT_LONG = 256
PROMPTS = "uniform:32-512"
SLO = ["p95(ttft)<=1s"]
SWEEP = [3.0, 6.0, 10.0, 14.0, 24.0, 32.0]  # capacity about 21/s: two steps past it
SLO_LIMIT_MS = 1000  # p95(ttft)<=1s
TIGHT_RATES = [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0]  # the knee is near 4.5/s
TIGHT_WINDOW = "45s"
PREDICT_REQUESTS = 3000
WINDOW = "20s"


def _options(url: str, window: str, max_tokens: int, lag: str = "25ms") -> RunOptions:
    # Two cores hold the server and the generator: a late send counts in latency
    # (measured from the intended instant) rather than voiding the trial. The sweep
    # tolerates more (calibrate fits TTFT from the actual send, and the context term
    # from the token instants, which a late send does not move).
    return RunOptions(
        urls=[url],
        duration=window,
        warmup="2s",
        slo=list(SLO),
        max_send_lag=lag,
        api="openai-completions",
        model="tailwise-demo",
        max_tokens=str(max_tokens),
        input_tokens=PROMPTS,
        timeout="30s",
    )


def tight(sc: Scenario) -> Scenario:
    """The target configuration: long outputs, a tight paged KV cache, the demo's queue."""
    assert sc.llm is not None
    llm = sc.llm.model_copy(
        update={
            "output_tokens": OUTPUT_LONG,
            "prompt_tokens": PROMPTS,
            "kv_cache_tokens": TIGHT_KV,
            "kv_allocation": "paged",
            "kv_block_tokens": 16,
            "max_waiting": 128,
            "max_model_len": 4096,
        }
    )
    arrival = sc.arrival.model_copy(update={"duration": WINDOW, "warmup": "2s"})
    return sc.model_copy(update={"llm": llm, "arrival": arrival, "slo": list(SLO)})


def truth_scenario() -> Scenario:
    llm = {
        "base": "4ms",
        "prefill_per_token": "0.02ms",
        "decode_per_seq": "0.3ms",
        "kv_per_token": f"{KV_US / 1000:g}ms",
        "max_num_seqs": 32,
        "timeout": "60s",
    }
    return parse_scenario({"llm": llm, "arrival": {"rate": "1/s", "duration": WINDOW}})


def measured_p95(sweep_dir: Path) -> list[tuple[float, float | None, int]]:
    """(rate, TTFT p95 ms from the intended send, requests) per step of the tight sweep."""
    steps, _ = load_steps([sweep_dir])
    out = []
    for step in steps:
        p95 = (step.summary.get("ttft_ms") or {}).get("p95")
        out.append((step.rate_rps, float(p95) if p95 is not None else None, int(step.ok().sum())))
    return out


def predicted_p95(sc: Scenario, sweep_dir: Path) -> list[float | None]:
    """Per measured step of the tight sweep: the scenario's TTFT p95 for the same
    experiment, replicated to PREDICT_REQUESTS requests."""
    doc = tight(sc).model_dump(mode="json", exclude_defaults=True)
    return predicted_ttft(doc, sweep_dir, "p95", PREDICT_REQUESTS)


def _serve(*args: str) -> tuple[Any, str]:
    proc, base = spawn_demo("llm", *SERVE, *args, lifetime="1800s")
    return proc, base + "/v1/completions"


def _stop(proc: Any) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def bench(tmp: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    proc, url = _serve()  # ample KV: the default 131072 tokens
    try:
        sweep = Sweep(_options(url, "15s", 64, lag="1s"), tmp / "sweep")
        sweep.run_rates(list(SWEEP))
        sweep.write()
    finally:
        _stop(proc)
    sweep_s = time.monotonic() - t0
    cal = calibrate([tmp / "sweep"])
    model = tmp / "model.yaml"
    write_model(cal, model)
    fit_s = time.monotonic() - t0 - sweep_s
    notes = cal.notes + cal.fit.notes  # steps left out, terms not identified
    print(json.dumps({"params": cal.fit.params, "notes": notes}, default=str), flush=True)
    proc, url = _serve("--kv-cache-tokens", str(TIGHT_KV))
    try:
        tight_run = Sweep(_options(url, TIGHT_WINDOW, OUTPUT_LONG), tmp / "tight")
        tight_run.run_rates(list(TIGHT_RATES))
        tight_run.write()
        preemptions = _preemptions(url)
    finally:
        _stop(proc)
    measured = measured_p95(tmp / "tight")
    rates = [r for r, _, _ in measured]
    meas = [v for _, v, _ in measured]
    pred = predicted_p95(load_scenario(model), tmp / "tight")
    truth = predicted_p95(truth_scenario(), tmp / "tight")
    limit = float(SLO_LIMIT_MS)
    knees = {
        "measured": crossing_rps(rates, meas, limit),
        "predicted": crossing_rps(rates, pred, limit),
        "truth": crossing_rps(rates, truth, limit),
    }
    print(json.dumps(knees), flush=True)
    return {
        "params": cal.fit.params,
        "notes": notes,
        "steps": len(cal.steps),
        "fit_rms": round(cal.goodness.rms_log_error, 3),
        "knees": knees,
        "rates": rates,
        "requests": [n for _, _, n in measured],
        "measured_p95_ms": meas,
        "predicted_p95_ms": pred,
        "truth_p95_ms": truth,
        "preemptions": preemptions,
        "sweep_s": round(sweep_s, 1),
        "fit_s": round(fit_s, 1),
        "total_s": round(time.monotonic() - t0, 1),
    }


def _preemptions(url: str) -> int | None:
    """The server's own count (``tailwise_demo_preemptions_total``) over the search."""
    import urllib.request

    from tailwise.metrics.server import read_exposition

    base = url.rsplit("/v1/", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        reading = read_exposition(resp.read().decode())
    if reading is None:
        return None
    value = reading["values"].get("preemptions")
    return int(value) if value is not None else None


def _ms(v: float | None) -> str:
    return f"{v:,.0f} ms" if v is not None else "none"


def _rate(v: float | None) -> str:
    return f"{v:.2f}/s" if v else "past the sweep"


def write_docs(res: dict[str, Any], machine: str) -> None:
    begin, end = "<!-- calibrate_paged:begin -->", "<!-- calibrate_paged:end -->"
    k = res["knees"]
    ratio = k["predicted"] / k["measured"] if k["predicted"] and k["measured"] else None
    ok = ratio is not None and abs(ratio - 1) <= TOLERANCE
    params = ", ".join(f"{n} {v}" for n, v in res["params"].items() if n != "closed_form_start")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        begin,
        "## Paged KV: calibrate with ample KV, predict tight KV: "
        f"`benchmarks/calibrate_paged.py` ({when})",
        "",
        f"Machine: {machine}. The demo LLM server with paged KV and a context cost (step 4 ms "
        f"+ 0.02 ms per prefilled token + 0.3 ms per decoding sequence + {KV_US} us per KV "
        "token, 32 slots) is swept with 131072 KV tokens and 64-token outputs (prompts "
        f"{PROMPTS}), and calibrated. The model then predicts, on the simulator, TTFT p95 "
        f"for {OUTPUT_LONG}-token outputs in a KV cache of {TIGHT_KV} tokens (about half the "
        "slots' full contexts fit: sequences are preempted and recomputed), at each rate "
        f"of a sweep of a demo server so configured ({TIGHT_WINDOW} per step; the same "
        f"experiment simulated, the median of replications holding {PREDICT_REQUESTS} "
        "requests). The knee is the rate at which TTFT p95 reaches 1 s "
        f"({' and '.join(SLO)}), log-linear between the steps around it, by one rule on "
        f"every side. Target: predicted knee within {TOLERANCE:.0%} of the measured one.",
        "",
        "| knee of the tight-KV setup | rate |",
        "|---|---:|",
        f"| measured on the demo server | {_rate(k['measured'])} |",
        f"| predicted by the calibrated model | {_rate(k['predicted'])} |",
        f"| simulated with the server's true law | {_rate(k['truth'])} |",
        "",
        f"Predicted / measured: {f'{ratio:.2f}' if ratio else '-'} "
        f"({'within' if ok else 'NOT within'} {TOLERANCE:.0%}). The server preempted "
        f"{res['preemptions']} sequences during the tight sweep. Sweep {res['sweep_s']:.0f} s, "
        f"calibration {res['fit_s']:.0f} s, whole benchmark {res['total_s'] / 60:.1f} min.",
        "",
        "| rate | requests | TTFT p95 measured | calibrated model | true law |",
        "|---|---:|---:|---:|---:|",
    ]
    for rate, n, m, p, t in zip(
        res["rates"],
        res["requests"],
        res["measured_p95_ms"],
        res["predicted_p95_ms"],
        res["truth_p95_ms"],
        strict=True,
    ):
        lines.append(f"| {rate:g}/s | {n} | {_ms(m)} | {_ms(p)} | {_ms(t)} |")
    lines += ["", f"Fitted to {res['steps']} steps: {params}; fit error {res['fit_rms']}."]
    if res["notes"]:
        lines += ["", "Calibrate's notes: " + "; ".join(res["notes"])]
    write_block(begin, end, "\n".join([*lines, end]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--keep", type=Path, help="Keep the runs in this directory.")
    args = ap.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        res = bench(args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="tailwise-paged-") as tmp:
            res = bench(Path(tmp))
    print(json.dumps(res, indent=2, default=str), flush=True)
    p, m = res["knees"]["predicted"], res["knees"]["measured"]
    print(f"predicted/measured = {p / m if p and m else None}")
    if args.write_docs:
        write_docs(res, machine_label())


if __name__ == "__main__":
    main()
