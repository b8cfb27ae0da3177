#!/usr/bin/env python3
"""Paper 004's fill through the C library's ndbm interface against `tsumiki bench fill`
(and gdbm's ndbm, same C source), alternating in rounds; prints the medians and the ratio
C / Rust. Usage: c-fill-compare.py TSUMIKI_BIN FILL_C FILL_GDBM ROUNDS
(build FILL_C and FILL_GDBM from crates/tsumiki-capi/tests/c/fill.c as .ci/capi.sh does)."""
import json
import statistics
import subprocess
import sys
import tempfile

tsumiki, fill_c, fill_gdbm, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cases = [(1_000_000, 100), (20_000, 1)]


def c_fill(binary, records, per_txn):
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([binary, f"{d}/db", str(records), str(per_txn)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["tx_per_s"]


def bench_fill(records, per_txn):
    out = subprocess.run(
        [tsumiki, "bench", "fill", "--engine", "tsumiki", "--records", str(records), "--per-txn", str(per_txn),
         "--sync", "--rounds", "1", "--json", "--quiet"],
        check=True, capture_output=True, text=True)
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    return [r for r in rows if r.get("record") == "result"][0]["metrics"]["tx_per_s"]


for records, per_txn in cases:
    got = {"c": [], "rust": [], "gdbm": []}
    for r in range(rounds):
        got["c"].append(c_fill(fill_c, records, per_txn))
        got["rust"].append(bench_fill(records, per_txn))
        got["gdbm"].append(c_fill(fill_gdbm, records, per_txn))
        ratio = got["c"][-1] / got["rust"][-1]
        print(f"round {r}: {records} records, {per_txn}/txn: C {got['c'][-1]:.0f} tx/s, bench fill {got['rust'][-1]:.0f}, "
              f"gdbm {got['gdbm'][-1]:.0f}; C/Rust {ratio:.3f}", flush=True)
    ratios = [c / r for c, r in zip(got["c"], got["rust"])]
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"== {records} records, {per_txn}/txn, medians of {rounds}: C ndbm {med['c']:.0f} tx/s, "
          f"tsumiki bench fill {med['rust']:.0f}, gdbm ndbm {med['gdbm']:.0f}; "
          f"median of per-round C/Rust {statistics.median(ratios):.3f} (C path costs {1 / statistics.median(ratios) - 1:+.1%})")
