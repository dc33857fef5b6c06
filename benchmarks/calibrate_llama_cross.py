"""Calibrate a real llama-server on one workload, predict others, measure them (issue 42).

The cross-workload check of ``calibrate_cross.py`` (the demo server) on a server
written outside this project: llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct
Q4_1 (``scripts/real_llm.py``: CPU, one thread, ``-c 8192``), chat completions
streamed, ``--ignore-eos``.

1. ``-np 4``: sweep the base workload (prompts of 8-40 words, 32-token answers),
   prompts x4 (32-160 words), answers x4 (128 tokens) and the base workload once
   more (the repeat: how far one measured knee moves by itself);
2. ``-np 1`` (slots /4): sweep the base workload on a server with one slot; every
   sweep's steps interleaved in rounds (step 1 of each, then step 2 of each, ...;
   each slot count's server started for its steps of the round) so that a change in
   the machine's load falls on every workload alike; a sweep whose last step is
   still under the SLO goes on at 1.25x (twice at most), so every sweep crosses it;
3. ``tailwise calibrate`` the first base sweep alone (the slot count from the
   server's ``/props``, prefill from its own prompt times);
4. predict every step of every sweep on the simulator with the model's workload set
   to the step's (prompts as prefilled, answers as measured; ``llm.max_num_seqs`` 1
   for slots /4): TTFT p90 and TPOT p50, the same experiment, the median over
   replications holding 2000 requests (``calibrate_cross._predicted``; past a sweep's
   last step where the model has not crossed the SLO yet, at 1.25x its rate); and
   TTFT p90 again on each step's own arrivals (calibrate's replay: the same requests
   at the same instants), the model without the arrivals' sampling noise;
5. the knee on every side (measured, predicted, on the steps' own arrivals): the
   rate at which TTFT p90 reaches the SLO's 5 s,
   log-linear between the steps around it (``calibrate_llama.crossing_rps``).

Target (issue 42): predicted knee within 30% of the measured one for prompt x4 and
answer x4 (slots /4 reported beside them). The server and this process run at
nice -10 where allowed (root), as ``calibrate_llama.py``; the CPU the rest of the
machine used during each step is measured (``/proc/stat`` less the server's and
this process's own) and reported beside the numbers. Loopback only; the server
runs in its own process group, stopped in a ``finally`` (SIGTERM too).

Usage: ``python benchmarks/calibrate_llama_cross.py [--write-docs] [--quick] [--keep DIR]``;
about 25 minutes on two cores (``--quick``: 3 steps a sweep, 15 s windows, no repeat: about 5).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from calibrate_cross import PREDICT_REQUESTS, _history, _measured, _predicted, _quantile, _ratio
from calibrate_llama import CONTEXT_TOKENS, _raise_priority, crossing_rps, serving
from docs_block import DOCS, machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.calibrate import calibrate, write_model
from tailwise.calibrate.fit import replay_of, replications_for, step_model
from tailwise.calibrate.steps import Step, load_steps
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Sweep
from tailwise.sim.run import replay
from tailwise.sim.scenario import parse_scenario

TOLERANCE = 0.30
LIMIT_MS = 5000.0
SLO = "p90(ttft)<=5s"
WINDOW, QUICK_WINDOW = "40s", "15s"
EXTRA_STEPS = 2  # a sweep whose last step is under the SLO goes on, 1.25x a step


@dataclass(frozen=True)
class Workload:
    name: str
    slots: int
    prompts: str  # words
    answer: int  # tokens
    rates: tuple[float, ...]

    @property
    def key(self) -> str:
        return self.name.replace(" ", "").replace("/", "-").replace("(", "").replace(")", "")


BASE = Workload("base", 4, "uniform:8-40", 32, (0.4, 0.8, 1.2, 1.5, 1.8))
WORKLOADS = [
    BASE,
    Workload("prompt x4", 4, "uniform:32-160", 32, (0.2, 0.4, 0.55, 0.7, 0.85)),
    Workload("answer x4", 4, "uniform:8-40", 128, (0.15, 0.3, 0.45, 0.6, 0.75)),
    Workload("base again", 4, "uniform:8-40", 32, BASE.rates),  # the repeat
    Workload("slots /4", 1, "uniform:8-40", 32, (0.4, 0.8, 1.1, 1.4, 1.7)),
]
TARGETS = ["prompt x4", "answer x4"]  # issue 42's done-means


def _options(url: str, w: Workload, window: str) -> RunOptions:
    """One sweep's steps; each workload its own seed (arrivals and prompts), so the
    repeat's knee moves with the sampling as a new measurement's would."""
    return RunOptions(
        seed=[x.name for x in WORKLOADS].index(w.name),
        urls=[url],
        duration=window,
        warmup="5s",
        slo=[SLO],
        api="openai-chat",
        model="smollm2",
        max_tokens=str(w.answer),
        ignore_eos=True,
        input_tokens=w.prompts,
        timeout="180s",  # an overloaded step's TTFT stays under it: nothing is dropped
        progress=False,
    )


class LoadMeter:
    """What the machine did during each step: the cores the rest of it kept busy
    (``/proc/stat``'s busy time less the server's and this process's own), the
    server's and this process's cores, and the 1-minute load average at the end."""

    def __init__(self) -> None:
        self.server_pid: int | None = None
        self.rows: dict[str, list[dict[str, float]]] = {}
        self._start: tuple[float, ...] = ()
        self._tick = os.sysconf("SC_CLK_TCK")

    def _snapshot(self) -> tuple[float, ...]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / self._tick  # less idle and iowait
        server = 0.0
        if self.server_pid is not None:
            with_comm = Path(f"/proc/{self.server_pid}/stat").read_text()
            after = with_comm[with_comm.rindex(")") + 2 :].split()
            server = (int(after[11]) + int(after[12])) / self._tick  # utime, stime
        t = os.times()
        return time.monotonic(), busy, server, t.user + t.system, os.getloadavg()[0]

    def on_step(self, name: str) -> Any:
        def hook(i: int, n: int, rate: float, step: Any) -> None:
            if step is None:
                self._start = self._snapshot()
                return
            end = self._snapshot()
            dt, busy, server, own = (e - s for e, s in zip(end[:4], self._start[:4], strict=True))
            self.rows.setdefault(name, []).append(
                {
                    "rate": rate,
                    "others_cores": round(max(busy - server - own, 0.0) / dt, 2),
                    "server_cores": round(server / dt, 2),
                    "client_cores": round(own / dt, 2),
                    "load1": round(end[4], 2),
                    "wall_s": round(dt, 1),
                }
            )
            print(f"{name} {rate:g}/s: {json.dumps(self.rows[name][-1])}", flush=True)

        return hook


def _workloads(quick: bool) -> list[Workload]:
    """--quick leaves out the repeat."""
    return [w for w in WORKLOADS if not (quick and w.name == "base again")]


def _sweeps(tmp: Path, quick: bool, meter: LoadMeter) -> None:
    """Run every sweep not already in ``tmp`` (``--keep``), in rounds: each round one
    step of every workload, a server per slot count (started for its steps, stopped
    after them; the order of the slot counts alternating round by round), so that
    the machine's load falls on every sweep alike, the one-slot server's too. Then a
    sweep whose last step is still under the SLO goes on, 1.25x a step."""
    window = QUICK_WINDOW if quick else WINDOW
    todo = [w for w in _workloads(quick) if not (tmp / w.key / "sweep.json").is_file()]
    if not todo:
        return
    sweeps = {
        w.name: Sweep(_options("", w, window), tmp / w.key, meter.on_step(w.name)) for w in todo
    }
    plans = {w.name: list(w.rates[::2] if quick else w.rates) for w in todo}
    counts = sorted({w.slots for w in todo}, reverse=True)
    starts = 0

    def on_server(slots: int, runs: list[tuple[Workload, float]]) -> None:
        nonlocal starts
        starts += 1
        with serving(slots, tmp / f"server-{starts:02d}-np{slots}.log") as (url, pid):
            meter.server_pid = pid
            for w, rate in runs:
                sw = sweeps[w.name]
                sw.base = dataclasses.replace(sw.base, urls=[url])
                n = len(sw.steps)
                sw.note = sw.stop_reason(sw.run_step(rate, n, max(len(plans[w.name]), n + 1)))
        meter.server_pid = None

    def under_slo(sw: Sweep) -> bool:
        p90 = _quantile(sw.steps[-1].summary, "ttft_ms", "p90") if sw.steps else None
        return not sw.note and p90 is not None and p90 <= LIMIT_MS

    for i in range(max(len(p) for p in plans.values())):
        for slots in counts if i % 2 == 0 else counts[::-1]:
            runs = [
                (w, plans[w.name][i])
                for w in todo
                if w.slots == slots and i < len(plans[w.name]) and not sweeps[w.name].note
            ]
            if runs:
                on_server(slots, runs)
    for _ in range(EXTRA_STEPS):
        for slots in counts:
            runs = [
                (w, round(sweeps[w.name].steps[-1].rate_rps * 1.25, 3))
                for w in todo
                if w.slots == slots and under_slo(sweeps[w.name])
            ]
            if runs:
                on_server(slots, runs)
    for w in todo:
        sweeps[w.name].write()
        (tmp / w.key / "load.json").write_text(json.dumps(meter.rows.get(w.name, [])))


def _at_rate(step: Step, rate: float) -> Step:
    """The step's experiment (window, warm-up, lengths) at another offered rate."""
    arrival = {**step.summary.arrival, "rate_rps": rate}
    return dataclasses.replace(step, summary=dataclasses.replace(step.summary, arrival=arrival))


def _replayed(doc: dict[str, Any], step: Step) -> float | None:
    """The model's TTFT p90 on the step's own arrivals (calibrate's replay: the same
    requests at the same instants, with their prompts and answers), the median over
    replications: the model without the arrivals' sampling noise, which a sweep's one
    draw per step carries (its steps share one seed: one burst pattern, scaled)."""
    arrivals = replay_of(step)
    values = []
    for seed in range(1, replications_for(step, PREDICT_REQUESTS) + 1):
        summary = replay(parse_scenario(step_model(doc, step, seed)), arrivals).summary
        v = _quantile(summary, "ttft_ms", "p90")
        values.append(float(v) if v is not None else math.inf)
        if seed == 2 and values[0] == values[1]:
            break  # the model drew nothing on these arrivals
    mid = float(np.median(values))
    return mid if math.isfinite(mid) else None


def _server_ms(step: Step, column: str) -> float | None:
    """The server's own median of one timing (llama.cpp's ``timings``) over the step."""
    v = step.server_column(column)[step.ok()]
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else None


def bench(tmp: Path, quick: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    meter = LoadMeter()
    timing = tmp / "sweep_timing.json"
    load_before = os.getloadavg()[0]
    _sweeps(tmp, quick, meter)
    if not timing.is_file():
        timing.write_text(
            json.dumps(
                {
                    "sweep_s": time.monotonic() - t0,
                    "when": time.time(),
                    "load_before": load_before,
                    "load_after": os.getloadavg()[0],
                    "window": QUICK_WINDOW if quick else WINDOW,
                }
            )
        )
    meta = json.loads(timing.read_text())
    t1 = time.monotonic()
    cal = calibrate([tmp / BASE.key])  # the first base sweep only
    model = tmp / "model.yaml"
    write_model(cal, model)
    fit_s = time.monotonic() - t1
    doc = yaml.safe_load(model.read_text())
    out: dict[str, Any] = {
        "params": cal.fit.params,
        "fit_rms": round(cal.goodness.rms_log_error, 3),
        "poor": cal.goodness.poor,
        "notes": cal.notes + cal.fit.notes + cal.goodness.notes(),
        "workloads": {},
    }
    for w in _workloads(quick):
        steps, _ = load_steps([tmp / w.key])
        loads = json.loads((tmp / w.key / "load.json").read_text())
        by_rate = {round(r["rate"], 6): r for r in loads}
        wdoc = {**doc, "llm": {**doc["llm"], "max_num_seqs": w.slots}}
        rows = []
        for step in steps:
            m_ttft, m_tpot, n = _measured(step)
            p_ttft, p_tpot = _predicted(wdoc, step)
            own = _replayed(wdoc, step)
            rows.append(
                {
                    "rate": step.rate_rps,
                    "requests": n,
                    "throughput": round(step.throughput_rps, 3),
                    "prompt_tokens_p50": float(np.median(step.prompt_tokens())) if n else None,
                    "ttft_p90": [m_ttft, p_ttft, own],
                    "tpot_p50": [m_tpot, p_tpot],
                    "server_prompt_ms_p50": _server_ms(step, "prompt_ms"),
                    "server_tpot_ms_p50": _server_ms(step, "predicted_per_token_ms"),
                    "load": by_rate.get(round(step.rate_rps, 6), {}),
                }
            )
        rates = [r["rate"] for r in rows]
        knees = {
            side: crossing_rps(rates, [r["ttft_p90"][i] for r in rows], LIMIT_MS)
            for i, side in enumerate(("measured", "predicted", "own arrivals"))
        }
        beyond = []  # the model past the sweep's last rate, where it has not crossed yet
        while knees["predicted"] is None and len(beyond) < EXTRA_STEPS and steps:
            last = beyond[-1][1] if beyond else rows[-1]["ttft_p90"][1]
            if last is None or last > LIMIT_MS:
                break
            rate = round((beyond[-1][0] if beyond else rates[-1]) * 1.25, 3)
            beyond.append((rate, _predicted(wdoc, _at_rate(steps[-1], rate))[0]))
            knees["predicted"] = crossing_rps(
                rates + [b[0] for b in beyond],
                [r["ttft_p90"][1] for r in rows] + [b[1] for b in beyond],
                LIMIT_MS,
            )
        out["workloads"][w.name] = {
            "slots": w.slots,
            "prompts": w.prompts,
            "answer": w.answer,
            "rows": rows,
            "knees": knees,
            "predicted_beyond": beyond,
        }
        print(json.dumps({w.name: knees}), flush=True)
    others = [r["load"].get("others_cores") for w in out["workloads"].values() for r in w["rows"]]
    others = [v for v in others if v is not None]
    out |= {
        "sweep_s": round(float(meta["sweep_s"]), 1),
        "fit_s": round(fit_s, 1),
        "total_s": round(float(meta["sweep_s"]) + time.monotonic() - t1, 1),
        "measured_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(meta["when"])),
        "window": meta["window"],
        "load_before": round(meta["load_before"], 2),
        "load_after": round(meta["load_after"], 2),
        "others_cores": [min(others), float(np.median(others)), max(others)] if others else None,
        "priority_raised": _raise_priority(os.getpid()),
    }
    return out


def _rate(v: float | None) -> str:
    return f"{v:.2f}/s" if v else "past the sweep"


def _ms(v: float | None) -> str:
    return f"{v:,.0f}" if v is not None else "-"


def repeat_spread(res: dict[str, Any]) -> float | None:
    """How far the base knee moved between its two interleaved sweeps: |a - b| / mean."""
    if "base again" not in res["workloads"]:
        return None
    a = res["workloads"]["base"]["knees"]["measured"]
    b = res["workloads"]["base again"]["knees"]["measured"]
    return abs(a - b) / ((a + b) / 2) if a and b else None


def write_docs(res: dict[str, Any], machine: str) -> None:
    begin, end = "<!-- calibrate_llama_cross:begin -->", "<!-- calibrate_llama_cross:end -->"
    p = res["params"]
    spread = repeat_spread(res)
    lo, mid, hi = res["others_cores"] or (0.0, 0.0, 0.0)
    lines = [
        begin,
        "## Calibrate a real llama-server on one workload, predict others: "
        f"`benchmarks/calibrate_llama_cross.py` ({res['measured_utc']})",
        "",
        f"Machine: {machine}, shared with other work: load average {res['load_before']} "
        f"before, {res['load_after']} after (1-minute); the rest of the machine kept "
        f"{lo:.2f}-{hi:.2f} cores busy during the steps (median {mid:.2f}; per step "
        "below). llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist, CPU, "
        f"`-t 1 -c {CONTEXT_TOKENS}`, at nice -10, its session's autogroup too"
        f"{'' if res['priority_raised'] else ' where allowed: not here'}), "
        "SmolLM2-135M-Instruct Q4_1; chat, streamed, `--ignore-eos`. `-np 4` is swept with "
        "the base workload (prompts 8-40 words, 32 tokens out), with prompts x4 (32-160 "
        "words), with answers x4 (128 tokens) and with the base workload again (the "
        "repeat, its own arrivals), and a server with one slot (`-np 1`, slots /4) with "
        "the base workload; in rounds, one step of every sweep a round (each slot count's "
        "server started for its steps, the order alternating), so that the machine's "
        "load falls on all alike; a sweep still under the SLO at its last step goes on "
        f"at 1.25x; {res['window']} windows after a 5 s warm-up. `tailwise calibrate` "
        "fits the first "
        "base sweep alone; the model then predicts every step of every sweep on the "
        "simulator (the same experiment, prompts as prefilled and answers as measured, "
        f"`llm.max_num_seqs` 1 for slots /4; the median of replications holding "
        f"{PREDICT_REQUESTS} requests): TTFT p90 and TPOT p50. The knee is the rate at "
        f"which TTFT p90 reaches {LIMIT_MS / 1000:g} s (`{SLO}`), log-linear between the "
        f"steps around it, one rule on every side. Target (issue 42): within "
        f"{TOLERANCE:.0%} for prompts x4 and answers x4.",
        "",
        "| workload | knee measured | knee predicted | on the steps' own arrivals "
        "| predicted / measured |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, w in res["workloads"].items():
        k = w["knees"]
        r = _ratio(k)
        verdict = "" if r is None else (" (within)" if abs(r - 1) <= TOLERANCE else " (NOT within)")
        tokens = [row["prompt_tokens_p50"] for row in w["rows"] if row["prompt_tokens_p50"]]
        what = (
            f"`-np {w['slots']}`, prompts {w['prompts']} words (~{np.median(tokens):.0f} "
            f"tokens prefilled), {w['answer']} tokens out"
        )
        ratio = f"{r:.2f}" if r else "-"
        label = f"{name} (the repeat)" if name == "base again" else name
        own = k.get("own arrivals")
        own_ratio = f" ({own / k['measured']:.2f})" if own and k["measured"] else ""
        lines.append(
            f"| {label}: {what} | {_rate(k['measured'])} | {_rate(k['predicted'])} | "
            f"{_rate(own)}{own_ratio} | {ratio}{verdict} |"
        )
    beyond = [
        f"{name} at {rate:g}/s: {_ms(v)} ms"
        for name, w in res["workloads"].items()
        for rate, v in w.get("predicted_beyond", [])
    ]
    if beyond:
        lines += [
            "",
            "Where the model had not crossed the SLO by a sweep's last step, it was run past "
            "it, the same experiment at 1.25x the rate (TTFT p90): " + "; ".join(beyond) + ".",
        ]
    if spread is not None:
        lines += [
            "",
            "The base knee measured twice, interleaved: "
            f"{_rate(res['workloads']['base']['knees']['measured'])} and "
            f"{_rate(res['workloads']['base again']['knees']['measured'])}, {spread:.0%} "
            "apart: the measured knees carry about that much noise of their own.",
        ]
    lines += [
        "",
        "Per step (ms; TTFT p90 measured / predicted / predicted on the step's own "
        "arrivals, TPOT p50 measured / predicted; the server's own prompt time and time per "
        "token, llama.cpp's `timings`, medians; the cores the rest of the machine kept "
        "busy during the step and the 1-minute load average at its end):",
        "",
        "| workload | rate | requests | TTFT p90 | TPOT p50 | server prompt / token "
        "| others' cores | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, w in res["workloads"].items():
        for row in w["rows"]:
            (mt, pt, ot), (mp, pp) = row["ttft_p90"], row["tpot_p50"]
            load = row["load"]
            server_tpot = row["server_tpot_ms_p50"]
            lines.append(
                f"| {name} | {row['rate']:g}/s | {row['requests']} | "
                f"{_ms(mt)} / {_ms(pt)} / {_ms(ot)} | "
                f"{'-' if mp is None else f'{mp:.1f}'} / {'-' if pp is None else f'{pp:.1f}'} | "
                f"{_ms(row['server_prompt_ms_p50'])} / "
                f"{'-' if server_tpot is None else f'{server_tpot:.1f}'} | "
                f"{load.get('others_cores', '-')} | {load.get('load1', '-')} |"
            )
    lines += [
        "",
        f"Fitted to the base sweep: base {p['base_ms']:.2f} ms, prefill "
        f"{p['prefill_ms_per_token']:.2f} ms/token, decode {p['decode_ms_per_seq']:.2f} "
        f"ms/sequence, delay {p['delay_ms']:.2f} ms, max_num_seqs {p['max_num_seqs']}; fit "
        f"error {res['fit_rms']}{' (POOR)' if res['poor'] else ''}. Sweeps "
        f"{res['sweep_s'] / 60:.1f} min, calibration and predictions "
        f"{(res['total_s'] - res['sweep_s']) / 60:.1f} min, whole benchmark "
        f"{res['total_s'] / 60:.1f} min.",
    ]
    if res["notes"]:
        lines += ["", "Calibrate's notes: " + "; ".join(res["notes"])]
    history = _history(DOCS.read_text(), begin, end)
    if history:
        lines += ["", "History (earlier starts of this script): " + history]
    write_block(begin, end, "\n".join([*lines, end]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--quick", action="store_true", help="3 steps a sweep, 15 s windows, no repeat")
    ap.add_argument(
        "--keep",
        type=Path,
        help="keep the sweeps and model here; sweeps already there are reused (calibrate and "
        "predict again without measuring)",
    )
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the server's finally runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _raise_priority(os.getpid())
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        res = bench(args.keep, args.quick)
    else:
        with tempfile.TemporaryDirectory(prefix="tw-llama-cross-") as tmp:
            res = bench(Path(tmp), args.quick)
    print(json.dumps(res, indent=2, default=str), flush=True)
    for name, w in res["workloads"].items():
        r = _ratio(w["knees"])
        print(f"{name}: predicted/measured {r:.2f}" if r else f"{name}: -", flush=True)
    if args.write_docs:
        write_docs(res, machine_label())


if __name__ == "__main__":
    main()
