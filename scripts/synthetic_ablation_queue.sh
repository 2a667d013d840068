#!/bin/bash
# Runs the variants listed in results/synthetic_ablation/queue.txt one after another (lines are removed as they start;
# "name replicates" per line), niced; logs in results/synthetic_ablation/logs/.
cd "$(dirname "$0")/.." || exit 1
mkdir -p results/synthetic_ablation/logs
while true; do
  line=$(head -n 1 results/synthetic_ablation/queue.txt 2>/dev/null)
  [ -z "$line" ] && break
  sed -i '1d' results/synthetic_ablation/queue.txt
  set -- $line
  echo "$(date -u +%FT%TZ) start $1 ${2:-100}" >> results/synthetic_ablation/logs/queue.log
  nice -n 19 python scripts/synthetic_ablation.py "$1" --replicates "${2:-100}" > "results/synthetic_ablation/logs/$1.log" 2>&1
  echo "$(date -u +%FT%TZ) end $1 rc=$?" >> results/synthetic_ablation/logs/queue.log
done
