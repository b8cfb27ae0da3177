#!/usr/bin/env python3
"""Alternates two `tsumiki` binaries (A, then B, then A, ...) on the same benchmark command,
a given number of rounds, and prints each variant's throughput per round, the medians and
the median of the per-round ratios B/A. The machine is noisy: a ratio from rounds run
alternately is what a claim of "no slower" rests on.

Usage: scripts/ab-compare.py A_BIN B_BIN ROUNDS -- bench ARGS...
  e.g. scripts/ab-compare.py /tmp/tsumiki-base target/release/tsumiki 5 -- \\
           bench txn --workload ycsb-a --cc tictoc,silo --threads 1,2 --duration 2
Each run gets --json appended; every result record's `variant` and `throughput` are kept.
"""
import json
import statistics
import subprocess
import sys


def run(binary, args):
    out = subprocess.run([binary, *args, "--json"], check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("record") == "result":
            key = r["variant"]
            params = r.get("params", {})
            for p in ("threads", "mix", "per_txn", "sync", "workload"):
                if p in params:
                    key += f" {p}={params[p]}"
            got[key] = r["throughput"]
    return got


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 4:
        sys.exit(__doc__)
    a, b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[5:]
    runs = {"A": [], "B": []}
    for i in range(rounds):
        for name, binary in (("A", a), ("B", b)) if i % 2 == 0 else (("B", b), ("A", a)):
            runs[name].append(run(binary, args))
    print(f"A = {a}\nB = {b}\n{rounds} rounds, alternating: {' '.join(args)}")
    for key in runs["A"][0]:
        ta = [r[key] for r in runs["A"] if key in r]
        tb = [r[key] for r in runs["B"] if key in r]
        ratios = [y / x for x, y in zip(ta, tb) if x > 0]
        print(f"{key}: A median {statistics.median(ta):,.0f}  B median {statistics.median(tb):,.0f}  "
              f"B/A per round {[round(r, 3) for r in ratios]}  median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
