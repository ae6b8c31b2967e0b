#!/usr/bin/env bash
# LLM continuity judges on a subset (2 shared CPU cores): fit llm-logprob's threshold on TIAGE train
# (first $TRAIN dialogues), then score llm, llm-logprob and authors on TIAGE dev and DialSeg711 subsets.
# Usage: benchmarks/segmentation_llm.sh [CONFIG] [TRAIN] [DEV] [TEST]   (defaults: cpu 15 20 10; TEST=0 skips DialSeg711)
set -euo pipefail
CONFIG=${1:-cpu}; TRAIN=${2:-15}; DEV=${3:-20}; TEST=${4:-10}
D=${MEMBOX_DATA:-../shared/data}/segmentation
OUT=runs/segmentation/llm-$CONFIG
M=".venv/bin/membox eval segmentation --config $CONFIG"
$M --data $D/tiage_train.json --judge llm-logprob --set loom.prob_threshold=0.0 --limit $TRAIN --out $OUT/train-scored
T=$(.venv/bin/membox fit prob $OUT/train-scored | tee $OUT/fit-prob.json \
    | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['prob_threshold'])")
echo "prob_threshold=$T"
for J in llm-logprob llm authors; do
  $M --data $D/tiage_dev.json --judge $J --set loom.prob_threshold=$T --limit $DEV --out $OUT/tiage_dev-$J
  if [ "$TEST" -gt 0 ]; then
    $M --data $D/dialseg711_test.json --judge $J --set loom.prob_threshold=$T --limit $TEST --out $OUT/dialseg711-$J
  fi
done
