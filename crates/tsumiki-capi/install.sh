#!/usr/bin/env bash
# Builds tsumiki's C library in release and installs it under PREFIX:
#   PREFIX/lib/libtsumiki.so.VERSION with the links libtsumiki.so.ABI (its soname: 0.MINOR
#   before 1.0) and libtsumiki.so, PREFIX/lib/libtsumiki.a,
#   PREFIX/include/tsumiki/ndbm.h, PREFIX/lib/pkgconfig/tsumiki.pc
# Usage: crates/tsumiki-capi/install.sh PREFIX   (e.g. /usr/local or $HOME/.local)
# Then: cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs tsumiki)
# Needs cargo and python3; CARGO (default: cargo) names the cargo to run.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
cargo=${CARGO:-cargo}

"$cargo" build --release --manifest-path "$repo/Cargo.toml" -p tsumiki-capi
# Where cargo put it (CARGO_TARGET_DIR, a .cargo/config.toml setting, or <repo>/target).
target=$("$cargo" metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n 1)
# What a static link needs besides libtsumiki.a (rustc's --print native-static-libs on
# Linux with glibc, for the standard library).
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

install -d "$prefix/lib/pkgconfig" "$prefix/include/tsumiki"
# The soname the library was linked with (build.rs): 0.MINOR before 1.0, else MAJOR.
case $version in
    0.*) abi=$(echo "$version" | cut -d. -f1,2) ;;
    *) abi=$(echo "$version" | cut -d. -f1) ;;
esac
install -m 0755 "$target/release/libtsumiki.so" "$prefix/lib/libtsumiki.so.$version"
ln -sfn "libtsumiki.so.$version" "$prefix/lib/libtsumiki.so.$abi"
ln -sfn "libtsumiki.so.$abi" "$prefix/lib/libtsumiki.so"
install -m 0644 "$target/release/libtsumiki.a" "$prefix/lib/libtsumiki.a"
install -m 0644 "$here/include/tsumiki/ndbm.h" "$prefix/include/tsumiki/ndbm.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE_LIBS@|$private_libs|" \
    "$here/tsumiki.pc.in" > "$prefix/lib/pkgconfig/tsumiki.pc"
chmod 0644 "$prefix/lib/pkgconfig/tsumiki.pc"
echo "installed tsumiki $version under $prefix"
