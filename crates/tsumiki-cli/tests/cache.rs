//! `tsumiki bench cache` end to end on a small database under a tiny cache: the fill (on
//! its own thread, or on the main one), the mix, and the verify after reopening all run,
//! and the JSON result record carries the resident-set figures.

use std::process::Command;

fn run(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(["bench", "cache", "--records", "20000", "--cache", "256K", "--duration", "1", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row =
        stdout.lines().find(|l| l.contains(r#""record":"result""#)).unwrap_or_else(|| panic!("no result: {stdout}"));
    serde_json::from_str(row).unwrap()
}

#[test]
fn both_fill_layouts_run_and_verify() {
    for (extra, on_main) in [(&[][..], false), (&["--fill-on-main-thread"][..], true)] {
        let row = run(extra);
        assert_eq!(row["params"]["records"], 20000);
        assert_eq!(row["params"]["fill_on_main_thread"], on_main);
        for field in ["fill_rps", "rss_hwm", "rss_bound", "table_bytes"] {
            assert!(row["metrics"][field].as_f64().is_some_and(|v| v > 0.0), "{field}: {row}");
        }
        assert!(row["metrics"]["mix_tps"].as_f64().is_some_and(|v| v > 0.0), "no mix commit: {row}");
    }
}
