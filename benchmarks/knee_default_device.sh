#!/usr/bin/env bash
# The default knees of benchmarks/knee_default.py (M/M/1 and M/M/2, exponential 20 ms,
# p99(latency)<=300ms) on a quiet machine: a lent GPU machine's 16 idle cores, where
# the 2-core VM's other work cannot slow the demo servers. The two searches run side by
# side (each its own server and client, a few cores each). Same command as
# knee_default.py; each search's trials are condensed into $OUT/summary-<name>.txt even
# if it is cut at KNEE_LIMIT seconds.
#     bash benchmarks/knee_default_device.sh      (needs .whl/ as gpu_telemetry_device.sh)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/knee-device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || echo "# C extensions not built"

search() {  # name workers port
    local name=$1 workers=$2 port=$3
    python3 -m tailwise serve-demo --kind http --workers "$workers" --service exp:20ms \
        --port "$port" --lifetime 900s > "$OUT/server-$name.txt" 2>&1 &
    sleep 3
    local start; start=$(date +%s)
    timeout "${KNEE_LIMIT:-520}" python3 -m tailwise knee "http://127.0.0.1:$port/predict" \
        --slo 'p99(latency)<=300ms' --out "/tmp/knee-$name" --json -q \
        > "$OUT/knee-$name.json" 2> "$OUT/knee-$name.err"
    echo "# $name: exit $? after $(( $(date +%s) - start )) s; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" \
        > "$OUT/summary-$name.txt"
    KNEE_DIR="/tmp/knee-$name" python3 - >> "$OUT/summary-$name.txt" <<'PY'
import json, os, pathlib
for d in sorted(pathlib.Path(os.environ["KNEE_DIR"]).glob("*/summary.json"), key=lambda p: p.stat().st_mtime):
    s = json.loads(d.read_text()); e = s["slos"][0]; w = e.get("within") or {}
    print(d.parent.name, s["requests"].get("scheduled"), round(s["window"].get("duration_s", 0) if isinstance(s.get("window"), dict) else 0, 1),
          s["verdict"], e["decided"], w.get("share"), w.get("ci"), (e.get("ci_note") or "")[:100])
PY
}
search mm1 1 18777 &
search mm2 2 18778 &
wait
cat "$OUT"/summary-*.txt
