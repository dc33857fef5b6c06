#!/usr/bin/env bash
# Regenerate every image in docs/img from real runs (about 5 minutes on 2 cores).
#
#   docs/img/regenerate.sh            # uses `tailwise` and `chromium` from PATH
#   TAILWISE="python -m tailwise" docs/img/regenerate.sh
#
# Starts the built-in demo targets on free ports, runs the demo LLM sweep, an
# auto sweep of the demo http target and a second sweep to compare it with,
# renders the reports and takes screenshots of them in headless Chromium.
set -euo pipefail
IMG="$(cd "$(dirname "$0")" && pwd)"
TAILWISE="${TAILWISE:-tailwise}"
WORK="$(mktemp -d)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

serve() {  # serve NAME ARGS...: start a demo http target, print its port
    local name="$1"; shift
    $TAILWISE serve-demo --kind http --port 0 --lifetime 900s "$@" >"$WORK/$name.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 100); do
        grep -q "http://" "$WORK/$name.log" 2>/dev/null && break
        sleep 0.2
    done
    grep -o "http://[0-9.:]*" "$WORK/$name.log" | head -1
}

shot() {  # shot PAGE PNG HEIGHT
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size="1100,$3" --virtual-time-budget=8000 --screenshot="$2" \
        "file://$1" >/dev/null 2>&1
}

# 1. The LLM demo: sweep charts and the step past the knee.
(cd "$WORK" && $TAILWISE demo >/dev/null)  # its steps decide: about 70 s
demo="$(ls -d "$WORK"/runs/*-demo-sweep)"
cp "$demo/throughput_goodput.png" "$IMG/demo_throughput_goodput.png"
cp "$demo/latency_vs_load.png" "$IMG/demo_latency_vs_load.png"
cp "$demo/frontier.png" "$IMG/demo_frontier.png"
last="$(ls -d "$demo"/step-* | grep -v '\.png$' | tail -1)"
$TAILWISE report -q "$last"
cp "$last/latency_over_time.png" "$IMG/demo_latency_over_time.png"
cp "$last/percentiles.png" "$IMG/demo_percentiles.png"
cp "$last/ttft_tpot.png" "$IMG/demo_ttft_tpot.png"

# 2. An auto sweep of an M/M/2 target and the same rates against a slower one.
a="$(serve a --workers 2 --service exp:10ms)"
b="$(serve b --workers 2 --service exp:12ms)"
$TAILWISE sweep "$a/predict" --rates auto --slo 'p(99)<100ms' --duration 4s --warmup 1s \
    --out "$WORK/sweep-a" -q
rates="$(python3 -c "import json,sys; print(','.join(f\"{s['offered_rps']:g}\" for s in json.load(open(sys.argv[1]))['steps']))" "$WORK/sweep-a/sweep.json")"
$TAILWISE sweep "$b/predict" --rates "$rates" --slo 'p(99)<100ms' --duration 4s --warmup 1s \
    --out "$WORK/sweep-b" -q
$TAILWISE compare "$WORK/sweep-a" "$WORK/sweep-b" --report "$WORK/compare.html" >/dev/null || true
shot "$WORK/sweep-a/report.html" "$IMG/report_sweep.png" 2600
shot "$WORK/compare.html" "$IMG/report_compare.png" 2000
echo "regenerated: $(ls "$IMG"/*.png | xargs -n1 basename | tr '\n' ' ')"
