#!/usr/bin/env bash
# The issue-3 benchmark grid: every protocol on YCSB-A/B/C (skew 0 and 0.9) and paper 001's
# workloads at 1, 2 and 4 threads with CCBench's parameters (1 M records, 4-byte values,
# 10 operations per transaction, blind writes), then paper 000's batch workload for the
# three garbage collectors. One JSON object per line goes to $1.
set -euo pipefail
out=${1:?usage: scripts/txn-grid.sh OUT.jsonl}
cd "$(dirname "$0")/.."
cargo build --release -p tsumiki-cli
bin=target/release/tsumiki
: > "$out"
common=(--cc all --threads 1,2,4 --records 1000000 --value-size 4 --ops-per-txn 10 --duration ${DURATION:-2} --runs ${RUNS:-3} --json)
for skew in 0 0.9; do
    for w in ycsb-a ycsb-b ycsb-c; do
        "$bin" bench txn --workload "$w" --skew "$skew" "${common[@]}" >> "$out"
    done
done
for w in r10 u1 u10 u5r5; do
    "$bin" bench txn --workload "$w" "${common[@]}" >> "$out"
done
for sleep in 0s 1s; do
    for ops in 6 100 1000; do
        "$bin" bench txn --workload batch --cc mvcc-si --gc aot,epo,epo-r --threads 6 \
            --long-sleep "$sleep" --long-ops "$ops" --duration ${BATCH_DURATION:-10} --runs 1 --json >> "$out"
    done
done
