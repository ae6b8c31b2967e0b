#!/usr/bin/env bash
# Times the README's fresh-machine commands on a clean clone of this repository:
#   make demo (new venv, no pip cache: everything downloaded and llama-cpp-python compiled), make demo again
#   (warm venv), then make test. Usage: benchmarks/fresh_clone.sh [CLONE_DIR]   (default /tmp/membox-fresh)
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/membox-fresh}
rm -rf "$dir" && git clone -q "$src" "$dir" && cd "$dir" || exit 1
export PIP_NO_CACHE_DIR=1
for step in "demo fresh:make demo" "demo warm:make demo" "test:make test"; do
  name=${step%%:*}; cmd=${step#*:}
  s=$(date +%s); $cmd > "$dir/${name// /_}.log" 2>&1; rc=$?; e=$(date +%s)
  echo "$name: rc=$rc $((e - s)) s (log: $dir/${name// /_}.log)"
done
