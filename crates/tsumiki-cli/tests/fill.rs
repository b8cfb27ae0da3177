//! `tsumiki bench fill` end to end: the parent runs each engine in a child process of the
//! real binary and prints, after the header record, one result record per engine with the
//! documented fields.

use std::process::Command;

#[test]
fn fill_prints_one_json_object_per_engine() {
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(["bench", "fill", "--engine", "tsumiki,raw", "--records", "2000", "--per-txn", "100"])
        .args(["--rounds", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0]["record"], "header");
    assert_eq!(lines[0]["options"]["per_txn"], serde_json::json!([100]));
    for (row, engine) in lines[1..].iter().zip(["tsumiki", "raw"]) {
        let (p, m) = (&row["params"], &row["metrics"]);
        assert_eq!(row["record"], "result");
        assert_eq!(row["variant"], engine);
        assert_eq!(p["engine"], engine);
        assert_eq!(p["records"], 2000);
        assert_eq!(p["per_txn"], 100);
        assert_eq!(m["txns"], 20);
        assert_eq!(p["rounds"], 2);
        assert_eq!(p["sync"], true);
        assert_eq!(m["tx_per_s_runs"].as_array().unwrap().len(), 2);
        assert_eq!(row["throughput"], m["rec_per_s"]);
        for field in [
            "tx_per_s",
            "rec_per_s",
            "tx_per_s_whole",
            "bytes_per_commit",
            "peak_rss_bytes",
            "close_s",
            "reopen_s",
            "disk_bytes",
        ] {
            assert!(m[field].as_f64().is_some_and(|v| v > 0.0), "{engine} {field}: {row}");
        }
    }
}

#[test]
fn unknown_engine_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(["bench", "fill", "--engine", "nope"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown --engine"));
}

/// `--crash`: a child killed by SIGKILL after its fill, another reopening what it left;
/// the reopen checks the first and last records, so a lost commit fails the run.
#[test]
fn crash_measure_reopens_what_a_killed_fill_left() {
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(["bench", "fill", "--engine", "tsumiki", "--records", "3000", "--per-txn", "10"])
        .args(["--rounds", "1", "--crash", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(row["metrics"]["crash_reopen_s"].as_f64().is_some_and(|v| v > 0.0), "{row}");
    let no_sync =
        Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(["bench", "fill", "--crash", "--no-sync"]).output().unwrap();
    assert!(!no_sync.status.success(), "--crash without durable commits must be refused");
}
