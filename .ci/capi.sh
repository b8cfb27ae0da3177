#!/usr/bin/env bash
# The C library in CI: installs it into a temporary prefix, then, with the system C
# compiler and pkg-config against the INSTALLED header and library:
# - the C test (crates/tsumiki-capi/tests/c/dbm_test.c) against tsumiki, linked shared and
#   static, and from the same source against gdbm's ndbm; their transcripts of the
#   ndbm-only part must be identical, and the tsumiki build checks transactions and errors;
# - the header compiles as C++;
# - the README's example (crates/tsumiki-capi/examples/hello.c) compiles and runs;
# - the C fill (tests/c/fill.c) against both, small (1,000 records one per transaction,
#   2,000 records 100 per transaction), each printing one valid JSON line;
# - short-lived handles (tests/c/handles.c: open, store one record, close) against
#   tsumiki, gdbm's ndbm and SQLite, 20 cycles each, each printing one valid JSON line.
# Run from anywhere; needs cargo, cc, pkg-config, python3, libgdbm-compat-dev and
# libsqlite3-dev.
set -euo pipefail
cd "$(dirname "$0")/.."

CC=${CC:-cc}
src=crates/tsumiki-capi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsumiki-capi-ci.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
bin=$tmp/bin
mkdir -p "$bin"

echo "-- install into $prefix"
bash "$src/install.sh" "$prefix"
for f in lib/libtsumiki.so lib/libtsumiki.a include/tsumiki/ndbm.h lib/pkgconfig/tsumiki.pc; do
    test -f "$prefix/$f" || { echo "not installed: $f" >&2; exit 1; }
done
# The shared library carries a soname, and programs linked against it name that.
soname=$(readelf -d "$prefix/lib/libtsumiki.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
case $soname in
    libtsumiki.so.[0-9]*) test -e "$prefix/lib/$soname" || { echo "no $soname installed" >&2; exit 1; } ;;
    *) echo "libtsumiki.so has no versioned soname: '$soname'" >&2; exit 1 ;;
esac
echo "soname: $soname"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
echo "pkg-config: tsumiki $(pkg-config --modversion tsumiki): $(pkg-config --cflags --libs tsumiki)"

warn=(-std=c99 -Wall -Wextra -Werror)
# shellcheck disable=SC2207 # pkg-config's words are meant to split
tsumiki_flags=($(pkg-config --cflags --libs tsumiki))
# Static: the archive itself, then what it needs (Libs.private), -ltsumiki left out.
# shellcheck disable=SC2207
static_flags=($(pkg-config --cflags tsumiki) "$prefix/lib/libtsumiki.a"
    $(pkg-config --static --libs tsumiki | sed -e 's/-ltsumiki//' -e 's/-L[^ ]*//g'))
rpath=-Wl,-rpath,$prefix/lib

echo "-- build the C test: tsumiki (shared, static) and gdbm's ndbm"
"$CC" "${warn[@]}" -o "$bin/dbm_test" "$src/tests/c/dbm_test.c" "${tsumiki_flags[@]}" "$rpath" -pthread
"$CC" "${warn[@]}" -o "$bin/dbm_test_static" "$src/tests/c/dbm_test.c" "${static_flags[@]}" -pthread
"$CC" "${warn[@]}" -DUSE_GDBM -o "$bin/dbm_test_gdbm" "$src/tests/c/dbm_test.c" -lgdbm_compat -lgdbm
if ! readelf -d "$bin/dbm_test" | grep -q "(NEEDED).*\[$soname\]"; then
    echo "dbm_test does not name $soname" >&2
    exit 1
fi
if ldd "$bin/dbm_test_static" | grep -q libtsumiki; then
    echo "dbm_test_static links libtsumiki.so" >&2
    exit 1
fi

echo "-- run them; the ndbm transcripts must agree"
for t in dbm_test dbm_test_static dbm_test_gdbm; do
    echo "$t"
    mkdir "$tmp/run-$t"
    "$bin/$t" "$tmp/run-$t" > "$tmp/$t.out"
