//! `tsumiki stats DIR`: the table and the JSON agree with what the library wrote.

use std::process::Command;

#[test]
fn stats_shows_the_page_segments_of_a_closed_database() {
    let dir = tempfile::tempdir().unwrap();
    // A close that writes the pages (not one that keeps a short log).
    let store = tsumiki::StoreOptions { close_keeps_short_log: false, ..Default::default() };
    let db = tsumiki::Db::create(dir.path(), tsumiki::Options { store, ..Default::default() }).unwrap();
    db.run(|t| {
        for i in 0..2000u32 {
            t.put(i.to_be_bytes(), [7u8; 40])?;
        }
        Ok(())
    })
    .unwrap();
    db.close().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(["stats", "--json"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["last_exit"], true);
    assert_eq!(
        (v["records"].as_u64(), v["key_bytes"].as_u64(), v["value_bytes"].as_u64()),
        (Some(2000), Some(8000), Some(80_000)),
        "{v}"
    );
    let files = v["files"].as_array().unwrap();
    assert!(!files.is_empty() && files.iter().all(|f| f["kind"] == "pages"), "{v}");
    let live: u64 = files.iter().map(|f| f["live_bytes"].as_u64().unwrap_or(0)).sum();
    assert!(live > 2000 * 40, "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki")).arg("stats").arg(dir.path()).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("closed cleanly") && text.contains("pages-00000000.seg"), "{text}");
    assert!(text.contains("2000 records in the pages (8000 key bytes, 80000 value bytes)"), "{text}");
    let out =
        Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(["stats"]).arg(dir.path().join("none")).output().unwrap();
    assert!(!out.status.success());
}

/// A database left open (a crash) shows its logs and its lane registry.
#[test]
fn stats_shows_the_lane_registry_of_a_crashed_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = tsumiki::Db::create(dir.path(), tsumiki::Options::default()).unwrap();
    db.run(|t| t.put(b"k", b"v")).unwrap();
    db.abandon_for_tests();
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(["stats", "--json"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["last_exit"], false);
    let regs = v["lane_registries"].as_array().unwrap();
    assert_eq!(regs.len(), 1, "{v}");
    assert_eq!(regs[0]["lanes"], 1, "{v}");
    assert!(v["files"].as_array().unwrap().iter().any(|f| f["kind"] == "log" && f["records"] == 1), "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki")).arg("stats").arg(dir.path()).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("lane registry of generation 1: 1 lanes"), "{text}");
}
