#!/usr/bin/env bash
# The closing-note grid of the index benchmark (issue 2): every structure, mixes 100:0,
# 50:50 and 0:100 (read:upsert), 8- and 64-byte keys, 1/2/4 threads, skew 0 and 0.99,
# 1 M records, 1 M keys, 5 M operations per point. Each structure is loaded once per key
# size and runs every point. Then the four Bw-tree variants (paper, each improvement alone,
# both) at 2 threads with 3 runs, for the effect of each improvement.
# Usage: scripts/index-grid.sh OUT.jsonl
set -euo pipefail
out=${1:?output file}
bin=target/release/tsumiki
cargo build --release -p tsumiki-cli >/dev/null
: > "$out"
common=(--initial 1000000 --keys 1000000 --ops 5000000 --skew 0,0.99
        --mix "read=100;read=50,upsert=50;upsert=100" --json)
for ks in 8 64; do
  "$bin" bench index "${common[@]}" --key-size "$ks" --threads 1,2,4 --runs 1 --index all >> "$out"
done
"$bin" bench index "${common[@]}" --key-size 8 --threads 2 --runs 3 \
  --index bwtree,bwtree-a,bwtree-b,bwtree-opt >> "$out"
