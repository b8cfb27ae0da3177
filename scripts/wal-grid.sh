#!/usr/bin/env bash
# The issue-4 logging grid: paper 003 (bench wal) and paper 001 (bench txn --log).
# Usage: scripts/wal-grid.sh OUT.jsonl   (needs a release build of tsumiki-cli)
set -euo pipefail
out=${1:?usage: scripts/wal-grid.sh OUT.jsonl}
t=./target/release/tsumiki
: > "$out"
$t bench wal --log pwal,swal,raw-sync --threads 1,4,16 --group 1 --mix u1 --txns 100000 --runs 3 --json >> "$out"
$t bench wal --log raw-append --threads 1,16 --group 1 --mix u1 --txns 50000 --runs 3 --json >> "$out"
$t bench wal --log pwal,swal --threads 16 --group 4,16,64 --mix u1 --txns 50000 --runs 3 --json >> "$out"
$t bench wal --log pwal,swal,raw-sync --threads 16 --group 1 --mix r10,r5u5,u10 --txns 50000 --runs 3 --json >> "$out"
for device in nvm file; do
  for w in u1 u10 u5r5; do
    $t bench txn --workload "$w" --cc tictoc --log pwal,swal --release nlr,elr --group 1,16 \
      --device "$device" --threads 2 --records 100000 --duration 2 --runs 3 --json >> "$out" 2>/dev/null
  done
done
