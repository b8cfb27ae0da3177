//! Every `tsumiki bench` family, end to end on small settings: `--json` prints a header
//! record and result records in the shared envelope, `--csv` writes a header line and one
//! line per result, `--plot` writes an SVG naming every series; and a benchmark interrupted
//! by SIGINT removes its temporary databases before it exits with status 130.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs `tsumiki bench FAMILY ARGS --json --csv --plot` with TMPDIR in a directory of the
/// test's own; returns the parsed lines, the CSV text and the SVG text.
fn run_family(family: &str, args: &[&str]) -> (Vec<Value>, String, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (csv, svg) = (out_dir.path().join("out.csv"), out_dir.path().join("out.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(["bench", family])
        .args(args)
        .arg("--json")
        .arg("--csv")
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{family}: {stderr}");
    // Standard error is not a terminal here: no progress bar is drawn.
    assert!(!stderr.contains("eta"), "{family}: a progress bar on a pipe: {stderr}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "{family} left files in TMPDIR");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{family}: not JSON ({e}): {l}")))
        .collect();
    (lines, std::fs::read_to_string(csv).unwrap(), std::fs::read_to_string(svg).unwrap())
}

/// Checks the header and the envelope of every result; returns the results.
fn check_schema(family: &str, lines: &[Value]) -> Vec<Value> {
    let (header, rows) = lines.split_first().unwrap_or_else(|| panic!("{family}: no output"));
    assert_eq!(header["record"], "header", "{header}");
    assert_eq!(header["schema"], 1);
    assert_eq!(header["bench"], family);
    assert!(header["tsumiki_version"].as_str().is_some_and(|v| !v.is_empty()), "{header}");
    assert!(header["git_commit"].as_str().is_some_and(|v| v == "unknown" || v.len() == 40), "{header}");
    assert!(header["machine"]["cpus"].as_u64().is_some_and(|n| n > 0), "{header}");
    assert!(header["machine"]["memory_bytes"].as_u64().is_some_and(|n| n > 0), "{header}");
    assert!(header["options"].is_object() && header["options"]["json"] == true, "{header}");
    assert!(header["argv"].as_array().is_some_and(|a| a.iter().any(|x| x == family)), "{header}");
    assert!(header["started_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{header}");
    assert!(!rows.is_empty(), "{family}: no result record");
    for r in rows {
        assert_eq!(r["record"], "result", "{r}");
        assert_eq!(r["bench"], family, "{r}");
        assert!(r["variant"].as_str().is_some_and(|v| !v.is_empty()), "{r}");
        assert!(r["throughput"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        assert!(r["throughput_unit"].as_str().is_some_and(|u| u.ends_with("/s")), "{r}");
        assert!(r["params"].is_object() && r["metrics"].is_object(), "{r}");
    }
    rows.to_vec()
}

/// The CSV has a header line and one line per result, with the envelope's columns first.
fn check_csv(family: &str, csv: &str, rows: &[Value]) {
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().unwrap().clone();
    assert_eq!(
        &header.iter().take(5).collect::<Vec<_>>(),
        &["record", "bench", "variant", "throughput", "throughput_unit"]
    );
    assert!(header.iter().any(|c| c.starts_with("params.")) && header.iter().any(|c| c.starts_with("metrics.")));
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), rows.len(), "{family}: {csv}");
    for (rec, row) in records.iter().zip(rows) {
        assert_eq!(rec.len(), header.len());
        assert_eq!(&rec[2], row["variant"].as_str().unwrap());
        let t: f64 = rec[3].parse().unwrap();
        assert!((t - row["throughput"].as_f64().unwrap()).abs() <= 1e-9 * t.abs(), "{family}: {csv}");
    }
}

fn check_svg(family: &str, svg: &str, series: &[&str]) {
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{family}: not an SVG");
    assert!(svg.contains(&format!("tsumiki bench {family}")), "{family}: no title");
    for s in series {
        // plotters writes each text element's content on a line of its own. An axis whose
        // values span more than 50x is drawn in log scale, and its label says so (short
        // runs in CI can make a protocol's throughput tiny).
        let found = svg.contains(&format!("\n{s}\n")) || svg.contains(&format!("\n{s} (log scale)\n"));
        assert!(found, "{family}: no text {s:?}");
    }
}

fn variants(rows: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = rows.iter().map(|r| r["variant"].as_str().unwrap().to_string()).collect();
    v.dedup();
    v
}

#[test]
fn txn_output() {
    let (lines, csv, svg) = run_family(
        "txn",
        &["--cc", "tictoc,mvcc-si", "--threads", "1,2", "--records", "2000", "--txns-per-thread", "300", "--runs", "1"],
    );
    let rows = check_schema("txn", &lines);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r["params"]["records"], 2000);
        assert!(r["metrics"]["commits"].as_u64().is_some_and(|c| c >= 300), "{r}");
        assert!(r["metrics"]["latency_ns"]["99"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
    assert_eq!(variants(&rows), ["tictoc", "mvcc-si/epo-r"]);
    assert!(rows[2]["metrics"]["gc"]["versions"].is_i64(), "{}", rows[2]);
    check_csv("txn", &csv, &rows);
    check_svg("txn", &svg, &["tictoc", "mvcc-si/epo-r", "worker threads", "throughput (committed tx/s)"]);
}

/// A logged run: its database lives in a temporary directory, gone afterwards.
#[test]
fn txn_logged_output() {
    let (lines, csv, svg) = run_family(
        "txn",
        &[
            "--cc",
            "silo",
            "--log",
            "pwal",
            "--durability",
            "buffered",
            "--threads",
            "2",
            "--records",
            "1000",
            "--txns-per-thread",
            "200",
            "--runs",
            "1",
        ],
    );
    let rows = check_schema("txn", &lines);
    assert_eq!(variants(&rows), ["silo pwal-nlr"]);
    assert!(rows[0]["metrics"]["wal"]["syncs"].is_u64(), "{}", rows[0]);
    check_csv("txn", &csv, &rows);
    check_svg("txn", &svg, &["silo pwal-nlr"]);
}

#[test]
fn index_output() {
    let (lines, csv, svg) = run_family(
        "index",
        &[
            "--index",
            "bwtree,btree-rwlock",
            "--initial",
            "2000",
            "--keys",
            "4000",
            "--ops",
            "4000",
            "--threads",
            "1,2",
            "--runs",
            "1",
            "--min-run-ms",
            "0",
        ],
    );
    let rows = check_schema("index", &lines);
    assert_eq!(rows.len(), 4);
    assert_eq!(variants(&rows), ["bwtree", "btree-rwlock"]);
    assert!(rows[0]["metrics"]["stats"]["height"].as_u64().is_some_and(|h| h >= 1), "{}", rows[0]);
    assert!(rows[2]["metrics"]["stats"].is_null());
    check_csv("index", &csv, &rows);
    check_svg("index", &svg, &["bwtree", "btree-rwlock", "threads"]);
}

#[test]
fn wal_output() {
    let (lines, csv, svg) = run_family(
        "wal",
        &["--log", "pwal,swal,raw-sync", "--threads", "1,2", "--txns", "200", "--rows", "200", "--runs", "1"],
    );
    let rows = check_schema("wal", &lines);
    assert_eq!(rows.len(), 6);
    assert_eq!(variants(&rows), ["pwal", "swal", "raw-sync", "pwal", "swal", "raw-sync"]);
    assert!(rows.iter().all(|r| r["params"]["txns"].as_u64().is_some_and(|t| t == 200)));
    check_csv("wal", &csv, &rows);
    check_svg("wal", &svg, &["pwal", "swal", "raw-sync", "worker threads"]);
}

/// Two transaction sizes: the plot draws records/s against them.
#[test]
fn fill_output() {
    let (lines, csv, svg) = run_family(
        "fill",
        &["--engine", "tsumiki,raw", "--records", "2000", "--per-txn", "10,100", "--rounds", "1", "--no-sync"],
    );
    let rows = check_schema("fill", &lines);
    assert_eq!(rows.len(), 4);
    let sizes: Vec<u64> = rows.iter().map(|r| r["params"]["per_txn"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [10, 10, 100, 100]);
    for r in &rows {
        assert_eq!(r["metrics"]["txns"].as_u64().unwrap(), 2000 / r["params"]["per_txn"].as_u64().unwrap());
    }
    check_csv("fill", &csv, &rows);
    check_svg("fill", &svg, &["tsumiki", "raw", "records per transaction"]);
}

/// redb's comparison at a tiny scale: every row for tsumiki (and redb), and the reads and
/// removals count what the database holds: 2,000 loaded records plus the write rows'
/// 111,000.
#[test]
fn kv_output() {
    let (lines, csv, svg) = run_family(
        "kv",
        &["--engine", "tsumiki,redb", "--records", "2000", "--threads", "1,2", "--rounds", "1", "--cache-mb", "64"],
    );
    let rows = check_schema("kv", &lines);
    let (loaded, total) = (2_000u64, 2_000u64 + 111_000);
    let all = [
        "bulk_load",
        "individual_writes",
        "batch_writes",
        "nondurable_writes",
        "sorted_load",
        "append_load",
        "len",
        "random_reads",
        "range_reads",
        "threaded_reads",
        "threaded_reads",
        "removals",
        "pop_first",
        "pop_last",
        "retain",
        "compact",
    ];
    for engine in ["tsumiki", "redb"] {
        let mine: Vec<&Value> = rows.iter().filter(|r| r["variant"] == engine).collect();
        let names: Vec<&str> = mine.iter().map(|r| r["params"]["row"].as_str().unwrap()).collect();
        assert_eq!(names, all, "{engine}");
        let row = |name: &str| -> Vec<&Value> {
            mine.iter().filter(|r| r["params"]["row"] == name).map(|r| &r["metrics"]).collect()
        };
        let found = |m: &Value| m["found"].as_u64().unwrap();
        for m in row("len") {
            assert_eq!(found(m), total, "{engine}: len {m}");
        }
        for m in row("random_reads") {
            assert_eq!(found(m), 3 * loaded, "{engine}: random reads {m}");
        }
        for m in row("threaded_reads") {
            assert_eq!(found(m), loaded, "{engine}: threaded reads {m}");
        }
        let threads: Vec<u64> = mine
            .iter()
            .filter(|r| r["params"]["row"] == "threaded_reads")
            .map(|r| r["params"]["threads"].as_u64().unwrap())
            .collect();
        assert_eq!(threads, [1, 2], "{engine}");
        for m in row("range_reads") {
            // 10 records from each loaded key, but for a key among the last 10 (rare).
            assert!(found(m) <= 10 * loaded && found(m) + 100 >= 10 * loaded, "{engine}: range reads {m}");
            assert_eq!(m["found"], m["expected"], "{engine}: range reads {m}");
        }
        for m in row("removals") {
            assert_eq!(found(m), total - loaded / 2, "{engine}: records left after removals {m}");
        }
        for name in ["pop_first", "pop_last", "retain", "compact", "sorted_load", "append_load"] {
            for m in row(name) {
                assert_eq!(m["found"], m["expected"], "{engine}: {name} {m}");
            }
        }
        for m in row("compact") {
            for size in ["disk_after_writes_bytes", "disk_before_compact_bytes", "disk_after_compact_bytes"] {
                assert!(m[size].as_u64().is_some_and(|b| b > 0), "{engine}: {size} {m}");
            }
            assert!(m["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0), "{engine}: {m}");
        }
    }
    check_csv("kv", &csv, &rows);
    check_svg("kv", &svg, &["tsumiki", "redb", "reading threads"]);
}

#[test]
fn cache_output() {
    let (lines, csv, svg) =
        run_family("cache", &["--records", "5000", "--cache", "256K", "--duration", "1", "--threads", "1"]);
    let rows = check_schema("cache", &lines);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["metrics"]["verified"], true);
    check_csv("cache", &csv, &rows);
    check_svg("cache", &svg, &["resident set", "mix (tx/s)", "time (s)"]);
}

#[test]
fn an_output_file_in_a_missing_directory_is_refused_before_the_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(["bench", "txn", "--records", "100", "--plot", "/nonexistent-tsumiki-dir/p.svg"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

/// Waits until `dir` holds an entry whose name starts with `prefix` (at `depth` 1 or 2).
fn wait_for_entry(dir: &Path, prefix: &str, depth: usize, within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        let mut found = false;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if depth == 1 && name.starts_with(prefix) {
                found = true;
            }
            if depth == 2 && e.path().is_dir() {
                found |= std::fs::read_dir(e.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|x| x.file_name().to_string_lossy().starts_with(prefix));
            }
        }
        if found {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Sends SIGINT to a benchmark once its temporary database exists, and checks it exits
/// with 130 leaving TMPDIR empty.
fn interrupt(args: &[&str], prefix: &str, depth: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(args)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for_entry(tmp.path(), prefix, depth, Duration::from_secs(60)), "no {prefix}* appeared");
    // Let the run get going (database open, records being written).
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "the benchmark ended before the signal");
    // SAFETY: a plain system call on the id of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the benchmark did not exit after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    // A child process (bench fill's) ends on its own SIGTERM: nothing may reappear.
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}; {stderr}");
}

#[test]
fn ctrl_c_removes_a_logged_txn_database() {
    interrupt(
        &[
            "bench",
            "txn",
            "--cc",
            "tictoc",
            "--log",
            "pwal",
            "--durability",
            "buffered",
            "--records",
            "20000",
            "--threads",
            "1",
            "--duration",
            "60",
            "--runs",
            "1",
        ],
        "tsumiki-bench-txn-",
        1,
    );
}

/// bench fill: the parent's directory and the one its child fills inside it.
#[test]
fn ctrl_c_removes_a_fill_and_its_childs_database() {
    interrupt(
        &["bench", "fill", "--engine", "tsumiki", "--records", "4000000", "--per-txn", "1", "--rounds", "1"],
        "tsumiki-fill-tsumiki-",
        2,
    );
}

#[test]
fn ctrl_c_removes_a_cache_database() {
    interrupt(
        &["bench", "cache", "--records", "200000", "--cache", "1M", "--duration", "60", "--durability", "none"],
        "tsumiki-bench-cache-",
        1,
    );
}
