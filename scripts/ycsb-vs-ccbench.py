#!/usr/bin/env python3
"""YCSB-A, B and C on tsumiki's TicToc and Silo against CCBench's, in alternating rounds of
one run (issue 36): 1M records, 10 operations per transaction, 4-byte values, uniform keys,
blind writes. Each round runs, per workload, CCBench Silo, CCBench TicToc, then tsumiki
(both protocols, 1 and 2 threads); the medians over rounds and tsumiki's ratio per round
are printed.

CCBench (thawk105/ccbench) must be built outside this repository, with its
`run-ycsb.sh PROTOCOL WORKLOAD THREADS SECONDS` wrapper (prints `... tps=N ...`).

Usage: scripts/ycsb-vs-ccbench.py CCBENCH_DIR TSUMIKI_BIN ROUNDS [SECONDS] [THREADS]
  e.g. scripts/ycsb-vs-ccbench.py /work/ccbench target/release/tsumiki 3 3 1,2
"""
import json
import statistics
import subprocess
import sys


def ccbench(root, proto, wl, threads, secs):
    out = subprocess.run([f"{root}/run-ycsb.sh", proto, wl, str(threads), str(secs)],
                         check=True, capture_output=True, text=True).stdout
    for tok in out.split():
        if tok.startswith("tps="):
            return float(tok[4:])
    raise RuntimeError(f"no tps in {out!r}")


def tsumiki(binary, wl, threads, secs):
    args = [binary, "bench", "txn", "--workload", f"ycsb-{wl.lower()}", "--cc", "tictoc,silo",
            "--threads", threads, "--duration", str(secs), "--runs", "1", "--value-size", "4",
            "--ops-per-txn", "10", "--records", "1000000", "--json", "-q"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("record") == "result":
                got[(r["variant"], r["params"]["threads"])] = r["throughput"]
    return got


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    root, binary, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    secs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    threads = sys.argv[5] if len(sys.argv) > 5 else "1,2"
    counts = [int(t) for t in threads.split(",")]
    rows = {}  # (wl, proto, threads) -> {"ccbench": [...], "tsumiki": [...]}
    for r in range(rounds):
        for wl in "ABC":
            cc = {}
            for proto in ("silo", "tictoc"):
                for t in counts:
                    cc[(proto, t)] = ccbench(root, proto, wl, t, secs)
            ts = tsumiki(binary, wl, threads, secs)
            for proto in ("silo", "tictoc"):
                for t in counts:
                    row = rows.setdefault((wl, proto, t), {"ccbench": [], "tsumiki": []})
                    row["ccbench"].append(cc[(proto, t)])
                    row["tsumiki"].append(ts[(proto, t)])
            print(f"round {r + 1} ycsb-{wl.lower()}: " + ", ".join(
                f"{p}/{t} {ts[(p, t)]:,.0f} vs {cc[(p, t)]:,.0f}" for p in ("silo", "tictoc") for t in counts),
                file=sys.stderr, flush=True)
    print(f"{rounds} rounds of {secs} s; tps: tsumiki vs CCBench (medians), tsumiki/CCBench per round")
    print(f"{'workload':8} {'cc':6} {'thr':>3} {'tsumiki':>10} {'ccbench':>10}  ratio  per round")
    for (wl, proto, t), row in sorted(rows.items()):
        ratios = [a / b for a, b in zip(row["tsumiki"], row["ccbench"])]
        print(f"ycsb-{wl.lower():3} {proto:6} {t:>3} {statistics.median(row['tsumiki']):>10,.0f} "
              f"{statistics.median(row['ccbench']):>10,.0f}  {statistics.median(ratios):.2f}  "
              f"[{', '.join(f'{x:.2f}' for x in ratios)}]")


if __name__ == "__main__":
    main()
