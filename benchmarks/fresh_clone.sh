#!/usr/bin/env bash
# Times the README's fresh-machine commands on a clean clone of this repository:
#   make demo (new venv, no pip cache: everything downloaded and llama-cpp-python compiled), make demo again
#   (warm venv), then make test. Usage: benchmarks/fresh_clone.sh [CLONE_DIR] [RESULT]
#   (defaults /tmp/membox-fresh and benchmarks/results/fresh-clone.json). The result says the machine (cores,
#   memory, CPU model), the load before each step, each step's exit status and seconds, and the test summaries
#   (pytest's last line of each of make test's runs); the logs stay in CLONE_DIR. Run it with nothing else running.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/membox-fresh}
result=${2:-$src/benchmarks/results/fresh-clone.json}
case "$result" in /*) ;; *) result="$PWD/$result" ;; esac  # the clone is entered next: a relative path would land there
rm -rf "$dir" && git clone -q "$src" "$dir" && cd "$dir" || exit 1
export PIP_NO_CACHE_DIR=1
rows=()
for step in "demo fresh:make demo" "demo warm:make demo" "test:make test"; do
  name=${step%%:*}; cmd=${step#*:}; log="$dir/${name// /_}.log"
  load=$(cut -d' ' -f1 /proc/loadavg)
  s=$(date +%s); $cmd > "$log" 2>&1; rc=$?; e=$(date +%s)
  echo "$name: rc=$rc $((e - s)) s, load before $load (log: $log)"
  summaries=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | sed 's/=//g; s/^ *//; s/ *$//' \
              | python3 -c 'import json, sys; print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')
  rows+=("{\"step\": \"$name\", \"command\": \"$cmd\", \"rc\": $rc, \"seconds\": $((e - s)), \"load_before\": $load, \"tests\": $summaries}")
done
commit=$(git -C "$dir" rev-parse --short HEAD)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
mem=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
joined=$(IFS=,; echo "${rows[*]}")
python3 - "$result" <<EOF
import json, sys
out = {"date": "$(date -u +%F)", "commit": "$commit", "machine": {"cores": $(nproc), "memory_gib": $mem,
       "cpu": "$cpu"}, "pip_cache": "none (PIP_NO_CACHE_DIR=1)", "steps": [$joined]}
open(sys.argv[1], "w").write(json.dumps(out, indent=1) + "\n")
EOF
echo "saved: $result"
