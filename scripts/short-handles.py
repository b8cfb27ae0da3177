#!/usr/bin/env python3
"""Short-lived handles: open a database, put one record, close, as scripts, CGI programs
and mail tools do. tsumiki (the Python module), SQLite (sqlite3, synchronous=FULL, the
default rollback journal) and, where Python has it, gdbm (dbm.gnu, synchronized mode), in
alternating rounds in one process; medians of the rounds. With strace on PATH, each engine
also runs once under `strace -f -c` to count fsync and fdatasync calls per cycle.

    python3 scripts/short-handles.py [--rounds 5] [--cycles 50] [--preload 1000]

Run with the Python that has the tsumiki module installed (see crates/tsumiki-py).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import tsumiki

from handles_report import print_table, sync_counts


def engines():
    out = {}

    def ts_cycle(path, i):
        with tsumiki.open(path, "w") as db:
            db[b"key%d" % i] = b"value"

    def ts_make(path, n):
        with tsumiki.open(path, "c") as db:
            with db.transaction() as t:
                for k in range(n):
                    t[k.to_bytes(4, "big")] = b"x" * 100

    out["tsumiki"] = (ts_make, ts_cycle)

    import sqlite3

    def sq_make(path, n):
        c = sqlite3.connect(path)
        c.execute("create table kv(k blob primary key, v blob)")
        c.executemany("insert into kv values (?, ?)", [(k.to_bytes(4, "big"), b"x" * 100) for k in range(n)])
        c.commit()
        c.close()

    def sq_cycle(path, i):
        c = sqlite3.connect(path)
        c.execute("pragma synchronous=FULL")
        c.execute("insert or replace into kv values (?, ?)", (b"key%d" % i, b"value"))
        c.commit()
        c.close()

    out["sqlite"] = (sq_make, sq_cycle)
    try:
        import dbm.gnu as gnu

        def g_make(path, n):
            d = gnu.open(path, "n")
            for k in range(n):
                d[k.to_bytes(4, "big")] = b"x" * 100
            d.close()

        def g_cycle(path, i):
            d = gnu.open(path, "ws")
            d[b"key%d" % i] = b"value"
            d.close()

        out["gdbm"] = (g_make, g_cycle)
    except ImportError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--preload", type=int, default=1000)
    ap.add_argument("--only", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    es = engines()
    if args.only:
        # One engine's cycles, for strace to count.
        make, cycle = es[args.only]
        path = os.path.join(args.dir, args.only)
        for i in range(args.cycles):
            cycle(path, i)
        return
    work = tempfile.mkdtemp(prefix="short-handles-")
    try:
        for name, (make, _) in es.items():
            make(os.path.join(work, name), args.preload)
        ms = {name: [] for name in es}
        for r in range(args.rounds):
            for name, (_, cycle) in es.items():
                path = os.path.join(work, name)
                t = time.perf_counter()
                for i in range(args.cycles):
                    cycle(path, r * args.cycles + i)
                ms[name].append((time.perf_counter() - t) * 1e3 / args.cycles)
        syncs = {}
        if shutil.which("strace"):
            for name in es:
                n = 20
                res = subprocess.run(
                    ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", sys.executable, __file__,
                     "--only", name, "--dir", work, "--cycles", str(n)],
                    capture_output=True, text=True)
                syncs[name] = sync_counts(res.stderr, per=n)
        print_table(f"open, put one record, close: {args.cycles} cycles x {args.rounds} rounds, "
                    f"{args.preload} records preloaded", es, ms, syncs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
