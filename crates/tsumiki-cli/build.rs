//! Links LevelDB and RocksDB (bench fill's C peers) only where their development packages
//! are installed, so the binary still builds on a machine without them: the engines are
//! then reported as not built in.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_leveldb)");
    println!("cargo::rustc-check-cfg=cfg(have_rocksdb)");
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
}
