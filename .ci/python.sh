#!/usr/bin/env bash
# CI: installs the Python module as a user does (pip, in a fresh virtualenv; maturin and
# pyo3 come from PyPI and crates.io), then runs its tests and the README's example.
# Run from anywhere, with cargo and python3 (with venv) on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# The crate is outside the workspace, so the workspace's fmt and clippy steps skip it.
echo "== Python module: rustfmt and clippy"
cargo fmt --manifest-path crates/tsumiki-py/Cargo.toml -- --check
cargo clippy --manifest-path crates/tsumiki-py/Cargo.toml --release -- -D warnings

echo "== Python module: pip install in a fresh virtualenv"
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --progress-bar off ./crates/tsumiki-py pytest

echo "== Python: the dbm, shelve and transaction tests"
# TSUMIKI_RO_REQUIRED=1: the read-only mount test runs (user namespaces), never skips.
TSUMIKI_RO_REQUIRED=1 "$venv/bin/python" -m pytest -q crates/tsumiki-py/tests

echo "== Python: a real full disk (a 16 MiB tmpfs in a mount namespace of its own)"
mkdir "$venv/small"
TSUMIKI_FULL_DIR_REQUIRED=1 unshare --user --map-root-user --mount sh -c \
    'mount -t tmpfs -o size=16m,mode=0700 tmpfs "$1" && TSUMIKI_FULL_DIR="$1" "$2" -m pytest -q "$3" -k test_full_disk_is_enospc' \
    sh "$venv/small" "$venv/bin/python" crates/tsumiki-py/tests/test_dbm.py

echo "== Python: the README example"
# From another directory, so that only the installed module can be imported.
(cd "$venv" && "$venv/bin/python" "$repo/crates/tsumiki-py/examples/hello.py")

echo "== Python: the example as the README shows it"
python3 scripts/readme-block.py python > "$venv/readme.py"
(cd "$venv" && "$venv/bin/python" readme.py)
