#!/bin/bash
# Per-round tsumiki / LevelDB ratios of paper 004's fill (100 records per transaction,
# synced), the medians over rounds, and the ratio of the medians.
#
# Usage: scripts/fill-ratio.sh [BINARY] [ROUNDS] [more `bench fill` options]
#   e.g. scripts/fill-ratio.sh target/release/tsumiki 5
set -euo pipefail
BIN=${1:-target/release/tsumiki}
ROUNDS=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
"$BIN" bench fill --engine tsumiki,leveldb --records 1000000 --per-txn 100 --sync \
    --rounds "$ROUNDS" --json "$@" 2>/dev/null | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    if line.startswith("{"):
        j = json.loads(line)
        runs[j["engine"]] = j["tx_per_s_runs"]
t, l = runs["tsumiki"], runs["leveldb"]
ratios = [a / b for a, b in zip(t, l)]
print("tsumiki tx/s", [round(x) for x in t])
print("leveldb tx/s", [round(x) for x in l])
print("ratios", [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3),
      "ratio of medians", round(statistics.median(t) / statistics.median(l), 3))'
