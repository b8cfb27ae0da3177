#!/usr/bin/env python3
"""Tables (markdown) from the JSON lines of scripts/txn-grid.sh."""
import json
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
main = [r for r in rows if r["workload"] != "batch"]
batch = [r for r in rows if r["workload"] == "batch"]

def name(r):
    return r["cc"] + (f"/{r['gc']}" if r.get("gc") else "")

groups = defaultdict(dict)
ccs = []
for r in main:
    key = (r["workload"], r["skew"])
    groups[key][(name(r), r["threads"])] = r
    if name(r) not in ccs:
        ccs.append(name(r))
threads = sorted({r["threads"] for r in main})
print("Throughput (K txn/s, median of runs) and abort rate (%):\n")
print("| workload | skew | thr | " + " | ".join(ccs) + " |")
print("|---|---|---|" + "---|" * len(ccs))
for (w, s), g in groups.items():
    for t in threads:
        cells = []
        for c in ccs:
            r = g.get((c, t))
            cells.append("-" if r is None else f"{r['tps_median'] / 1e3:.0f} ({100 * r['abort_rate']:.1f}%)")
        print(f"| {w} | {s} | {t} | " + " | ".join(cells) + " |")

if batch:
    print("\nBatch (paper 000), 6 threads (2 short, 4 long), 10,000 records, skew 0.8, 50% reads:\n")
    print("| long sleep s | long ops | gc | txn/s | abort % | versions held | unreclaimed (per s) | chain max | chain mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in batch:
        g = r["gc_stats"]
        dur = r["commits"] / r["tps"] if r["tps"] else 0
        per_s = g["unreclaimed"] / dur if dur else 0
        print(f"| {r['long_sleep_s']:g} | {r['long_ops']} | {r['gc']} | {r['tps']:.0f} | {100 * r['abort_rate']:.1f} | "
              f"{g['versions']} | {per_s:.0f} | {g['chain_max']} | {g['chain_mean']:.1f} |")
