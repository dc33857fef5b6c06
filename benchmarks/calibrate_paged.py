"""Calibrate with ample KV, predict a tight-KV configuration, measure it (issue 24).

The demo LLM server runs paged KV (``--kv-allocation paged``) with a context
cost (``--per-kv-token``):

1. sweep it with an ample KV cache (131072 tokens: nothing is ever preempted)
   and short outputs (64 tokens), prompts uniform 32-512;
2. ``tailwise calibrate`` the sweep: base, prefill, decode, slots and the
   context term (kv_per_token) from the streams;
3. predict, on the simulator, the knee of another configuration: long outputs
   (256 tokens) and a KV cache of 8192 tokens, where about half the slots'
   full contexts fit, so sequences are preempted and recomputed. The KV size,
   block size and waiting-queue bound are the server's settings (read off its
   command line, as one reads vLLM's block count from its log), not fitted;
4. measure that configuration's knee on a demo server with the same knee
   search, and compare. The knee the simulator predicts from the *true* law
   is shown beside it: it separates the calibration's error from the model's.

Target (issue 24): predicted knee within 15% of the measured knee.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.calibrate import calibrate, write_model
from tailwise.knee import KneeSearch
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Sweep, knee_trial
from tailwise.server import spawn_demo
from tailwise.sim.scenario import Scenario, load_scenario, parse_scenario
from tailwise.sim.whatif import knee

TOLERANCE = 0.15
KV_US = 0.5  # the demo's context cost, us per KV token
TRUTH = ["--step-base", "4ms", "--per-prefill-token", "20us", "--per-seq", "300us"]
SERVE = [*TRUTH, "--per-kv-token", f"{KV_US}us", "--kv-allocation", "paged"]
TIGHT_KV = 8192
OUTPUT_LONG = 256
PROMPTS = "uniform:32-512"
SLO = ["p95(ttft)<=1s"]
SWEEP = [3.0, 6.0, 10.0, 14.0, 24.0, 32.0]  # capacity about 21/s: two steps past it
MIN_REQUESTS = 300
SEEDS = 21  # simulated knee searches per prediction (their median: the model's knee)
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


def predicted_knee(sc: Scenario, start: float) -> dict[str, Any]:
    """The median knee of SEEDS simulated searches (one search of 300-request trials
    scatters by about 20%: the prediction should not carry that too)."""
    started = time.monotonic()
    knees = []
    for seed in range(1, SEEDS + 1):
        one = tight(sc)
        one = one.model_copy(update={"arrival": one.arrival.model_copy(update={"seed": seed})})
        knees.append(knee(one, start, resolution=0.05, min_requests=MIN_REQUESTS).knee_rps)
    found = sorted(k for k in knees if k)
    return {
        "knee_rps": float(statistics.median(found)) if found else None,
        "band": [found[0], found[-1]] if found else None,  # the searches' spread
        "trials": len(knees),
        "wall_s": round(time.monotonic() - started, 1),
    }


def measured_knee(url: str, start: float, out: Path) -> dict[str, Any]:
    trial = knee_trial(_options(url, WINDOW, OUTPUT_LONG), out, MIN_REQUESTS)
    started = time.monotonic()
    result = KneeSearch(trial, resolution=0.05, repeats=1).run(start, start / 64, start * 64)
    return {
        "knee_rps": result.knee_rps,
        "band": result.band_rps,
        "trials": len(result.trials),
        "wall_s": round(time.monotonic() - started, 1),
    }


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
    sc = load_scenario(model)
    truth = predicted_knee(truth_scenario(), 4.0)
    pred = predicted_knee(sc, truth["knee_rps"] or 4.0)
    print(json.dumps({"truth": truth, "predicted": pred}), flush=True)
    proc, url = _serve("--kv-cache-tokens", str(TIGHT_KV))
    try:
        meas = measured_knee(url, pred["knee_rps"] or 4.0, tmp / "tight")
        meas["preemptions"] = _preemptions(url)
    finally:
        _stop(proc)
    return {
        "params": cal.fit.params,
        "notes": notes,
        "steps": len(cal.steps),
        "fit_rms": round(cal.goodness.rms_log_error, 3),
        "truth": truth,
        "predicted": pred,
        "measured": meas,
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


def _band(band: Any) -> str:
    if not band:
        return "-"
    lo, hi = band
    return f"{lo:.2f}-{hi:.2f}/s" if lo and hi else f"{lo or '?'}-{hi or '?'}/s"


def write_docs(res: dict[str, Any], machine: str) -> None:
    begin, end = "<!-- calibrate_paged:begin -->", "<!-- calibrate_paged:end -->"
    p, t, m = res["predicted"], res["truth"], res["measured"]
    ratio = p["knee_rps"] / m["knee_rps"] if p["knee_rps"] and m["knee_rps"] else None
    ok = ratio is not None and abs(ratio - 1) <= TOLERANCE
    params = ", ".join(f"{k} {v}" for k, v in res["params"].items() if k != "closed_form_start")
    lines = [
        begin,
        "## Paged KV: calibrate with ample KV, predict tight KV: "
        "`benchmarks/calibrate_paged.py` (2026-11-24)",
        "",
        f"Machine: {machine}. The demo LLM server with paged KV and a context cost (step 4 ms "
        f"+ 0.02 ms per prefilled token + 0.3 ms per decoding sequence + {KV_US} us per KV "
        "token, 32 slots) is swept with 131072 KV tokens and 64-token outputs (prompts "
        f"{PROMPTS}), and calibrated. The model then predicts, on the simulator, the knee "
        f"at {' and '.join(SLO)} of {OUTPUT_LONG}-token outputs in a KV cache of {TIGHT_KV} "
        "tokens (about half the slots' full contexts fit: sequences are preempted and "
        "recomputed); a demo server so configured is measured with the same knee search "
        f"(5% resolution, trials of at least {MIN_REQUESTS} requests). Target: within "
        f"{TOLERANCE:.0%}.",
        "",
        "| knee of the tight-KV setup | rate | spread |",
        "|---|---:|---|",
        f"| simulated, true law (median of {SEEDS} searches) | {t['knee_rps']:.2f}/s | "
        f"{_band(t['band'])} (searches) |",
        f"| simulated, calibrated model (median of {SEEDS}) | {p['knee_rps']:.2f}/s | "
        f"{_band(p['band'])} (searches) |",
        f"| measured on the demo server (one search) | {m['knee_rps']:.2f}/s | "
        f"{_band(m['band'])} (search band) |",
        "",
        f"Predicted / measured: {ratio:.2f} ({'within' if ok else 'NOT within'} 15%). "
        f"The server preempted {m['preemptions']} sequences during the search "
        f"({m['trials']} trials, {m['wall_s']:.0f} s). Sweep {res['sweep_s']:.0f} s, "
        f"calibration {res['fit_s']:.0f} s, whole benchmark {res['total_s'] / 60:.1f} min.",
        "",
        f"Fitted to {res['steps']} steps: {params}; fit error {res['fit_rms']}.",
    ]
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
    p, m = res["predicted"]["knee_rps"], res["measured"]["knee_rps"]
    print(f"predicted/measured = {p / m if p and m else None}")
    if args.write_docs:
        write_docs(res, machine_label())


if __name__ == "__main__":
    main()
