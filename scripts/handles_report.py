"""What scripts/short-handles.py and scripts/c-short-handles.py share: reading the sync
calls out of `strace -c`'s table, and printing one row per engine."""
import statistics


def sync_counts(strace_stderr, per=1):
    """fsync and fdatasync calls in `strace -f -c` output, each divided by `per`."""
    counts = {}
    for line in strace_stderr.splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            counts[parts[-1]] = int(parts[3] if len(parts) >= 6 else parts[-2]) / per
    return counts


def print_table(title, names, ms, syncs, digits=2):
    """Median milliseconds per cycle of each engine in `names`, its ratio to SQLite's, its
    syncs per cycle and every round's time."""
    base = statistics.median(ms["sqlite"])
    print(title)
    print(f"{'engine':>8} {'ms/cycle':>9} {'x sqlite':>9} {'fdatasync':>10} {'fsync':>6}  rounds")
    for name in names:
        m = statistics.median(ms[name])
        s = syncs.get(name, {})
        print(f"{name:>8} {m:9.{digits}f} {base / m:9.2f} {s.get('fdatasync', 0):10.1f} {s.get('fsync', 0):6.1f}  "
              + " ".join(f"{x:.{digits}f}" for x in ms[name]))
