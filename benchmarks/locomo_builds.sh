#!/usr/bin/env bash
# Build and measure LoCoMo conversations with the LLM, one process per core (one llama.cpp thread each),
# then save each finished run's per-question scores into benchmarks/results/ and print the pooled table.
#
#   benchmarks/locomo_builds.sh conv-41 conv-43            # config cpu
#   CONFIG=cpu JOBS=2 benchmarks/locomo_builds.sh conv-41 conv-43 conv-26
#
# Conversations are dealt to JOBS queues in the order given (put the longest first). A stopped run resumes
# where it stopped when the same command is run again (builds are cached under runs/builds/<config>/).
# Logs: runs/locomo-builds/<queue>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-cpu}
JOBS=${JOBS:-$(nproc)}
BIN=${BIN:-.venv/bin}
[ $# -gt 0 ] || { echo "usage: $0 CONVERSATION..." >&2; exit 2; }
mkdir -p runs/locomo-builds
queues=()
for ((q = 0; q < JOBS; q++)); do queues[q]=""; done
n=0
for conv in "$@"; do queues[n % JOBS]+=" $conv"; n=$((n + 1)); done
pids=()
for ((q = 0; q < JOBS; q++)); do
  [ -n "${queues[q]}" ] || continue
  (
    for conv in ${queues[q]}; do
      out=runs/locomo-builds/$CONFIG-$conv
      "$BIN/membox" eval locomo --config "$CONFIG" --conversations "$conv" --no-qa --k 1 3 5 10 --threads 1 \
        --out "$out" >> "runs/locomo-builds/queue$q.log" 2>&1
      "$BIN/python" benchmarks/locomo_bench.py save --config "$CONFIG" \
        --results "benchmarks/results/locomo-recall-$CONFIG.jsonl.gz" "$out" > /dev/null
      echo "$(date '+%F %T') $conv done" >> "runs/locomo-builds/queue$q.log"
    done
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
"$BIN/python" benchmarks/locomo_bench.py pooled --config "$CONFIG" --results "benchmarks/results/locomo-recall-$CONFIG.jsonl.gz"
exit $status
