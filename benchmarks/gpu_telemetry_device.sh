#!/usr/bin/env bash
# GPU telemetry (issue 44) for real: tailwise run --gpu-metrics nvml against a toy server that
# does real GPU work per token (benchmarks/gpu_toy_server.py), at a few rates.
#
# For a lent GPU machine with no network, from the repository root:
#     bash benchmarks/gpu_telemetry_device.sh
# It installs the wheels in .whl/ (the dependencies the machine's image lacks) into /tmp/site,
# builds the C extensions in place where gcc is (else tailwise's pure-Python paths), starts
# the toy server, runs tailwise at each of $RATES for $DURATION (+ $WARMUP), and writes into
# $OUT (default /tmp/gpu-telemetry-out) at most 7 files:
#     log.txt          what happened, with tailwise's terminal summary of each run
#     server.txt       the toy server's calibration and its totals
#     summary-rN.json  each run's summary.json (its gpu section: energy per token, ...)
#     gpu_metrics-rN.jsonl  the middle rate's GPU samples
#     runs.tar.gz      the three run directories (records, summaries, samples)
# Bounded: every step has a timeout and the whole is under 4 minutes; it stops by itself.
#
# A CPU dry run (no GPU, no torch; NumPy and the toy server's made-up DCGM exporter), with
# the interpreter that has tailwise's dependencies (INSTALL=1: from .whl/ as on the device):
#     DRY_RUN=1 PY=.venv/bin/python RATES="2 4 6" DURATION=6s WARMUP=1s INPUT_TOKENS=8 \
#         MAX_TOKENS=8 bash benchmarks/gpu_telemetry_device.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-telemetry-out}
RATES=${RATES:-"4 32 128"}
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
SLO=${SLO:-"ttft<=250ms"}
DRY_RUN=${DRY_RUN:-0}
PY=${PY:-python3}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
T0=$(date +%s)
say "# gpu_telemetry_device.sh $(date -u +%FT%TZ) on $(hostname), dry run: $DRY_RUN"
say "# git: $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-100)"

# 1. Dependencies from .whl/ (no network), and the C extensions where a compiler is.
INSTALL=${INSTALL:-$([ "$DRY_RUN" = 1 ] && echo 0 || echo 1)}
SITE=${SITE:-/tmp/site}
if [ "$INSTALL" != 1 ]; then
    export PYTHONPATH=$PWD/src
