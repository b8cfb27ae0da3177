//! Links LevelDB and RocksDB (bench fill's C peers) only where their development packages
//! are installed, so the binary still builds on a machine without them: the engines are
//! then reported as not built in. Embeds the git commit the binary is built from
//! (`TSUMIKI_GIT_COMMIT`, named in every benchmark's JSON header). Tells the tests whether
//! they are built optimized (`cfg(tsumiki_unoptimized)`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_leveldb)");
    println!("cargo::rustc-check-cfg=cfg(have_rocksdb)");
    // The tests size their work by the opt-level, not by debug assertions (CI runs the
    // optimized tests with debug assertions on; see crates/tsumiki/build.rs).
    println!("cargo::rustc-check-cfg=cfg(tsumiki_unoptimized)");
    if std::env::var("OPT_LEVEL").is_ok_and(|l| l == "0") {
        println!("cargo::rustc-cfg=tsumiki_unoptimized");
    }
    // TSUMIKI_NO_PEER_LIBS=1 builds without them even where installed (tests the fallback).
    println!("cargo::rerun-if-env-changed=TSUMIKI_NO_PEER_LIBS");
    let skip = std::env::var_os("TSUMIKI_NO_PEER_LIBS").is_some_and(|v| v == "1");
    for (lib, header) in [("leveldb", "/usr/include/leveldb/c.h"), ("rocksdb", "/usr/include/rocksdb/c.h")] {
        let present = Path::new(header).exists();
        // A missing header: watch the include directory, so installing the package
        // and rebuilding picks the library up.
        println!("cargo::rerun-if-changed={}", if present { header } else { "/usr/include" });
        if !skip && present {
            println!("cargo::rustc-cfg=have_{lib}");
            println!("cargo::rustc-link-lib=dylib={lib}");
        }
    }
    git_commit();
}

/// `git rev-parse HEAD`, or `unknown` (no git, or not a checkout: a crates.io package).
/// Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it points to (a commit).
fn git_commit() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo::rustc-env=TSUMIKI_GIT_COMMIT={commit}");
    // Only files that exist: cargo reruns the script on every build for a missing one.
    let mut watch: Vec<PathBuf> = Vec::new();
    if let Some(head) = git(&["rev-parse", "--path-format=absolute", "--git-path", "HEAD"]) {
        watch.push(head.into());
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(r) = git(&["rev-parse", "--path-format=absolute", "--git-path", &branch]) {
            watch.push(r.into());
        }
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", "packed-refs"]) {
            watch.push(p.into());
        }
    }
    for p in watch.iter().filter(|p| p.exists()) {
        println!("cargo::rerun-if-changed={}", p.display());
    }
}
