#!/usr/bin/env bash
# The default M/M/1 knee (benchmarks/knee_default.py's first target) on a quiet machine:
# a lent GPU machine's 16 idle cores, where the 2-core VM's other work cannot slow the
# demo server. Same command as knee_default.py; the trials' summaries are condensed
# into $OUT/summary.txt even if the search is cut at KNEE_LIMIT seconds.
#     bash benchmarks/knee_default_device.sh      (needs .whl/ as gpu_telemetry_device.sh)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/knee-device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || echo "# C extensions not built"
python3 -m tailwise serve-demo --kind http --workers 1 --service exp:20ms --port 18777 \
    --lifetime 900s > "$OUT/server.txt" 2>&1 &
sleep 3
START=$(date +%s)
timeout "${KNEE_LIMIT:-520}" python3 -m tailwise knee http://127.0.0.1:18777/predict \
    --slo 'p99(latency)<=300ms' --out /tmp/knee --json -q > "$OUT/knee.json" 2> "$OUT/knee.err"
echo "# exit $? after $(( $(date +%s) - START )) s; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
python3 - >> "$OUT/summary.txt" <<'PY'
import json, pathlib
for d in sorted(pathlib.Path("/tmp/knee").glob("*/summary.json"), key=lambda p: p.stat().st_mtime):
    s = json.loads(d.read_text()); e = s["slos"][0]; w = e.get("within") or {}
    print(d.parent.name, s["requests"].get("scheduled"), round(s["window"].get("duration_s", 0) if isinstance(s.get("window"), dict) else 0, 1),
          s["verdict"], e["decided"], w.get("share"), w.get("ci"), (e.get("ci_note") or "")[:100],
          "service mean", (s.get("service_ms") or {}).get("mean"))
PY
cat "$OUT/summary.txt"
