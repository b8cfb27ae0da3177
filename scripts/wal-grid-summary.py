#!/usr/bin/env python3
"""Tables of the issue-4 logging grid: python3 scripts/wal-grid-summary.py IN.jsonl > OUT.md"""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
wal = [r for r in rows if r.get("bench") == "wal"]
txn = [r for r in rows if r.get("bench") != "wal"]


def tps(log, mix, threads, group):
    for r in wal:
        if (r["log"], r["mix"], r["threads"], r["group"]) == (log, mix, threads, group):
            return r["tps"]
    return None


def fmt(x):
    return "-" if x is None else f"{x:,.0f}"


print("## bench wal (paper 003): U1, group 1, median of 3 runs, tps\n")
threads = sorted({r["threads"] for r in wal if r["mix"] == "u1" and r["group"] == 1})
logs = ["pwal", "swal", "raw-sync", "raw-append"]
print("| threads | " + " | ".join(logs) + " | pwal / swal | pwal / raw-sync |")
print("|---" * (len(logs) + 3) + "|")
for t in threads:
    v = [tps(l, "u1", t, 1) for l in logs]
    ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}"
    print(f"| {t} | " + " | ".join(fmt(x) for x in v) + f" | {ratio(v[0], v[1])} | {ratio(v[0], v[2])} |")

print("\n## bench wal: group sizes at 16 threads (U1), tps\n")
groups = sorted({r["group"] for r in wal if r["threads"] == 16 and r["mix"] == "u1"})
print("| group | pwal | swal | pwal CAS misses/run |")
print("|---|---|---|---|")
for g in groups:
    miss = next((r["lsn_cas_misses_per_run"] for r in wal if (r["log"], r["mix"], r["threads"], r["group"]) == ("pwal", "u1", 16, g)), None)
    print(f"| {g} | {fmt(tps('pwal', 'u1', 16, g))} | {fmt(tps('swal', 'u1', 16, g))} | {fmt(miss)} |")

print("\n## bench wal: mixes at 16 threads, group 1, tps\n")
print("| mix | pwal | swal | raw-sync | pwal CAS misses/run | log bytes/txn |")
print("|---|---|---|---|---|---|")
for m in ["u1", "r10", "r5u5", "u10"]:
    r = next((r for r in wal if (r["log"], r["mix"], r["threads"], r["group"]) == ("pwal", m, 16, 1)), None)
    if r is None:
        continue
    print(f"| {m} | {fmt(tps('pwal', m, 16, 1))} | {fmt(tps('swal', m, 16, 1))} | {fmt(tps('raw-sync', m, 16, 1))} | {r['lsn_cas_misses_per_run']} | {r['log_bytes_per_txn']} |")

print("\n## bench txn --log (paper 001): TicToc, 2 threads, 100,000 records, median tps (abort %)\n")
devices = sorted({r.get("device") for r in txn if r.get("device")})
for d in devices:
    print(f"\n### device {d}\n")
    variants = []
    for r in txn:
        if r.get("device") == d and r["log"] not in variants:
            variants.append(r["log"])
    print("| workload | " + " | ".join(variants) + " |")
    print("|---" * (len(variants) + 1) + "|")
    for w in ["u1", "u10", "u5r5"]:
        cells = []
        for v in variants:
            r = next((r for r in txn if (r.get("device"), r["workload"], r["log"]) == (d, w, v)), None)
            cells.append("-" if r is None else f"{r['tps_median']:,.0f} ({100 * r['abort_rate']:.1f})")
        print(f"| {w} | " + " | ".join(cells) + " |")
