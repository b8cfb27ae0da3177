#!/usr/bin/env python3
"""Short-lived handles through C: open, store one record durably, close (see
crates/tsumiki-capi/tests/c/handles.c), for tsumiki's ndbm, gdbm's ndbm and SQLite, in
alternating rounds; prints the medians, each engine's ratio to SQLite, and (with strace on
PATH) fsync and fdatasync calls per cycle.

    python3 scripts/c-short-handles.py HANDLES_TSUMIKI HANDLES_GDBM HANDLES_SQLITE \\
        [--rounds 5] [--cycles 50] [--preload 1000]

Build the three binaries from handles.c as its header says (or as .ci/capi.sh does)."""
import argparse
import json
import shutil
import subprocess
import tempfile

from handles_report import print_table, sync_counts


def run(binary, db, cycles, preload, strace=False):
    cmd = [binary, db, str(cycles), str(preload)]
    if strace:
        # Counts the whole run (the preload too): the preload's calls are taken away below.
        cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), sync_counts(out.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsumiki")
    ap.add_argument("gdbm")
    ap.add_argument("sqlite")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--preload", type=int, default=1000)
    args = ap.parse_args()
    engines = {"tsumiki": args.tsumiki, "gdbm": args.gdbm, "sqlite": args.sqlite}
    ms = {name: [] for name in engines}
    with tempfile.TemporaryDirectory(prefix="c-short-handles-") as work:
        for r in range(args.rounds):
            for name, binary in engines.items():
                row, _ = run(binary, f"{work}/{name}-{r}", args.cycles, args.preload)
                ms[name].append(row["ms_per_cycle"])
        syncs = {}
        if shutil.which("strace"):
            for name, binary in engines.items():
                # Per cycle: a run of 2n cycles less a run of n (the preload's calls cancel).
                n = 20
                _, a = run(binary, f"{work}/{name}-s1", n, args.preload, strace=True)
                _, b = run(binary, f"{work}/{name}-s2", 2 * n, args.preload, strace=True)
                syncs[name] = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in ("fdatasync", "fsync")}
    print_table(f"open, store one record, close (C): {args.cycles} cycles x {args.rounds} rounds, "
                f"{args.preload} records preloaded", engines, ms, syncs, digits=3)


if __name__ == "__main__":
    main()