done
# A real full disk: a 16 MiB tmpfs mounted in a mount namespace of the test's own (no
# privilege needed where user namespaces are allowed; CI runs as root).
echo "dbm_test --full-disk (a 16 MiB tmpfs)"
mkdir "$tmp/small"
unshare --user --map-root-user --mount sh -c \
    'mount -t tmpfs -o size=16m,mode=0700 tmpfs "$1" && "$2" --full-disk "$1"' sh "$tmp/small" "$bin/dbm_test"
diff -u "$tmp/dbm_test_gdbm.out" "$tmp/dbm_test.out"
diff -u "$tmp/dbm_test_gdbm.out" "$tmp/dbm_test_static.out"
echo "transcripts agree ($(wc -l < "$tmp/dbm_test.out") lines)"

echo "-- the header compiles as C++"
if command -v c++ >/dev/null 2>&1; then
    printf '#include <tsumiki/ndbm.h>\nint main() { DBM *d = dbm_open("x", O_RDONLY, 0); datum k = dbm_firstkey(d); dbm_close(d); return (int)k.dsize; }\n' \
        | c++ -x c++ -Wall -Wextra -Werror -fsyntax-only $(pkg-config --cflags tsumiki) -
else
    echo "(no c++: skipped)"
fi

echo "-- the README's C example"
"$CC" "${warn[@]}" -o "$bin/hello" "$src/examples/hello.c" "${tsumiki_flags[@]}" "$rpath"
"$bin/hello" "$tmp/hello-db" > "$tmp/hello.out"
printf 'hello\na\nb\ngreeting\n' | diff -u - "$tmp/hello.out"

echo "-- the C example as the README shows it"
python3 scripts/readme-block.py c > "$tmp/readme.c"
"$CC" "${warn[@]}" -o "$bin/readme" "$tmp/readme.c" "${tsumiki_flags[@]}" "$rpath"
"$bin/readme" "$tmp/readme-db" > "$tmp/readme.out"
printf 'hello\na\nb\ngreeting\n' | diff -u - "$tmp/readme.out"

echo "-- the C fill, small: tsumiki and gdbm's ndbm, 1 and 100 records per transaction"
"$CC" "${warn[@]}" -O2 -o "$bin/fill" "$src/tests/c/fill.c" "${tsumiki_flags[@]}" "$rpath"
"$CC" "${warn[@]}" -O2 -DUSE_GDBM -o "$bin/fill_gdbm" "$src/tests/c/fill.c" -lgdbm_compat -lgdbm
for per_txn in 1 100; do
    records=$((per_txn == 1 ? 1000 : 2000))
    for f in fill fill_gdbm; do
        line=$("$bin/$f" "$tmp/$f-$per_txn" "$records" "$per_txn")
        echo "$line"
        printf '%s\n' "$line" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
records, per_txn = int(sys.argv[1]), int(sys.argv[2])
assert len(rows) == 1, rows
r = rows[0]
assert r["engine"] in ("tsumiki-capi", "gdbm-ndbm"), r
assert r["records"] == records and r["per_txn"] == per_txn, r
assert r["txns"] == -(-records // per_txn) and r["seconds"] > 0 and r["tx_per_s"] > 0, r
' "$records" "$per_txn"
    done
done
echo "-- short-lived handles (open, store one record, close): tsumiki, gdbm's ndbm, SQLite, small"
"$CC" "${warn[@]}" -O2 -o "$bin/handles" "$src/tests/c/handles.c" "${tsumiki_flags[@]}" "$rpath"
"$CC" "${warn[@]}" -O2 -DUSE_GDBM -o "$bin/handles_gdbm" "$src/tests/c/handles.c" -lgdbm_compat -lgdbm
"$CC" "${warn[@]}" -O2 -DUSE_SQLITE -o "$bin/handles_sqlite" "$src/tests/c/handles.c" -lsqlite3
for h in handles handles_gdbm handles_sqlite; do
    line=$("$bin/$h" "$tmp/$h" 20 100)
    echo "$line"
    python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["engine"] in ("tsumiki-capi", "gdbm-ndbm", "sqlite"), r
assert r["cycles"] == 20 and r["preload"] == 100 and r["seconds"] > 0 and r["ms_per_cycle"] > 0, r
' "$line"
done
echo "C library: all checks passed"
