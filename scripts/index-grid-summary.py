#!/usr/bin/env python3
"""Summarises the JSON lines of scripts/index-grid.sh as markdown tables.

Usage: scripts/index-grid-summary.py OUT.jsonl

1. Throughput (M ops/s) of every structure at every grid point (runs=1 lines), with
   bwtree-opt's ratio to the best of skiplist / scc / btree-rwlock at that point.
2. The effect of each improvement: the runs=3 lines (median of runs), relative to bwtree.
"""
import json
import sys
from collections import defaultdict

PEERS = ("skiplist", "scc", "btree-rwlock")
MIXES = ("read=100", "read=50,upsert=50", "upsert=100")


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    grid = defaultdict(dict)
    effect = defaultdict(dict)
    names = []
    for r in rows:
        point = (r["key_size"], r["skew"], r["mix"], r["threads"])
        if r["runs"] == 1:
            grid[point][r["index"]] = r["throughput_ops_s"] / 1e6
            if r["index"] not in names:
                names.append(r["index"])
        else:
            effect[point][r["index"]] = r["throughput_median_ops_s"] / 1e6

    print("| key | skew | mix | thr | " + " | ".join(names) + " | opt/best peer |")
    print("|---" * (len(names) + 5) + "|")
    for point in sorted(grid, key=lambda p: (p[0], p[1], MIXES.index(p[2]), p[3])):
        tp = grid[point]
        best = max(tp.get(p, 0.0) for p in PEERS)
        ratio = tp.get("bwtree-opt", 0.0) / best if best else float("nan")
        cells = " | ".join(f"{tp[n]:.2f}" if n in tp else "-" for n in names)
        print(f"| {point[0]} | {point[1]} | {point[2]} | {point[3]} | {cells} | {ratio:.2f} |")

    if effect:
        variants = ("bwtree", "bwtree-a", "bwtree-b", "bwtree-opt")
        print()
        print("| key | skew | mix | thr | " + " | ".join(variants) + " | (a) | (b) | both |")
        print("|---" * 11 + "|")
        for point in sorted(effect, key=lambda p: (p[0], p[1], MIXES.index(p[2]), p[3])):
            tp = effect[point]
            base = tp.get("bwtree", 0.0)
            cells = " | ".join(f"{tp.get(v, 0.0):.2f}" for v in variants)
            rel = " | ".join(f"{(tp.get(v, 0.0) / base - 1) * 100:+.0f}%" for v in variants[1:])
            print(f"| {point[0]} | {point[1]} | {point[2]} | {point[3]} | {cells} | {rel} |")


if __name__ == "__main__":
    main(sys.argv[1])