else
    if ! timeout 90 "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
        .whl/*.whl >> "$LOG" 2>&1; then
        say "# pip install from .whl/ failed (see above): the wheels unzipped instead"
        "$PY" -c "import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob('.whl/*.whl')]" "$SITE" >> "$LOG" 2>&1
    fi
    export PYTHONPATH=$SITE:$PWD/src
    if command -v gcc > /dev/null; then
        timeout 120 "$PY" setup.py -q build_ext --inplace >> "$LOG" 2>&1 \
            && say "# C extensions built in place" \
            || say "# C extensions not built: tailwise's pure-Python paths"
    else
        say "# no gcc: tailwise's pure-Python paths"
    fi
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib, sys
print("# python", sys.version.split()[0])
for name in ("tailwise", "numpy", "torch", "pynvml", "httptools", "hdrh", "pydantic", "uvloop"):
    try:
        m = importlib.import_module(name)
        print(f"#   {name} {getattr(m, '__version__', '')}")
    except Exception as exc:
        print(f"#   {name} missing ({type(exc).__name__})")
for mod in ("transport.sse_c", "transport.http_c", "execute.writer_c"):
    try:
        importlib.import_module(f"tailwise.loadgen.{mod}")
        print(f"#   tailwise.loadgen.{mod} built")
    except ImportError:
        print(f"#   tailwise.loadgen.{mod} not built (pure Python)")
EOF
if command -v nvidia-smi > /dev/null; then
    timeout 20 nvidia-smi --query-gpu=index,name,driver_version,power.draw,power.limit,utilization.gpu,memory.used,memory.total,clocks.sm,clocks.mem \
        --format=csv 2>&1 | tee -a "$LOG"
fi

# 2. The toy server (its own process; real GPU work per token, or NumPy in a dry run).
SERVER_ARGS=(--port 0 --lifetime 200)
GPU_METRICS=nvml
if [ "$DRY_RUN" = 1 ]; then
    SERVER_ARGS+=(--device numpy --width 128 --step auto:2ms --fake-dcgm)
fi
"$PY" benchmarks/gpu_toy_server.py "${SERVER_ARGS[@]}" > /tmp/toy-url.txt 2> "$OUT/server.txt" &
SERVER=$!
URL=""
for _ in $(seq 1 120); do
    URL=$(sed -n 's/^listening on //p' /tmp/toy-url.txt 2> /dev/null)
    [ -n "$URL" ] && break
    kill -0 "$SERVER" 2> /dev/null || break
    sleep 0.5
done
cat "$OUT/server.txt" | tee -a "$LOG"
if [ -z "$URL" ]; then
    say "# the toy server did not start"
    kill "$SERVER" 2> /dev/null
    exit 1
fi
[ "$DRY_RUN" = 1 ] && GPU_METRICS="dcgm=$URL/dcgm"
say "# toy server at $URL; --gpu-metrics $GPU_METRICS"

# 3. One run per rate: tailwise's terminal summary to the log, summary.json kept.
RUNS=/tmp/gpu-telemetry-runs
rm -rf "$RUNS"
mkdir -p "$RUNS"
set -- $RATES
MIDDLE=${2:-$1}
for RATE in $RATES; do
    say ""
    say "## rate $RATE/s"
    timeout 60 "$PY" -m tailwise run "$URL" --api openai-chat --model toy \
        --input-tokens "${INPUT_TOKENS:-128}" --max-tokens "${MAX_TOKENS:-64}" \
        --rate "$RATE/s" --duration "$DURATION" --warmup "$WARMUP" --slo "$SLO" \
        --gpu-metrics "$GPU_METRICS" --gpu-metrics-interval 500ms \
        --out "$RUNS/r$RATE" --force --json > "$OUT/summary-r$RATE.json" 2>> "$LOG"
    say "# exit $?"
    "$PY" - "$OUT/summary-r$RATE.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception as exc:
    print(f"# no summary: {exc}")
    raise SystemExit(0)
g = s.get("gpu") or {}
print("# key:", json.dumps({
    "rate": s["rates"]["offered_rps"], "goodput": s["rates"]["goodput_rps"],
    "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"), "verdict": s["verdict"],
    "power_w": g.get("power_w"), "energy_j": g.get("energy_j"),
    "per_output_token_j": g.get("per_output_token_j"),
    "per_good_request_j": g.get("per_good_request_j"),
    "util": [x.get("util_pct") for x in g.get("gpus", [])],
}))
EOF
    [ "$RATE" = "$MIDDLE" ] && cp "$RUNS/r$RATE/gpu_metrics.jsonl" "$OUT/gpu_metrics-r$RATE.jsonl" 2> /dev/null
done

# 4. NVML once more, on one request: where it is missing, the refusal is one line and exit 2.
say ""
say "## one request with --gpu-metrics nvml (a GPU machine: exit 0; without NVML: exit 2, one line)"
timeout 30 "$PY" -m tailwise run "$URL" --api openai-chat --model toy --rate 1/s --requests 1 \
    --gpu-metrics nvml --out "$RUNS/check" --force -q >> "$LOG" 2>&1
say "# exit $?"

kill "$SERVER" 2> /dev/null
wait "$SERVER" 2> /dev/null
cat "$OUT/server.txt" | tail -1 | tee -a "$LOG"
tar -czf "$OUT/runs.tar.gz" -C "$RUNS" . 2>> "$LOG"
say "# done in $(( $(date +%s) - T0 )) s; files in $OUT:"
ls -la "$OUT" | tee -a "$LOG"
