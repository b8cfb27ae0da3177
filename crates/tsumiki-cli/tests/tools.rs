//! The database tools through the built binary: `dump`/`load` round trips and refusals,
//! `check` on healthy and damaged databases, `get`/`put`/`delete`/`scan`, `compact`.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tsumiki::{Db, Options};

/// Runs `tsumiki` with `args`; returns the exit code, standard output and standard error.
fn tsumiki<I, S>(args: I) -> (i32, Vec<u8>, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    out(Command::new(env!("CARGO_BIN_EXE_tsumiki")).args(args).output().unwrap())
}

/// Runs `tsumiki` with `args` and `input` on its standard input.
fn tsumiki_with_input(args: &[&OsStr], input: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tool may refuse before reading it all.
    let _ = child.stdin.take().unwrap().write_all(input);
    out(child.wait_with_output().unwrap())
}

fn out(o: Output) -> (i32, Vec<u8>, String) {
    (o.status.code().expect("exited"), o.stdout, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn s(p: &Path) -> &OsStr {
    p.as_os_str()
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:09}", i * 7919 % 1_000_003).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let n = (i % 40) as usize;
    (0..n).map(|j| (i as usize + j) as u8).collect()
}

/// A closed database in `dir` holding records `0..n`.
fn fill(dir: &Path, n: u64) {
    let db = Db::create(dir, Options::default()).unwrap();
    let mut i = 0;
    while i < n {
        let end = (i + 10_000).min(n);
        db.run(|t| (i..end).try_for_each(|j| t.put(key(j), value(j)))).unwrap();
        i = end;
    }
    db.close().unwrap();
}

/// A copy of the files of database `from` in a new directory.
fn copy_db(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.path().join(e.file_name())).unwrap();
    }
    to
}

fn files_starting(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

/// `tsumiki check --json DIR`: the exit code and the report.
fn check(dir: &Path) -> (i32, serde_json::Value) {
    let (code, stdout, stderr) = tsumiki([OsStr::new("check"), OsStr::new("--json"), s(dir)]);
    assert!(code == 0 || code == 1, "check failed to run ({code}): {stderr}");
    (code, serde_json::from_slice(&stdout).unwrap())
}

/// The files the damage findings of a report name.
fn damaged_files(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "damage")
        .map(|f| f["file"].as_str().unwrap().to_string())
        .collect()
}

/// The Must-show round trip: 1M records dumped, loaded into a new database and dumped
/// again give the same bytes; values read back with `get` match. (100K records in a
/// unoptimized build; CI runs the tests in release.)
#[test]
fn dump_then_load_round_trips_a_million_records() {
    let n: u64 = if cfg!(tsumiki_unoptimized) { 100_000 } else { 1_000_000 };
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    let (d1, d2) = (tmp.path().join("one.dump"), tmp.path().join("two.dump"));
    let t = std::time::Instant::now();
    fill(&src, n);
    let filled = t.elapsed();
    let (code, _, err) = tsumiki([OsStr::new("dump"), s(&src), s(&d1)]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("dumped {n} records")), "{err}");
    let dumped = t.elapsed();
    let (code, _, err) = tsumiki([OsStr::new("load"), s(&dst), s(&d1)]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("loaded {n} records")), "{err}");
    let loaded = t.elapsed();
    // The second dump goes through standard output.
    let (code, stdout, err) = tsumiki([OsStr::new("dump"), OsStr::new("--quiet"), s(&dst)]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    std::fs::write(&d2, &stdout).unwrap();
    let one = std::fs::read(&d1).unwrap();
    assert!(one == stdout, "the dumps differ ({} and {} bytes)", one.len(), stdout.len());
    eprintln!(
        "{n} records: fill {:?}, dump {:?}, load {:?}, dump again {:?}; {} bytes",
        filled,
        dumped - filled,
        loaded - dumped,
        t.elapsed() - loaded,
        one.len()
    );
    for i in [0, 1, 77, n / 2, n - 1] {
        let (code, got, err) =
            tsumiki([OsStr::new("get"), OsStr::new("--hex"), s(&dst), OsStr::new(&hex::encode(key(i)))]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(got, format!("{}\n", hex::encode(value(i))).into_bytes(), "record {i}");
    }
    let (code, _, _) = tsumiki([OsStr::new("get"), s(&dst), OsStr::new("key-absent")]);
    assert_eq!(code, 1);
    // The loaded database is healthy and holds every record.
    let (code, report) = check(&dst);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["records"], n);
    // A second load into it is refused (it holds records); --merge is allowed.
    let (code, _, err) = tsumiki([OsStr::new("load"), s(&dst), s(&d2)]);
    assert_eq!(code, 2);
    assert!(err.contains("already holds records") && err.contains("--merge"), "{err}");
    eprintln!("total {:?}", t.elapsed());
}

/// A dump cut anywhere, or with any damaged byte, is refused by `load` with a clear
/// error and exit code 1, and the database the load created is removed again.
#[test]
fn load_refuses_truncated_and_damaged_dumps() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fill(&src, 3000);
    let (code, dump, err) = tsumiki([OsStr::new("dump"), OsStr::new("-q"), s(&src), OsStr::new("-")]);
    assert_eq!(code, 0, "{err}");
    let header = 20;
    let mut cases: Vec<(String, Vec<u8>, &[&str])> = vec![
        ("empty".into(), Vec::new(), &["not a tsumiki dump"]),
        ("not a dump".into(), b"key\tvalue\n".to_vec(), &["not a tsumiki dump"]),
        ("cut in the header".into(), dump[..12].to_vec(), &["truncated"]),
        ("cut before the end record".into(), dump[..dump.len() - 17].to_vec(), &["truncated"]),
        ("cut in the end record".into(), dump[..dump.len() - 5].to_vec(), &["truncated"]),
        ("cut in a record".into(), dump[..dump.len() / 2].to_vec(), &["truncated"]),
        ("bytes after the end".into(), [&dump[..], b"x"].concat(), &["follow"]),
    ];
    // A flipped byte in a key, somewhere in the middle (a length byte may make the
    // record run past the end, or the next tag wrong), in the end record, the header.
    let anywhere: &[&str] = &["damaged", "truncated"];
    for (at, what) in [
        (header + 3, &["checksum"][..]),
        (dump.len() / 2, anywhere),
        (dump.len() - 3, &["checksum"]),
        (10, &["header"]),
    ] {
        let mut d = dump.clone();
        d[at] ^= 0x01;
        cases.push((format!("byte {at} flipped"), d, what));
    }
    for (i, (name, bytes, expect)) in cases.iter().enumerate() {
        let file = tmp.path().join(format!("case{i}.dump"));
        std::fs::write(&file, bytes).unwrap();
        let dst = tmp.path().join(format!("dst{i}"));
        let (code, _, err) = tsumiki([OsStr::new("load"), s(&dst), s(&file)]);
        assert_eq!(code, 1, "{name}: {err}");
        assert!(expect.iter().any(|e| err.contains(e)), "{name}: {err}");
        assert!(!dst.exists(), "{name}: the new database was left behind: {err}");
        // Through standard input, into an existing empty directory: it stays, empty.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        let (code, _, err) = tsumiki_with_input(&[OsStr::new("load"), s(dir.path())], bytes);
        assert_eq!(code, 1, "{name} (stdin): {err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![OsStr::new("notes.txt").to_os_string()], "{name}: {err}");
    }
    // The intact dump loads through standard input; --merge adds to a database.
    let dst = tmp.path().join("good");
    let (code, _, err) = tsumiki_with_input(&[OsStr::new("load"), s(&dst)], &dump);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = tsumiki([OsStr::new("put"), s(&dst), OsStr::new("extra"), OsStr::new("1")]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        tsumiki_with_input(&[OsStr::new("load"), OsStr::new("--merge"), s(&dst), OsStr::new("-")], &dump);
    assert_eq!(code, 0, "{err}");
    // Healthy, and every record there: in the pages, or (a close that kept its short log)
    // partly in the log, which `check` counts apart.
    let (code, report) = check(&dst);
    assert_eq!(code, 0, "{report}");
    let db = Db::open(&dst, Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 3001, "{report}");
    assert_eq!(db.view(|r| r.get(b"extra")).unwrap().as_deref(), Some(&b"1"[..]));
    db.close().unwrap();
    // A damaged dump merged into an existing database: the error says what stayed.
    let mut d = dump.clone();
    let last = d.len() - 30;
    d[last] ^= 1;
    let (code, _, err) = tsumiki_with_input(
        &[OsStr::new("load"), OsStr::new("--merge"), OsStr::new("--batch"), OsStr::new("1000"), s(&dst)],
        &d,
    );
    assert_eq!(code, 1, "{err}");
    // Records 1-2000 were committed in two batches; record 3000 failed the third.
    assert!(err.contains("2000 records before it were loaded"), "{err}");
}

/// `check` reports healthy databases (closed, and crashed with logs) as healthy, and finds
/// a flipped byte in each kind of file and a truncated file, naming it.
#[test]
fn check_finds_damage_in_every_kind_of_file() {
    let closed = tempfile::tempdir().unwrap();
    fill(closed.path(), 20_000);
    let (code, report) = check(closed.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["records"], 20_000);
    let (code, text, _) = tsumiki([OsStr::new("check"), s(closed.path())]);
    assert_eq!(code, 0);
    assert!(String::from_utf8(text).unwrap().ends_with("healthy\n"));

    // A crash leaves logs and a lane registry.
    let crashed = tempfile::tempdir().unwrap();
    let db = Db::create(crashed.path(), Options::default()).unwrap();
    for i in 0..200 {
        db.run(|t| t.put(key(i), value(i))).unwrap();
    }
    db.abandon_for_tests();
    let (code, report) = check(crashed.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["log_records"], 200, "{report}");

    let expect_damage = |base: &Path, name: &str, damage: &dyn Fn(&Path)| {
        let copy = copy_db(base);
        damage(&copy.path().join(name));
        let (code, report) = check(copy.path());
        assert_eq!(code, 1, "{name}: {report}");
        assert!(damaged_files(&report).iter().any(|f| f == name), "{name}: {report}");
        let (code, text, _) = tsumiki([OsStr::new("check"), s(copy.path())]);
        let text = String::from_utf8(text).unwrap();
        assert!(code == 1 && text.contains(name) && text.contains("DAMAGED"), "{text}");
    };
    let name = |p: &PathBuf| p.file_name().unwrap().to_str().unwrap().to_string();
    // MASTER: the superblock not in use, then the one in use.
    expect_damage(closed.path(), "MASTER", &|p| flip(p, 30));
    expect_damage(closed.path(), "MASTER", &|p| flip(p, 4096 + 30));
    expect_damage(closed.path(), "MASTER", &|p| flip(p, 2000));
    // A page segment: an image of a page, and the translation table (the last image the
    // close wrote, at the end of the last segment).
    let segs = files_starting(closed.path(), "pages-");
    expect_damage(closed.path(), &name(&segs[0]), &|p| flip(p, 5000));
    let last = segs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    expect_damage(closed.path(), &name(last), &|p| flip(p, len - 4096 + 7));
    {
        let copy = copy_db(closed.path());
        flip(&copy.path().join(name(last)), len - 4096 + 7);
        let (_, report) = check(copy.path());
        assert!(report.to_string().contains("the translation table"), "{report}");
    }
    // A log segment and the lane registry of the crashed database.
    let log = files_starting(crashed.path(), "wal-");
    expect_damage(crashed.path(), &name(&log[0]), &|p| flip(p, 100));
    let reg = files_starting(crashed.path(), "lanes-");
    assert_eq!(reg.len(), 1);
    expect_damage(crashed.path(), &name(&reg[0]), &|p| flip(p, 9));
    // Truncated files.
    expect_damage(closed.path(), "MASTER", &|p| truncate(p, 100));
    expect_damage(closed.path(), &name(&segs[0]), &|p| truncate(p, 4096 * 3 + 17));
    expect_damage(closed.path(), &name(last), &|p| truncate(p, len - 4096));
    expect_damage(crashed.path(), &name(&log[0]), &|p| truncate(p, 8192));
    expect_damage(crashed.path(), &name(&reg[0]), &|p| truncate(p, 10));
    // The check changed nothing.
    assert_eq!(check(closed.path()).0, 0);
    assert_eq!(check(crashed.path()).0, 0);

    // An open database is refused; so are a missing one and a directory without one.
    let db = Db::open(closed.path(), Options::default()).unwrap();
    let (code, _, err) = tsumiki([OsStr::new("check"), s(closed.path())]);
    assert_eq!(code, 2);
    assert!(err.contains("open"), "{err}");
    drop(db);
    let (code, _, err) = tsumiki([OsStr::new("check"), s(&closed.path().join("nothing"))]);
    assert!(code == 2 && err.contains("does not exist"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = tsumiki([OsStr::new("check"), s(empty.path())]);
    assert!(code == 2 && err.contains("no tsumiki database"), "{err}");
}

#[test]
fn get_put_delete_and_scan_for_scripts() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let arg = OsStr::new;
    // No database and no --create: refused, nothing created.
    let (code, _, err) = tsumiki([arg("put"), s(&db), arg("k"), arg("v")]);
    assert!(code == 2 && err.contains("--create"), "{err}");
    assert!(!db.exists());
    let (code, _, err) = tsumiki([arg("get"), s(&db), arg("k")]);
    assert!(code == 2 && err.contains("no tsumiki database"), "{err}");
    let (code, _, err) = tsumiki([arg("put"), arg("--create"), s(&db), arg("greeting"), arg("hello, world")]);
    assert_eq!(code, 0, "{err}");
    let (code, v, _) = tsumiki([arg("get"), s(&db), arg("greeting")]);
    assert_eq!((code, v), (0, b"hello, world\n".to_vec()));
    let (code, v, err) = tsumiki([arg("get"), s(&db), arg("nothing")]);
    assert!(code == 1 && v.is_empty() && err.contains("no such key"), "{err}");
    // A binary value from standard input; hexadecimal keys and values.
    let (code, _, err) = tsumiki_with_input(&[arg("put"), s(&db), arg("bin")], &[0, 255, 10, 9]);
    assert_eq!(code, 0, "{err}");
    let (code, v, _) = tsumiki([arg("get"), arg("--hex"), s(&db), arg("62696e")]);
    assert_eq!((code, v), (0, b"00ff0a09\n".to_vec()));
    let (code, _, _) = tsumiki([arg("put"), arg("--hex"), s(&db), arg("00 01"), arg("cafe")]);
    assert_eq!(code, 0);
    let (code, v, _) = tsumiki([arg("get"), arg("--hex"), s(&db), arg("0001")]);
    assert_eq!((code, v), (0, b"cafe\n".to_vec()));
    let (code, _, err) = tsumiki([arg("put"), arg("--hex"), s(&db), arg("xyz"), arg("00")]);
    assert!(code == 2 && err.contains("not hexadecimal"), "{err}");
    // Delete: 0 when it was there, 1 when not.
    assert_eq!(tsumiki([arg("delete"), s(&db), arg("greeting")]).0, 0);
    assert_eq!(tsumiki([arg("delete"), s(&db), arg("greeting")]).0, 1);
    assert_eq!(tsumiki([arg("get"), s(&db), arg("greeting")]).0, 1);
    assert_eq!(tsumiki([arg("delete"), arg("--hex"), s(&db), arg("0001")]).0, 0);
    assert_eq!(tsumiki([arg("delete"), s(&db), arg("bin")]).0, 0);

    // Scans over more records than one read transaction holds (16K).
    let n = 40_000u32;
    {
        let d = Db::open(&db, Options::default()).unwrap();
        d.run(|t| (0..n).try_for_each(|i| t.put(format!("k{i:06}"), format!("v{i}")))).unwrap();
        d.run(|t| t.put("user:1", "ada")).unwrap();
        d.run(|t| t.put("user:2", "grace")).unwrap();
        d.run(|t| t.put("users", "x")).unwrap();
        d.close().unwrap();
    }
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = vec![arg("scan"), s(&db)];
        all.extend(args.iter().map(|a| arg(a)));
        let (code, out, err) = tsumiki(all);
        assert_eq!(code, 0, "{err}");
        String::from_utf8(out).unwrap().lines().map(str::to_string).collect()
    };
    let all = lines(&[]);
    assert_eq!(all.len(), n as usize + 3);
    assert_eq!(all[0], "k000000\tv0");
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let rev = lines(&["--reverse"]);
    assert_eq!(rev, all.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(lines(&["--prefix", "user:"]), ["user:1\tada", "user:2\tgrace"]);
    assert_eq!(lines(&["--prefix", "user", "--keys-only", "--reverse"]), ["users", "user:2", "user:1"]);
    assert_eq!(lines(&["--from", "k000010", "--to", "k000013"]), ["k000010\tv10", "k000011\tv11", "k000012\tv12"]);
    assert_eq!(lines(&["--from", "k020000", "--limit", "2", "--keys-only"]), ["k020000", "k020001"]);
    assert_eq!(lines(&["--to", "k000002", "--reverse"]), ["k000001\tv1", "k000000\tv0"]);
    assert_eq!(lines(&["--reverse", "--limit", "1"]), ["users\tx"]);
    assert_eq!(lines(&["--hex", "--prefix", "7573657273"]), ["7573657273\t78"]);
    assert_eq!(lines(&["--from", "z"]), Vec::<String>::new());
    assert_eq!(lines(&["--from", "m", "--to", "a"]), Vec::<String>::new());
    let (code, _, err) = tsumiki([arg("scan"), s(&db), arg("--prefix"), arg("a"), arg("--from"), arg("b")]);
    assert!(code == 2 && err.contains("cannot be used with"), "{err}");
    // Every tool has help with examples.
    for tool in ["dump", "load", "check", "stats", "get", "put", "delete", "scan", "compact"] {
        let (code, out, _) = tsumiki([tool, "--help"]);
        let out = String::from_utf8(out).unwrap();
        assert!(code == 0 && out.contains("Examples:") && out.contains(&format!("tsumiki {tool}")), "{tool}: {out}");
    }
}

/// A database that shrank: `compact` rewrites it much smaller, with the same records
/// (its dumps before and after are the same bytes), healthy; it refuses an open database
/// and a directory holding other files, changing nothing.
#[test]
fn compact_shrinks_a_database_that_shrank() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    fill(&dir, 200_000);
    let db = Db::open(&dir, Options::default()).unwrap();
    db.run(|t| (0..190_000).try_for_each(|i| t.delete(key(i)).map(drop))).unwrap();
    db.close().unwrap();
    let (code, dump_before, err) = tsumiki([OsStr::new("dump"), OsStr::new("-q"), s(&dir)]);
    assert_eq!(code, 0, "{err}");
    // Refused while open, or with a file of the user's inside: nothing changes.
    let db = Db::open(&dir, Options::default()).unwrap();
    let (code, _, err) = tsumiki([OsStr::new("compact"), s(&dir)]);
    assert!(code == 2 && err.contains("already open"), "{err}");
    drop(db);
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    let (code, _, err) = tsumiki([OsStr::new("compact"), s(&dir)]);
    assert!(code == 2 && err.contains("notes.txt"), "{err}");
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    let (code, out, err) = tsumiki([OsStr::new("compact"), s(&dir)]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    eprintln!("{out}");
    let nums: Vec<u64> = out.split_whitespace().filter_map(|w| w.trim_start_matches('(').parse().ok()).collect();
    assert!(nums.len() == 3 && nums[1] * 4 < nums[0] && nums[2] == 10_000, "{out}");
    let (code, report) = check(&dir);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["records"], 10_000);
    let (code, dump_after, err) = tsumiki([OsStr::new("dump"), OsStr::new("-q"), s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(dump_before == dump_after);
    // Nothing is left beside it.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![OsStr::new("db").to_os_string()]);
}

/// What killed compacts left beside a database (their temporary directories: a copy, or
/// the old database after the exchange) is removed by the next compact, and only that: a
/// running compact's directory (its lock held) and other names stay.
#[test]
fn compact_removes_what_killed_compacts_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    fill(&dir, 30_000);
    // A compact killed while it copies.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsumiki"))
        .args([OsStr::new("compact"), OsStr::new("-q"), s(&dir)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while files_starting(tmp.path(), ".db.compact-").is_empty() && started.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Planted leftovers: an older version's copy (the database at the top) and this one's
    // (inside `db`), both dead; a running compact's (locked); names that are not a
    // compact's.
    let flat = tmp.path().join(".db.compact-Ab12cD");
    let nested = tmp.path().join(".db.compact-xy34Zw");
    for d in [&flat, &nested.join("db")] {
        let from = copy_db(&dir);
        std::fs::rename(from.path(), d).unwrap_or_else(|_| {
            std::fs::create_dir_all(d).unwrap();
            for e in std::fs::read_dir(from.path()).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
            }
        });
    }
    let live = tmp.path().join(".db.compact-LiVe01");
    std::fs::create_dir(&live).unwrap();
    std::fs::write(live.join("MASTER"), b"a running compact's").unwrap();
    let lock = std::fs::File::open(&live).unwrap();
    lock.try_lock().unwrap();
    let other = tmp.path().join(".db.compact-notes.txt");
    std::fs::write(&other, b"mine").unwrap();
    let elsewhere = tmp.path().join(".other.compact-Ab12cD");
    std::fs::create_dir(&elsewhere).unwrap();
    let (code, _, err) = tsumiki([OsStr::new("compact"), s(&dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("removed") && err.contains("interrupted"), "{err}");
    let mut left: Vec<String> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, [".db.compact-LiVe01", ".db.compact-notes.txt", ".other.compact-Ab12cD", "db"], "{err}");
    assert_eq!(std::fs::read(live.join("MASTER")).unwrap(), b"a running compact's");
    drop(lock);
    let (code, report) = check(&dir);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["records"], 30_000);
}

/// Every file of `dir` and its bytes, and the directory's and files' mtimes.
fn files_and_mtimes(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut v = vec![(".".to_string(), Vec::new(), std::fs::metadata(dir).unwrap().modified().unwrap())];
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap().modified().unwrap();
        v.push((e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap(), m));
    }
    v.sort();
    v
}

/// The reading tools (`get`, `scan`, `dump`, `check`, `stats`) on a read-only bind mount,
/// of a database a crash left with commits only in its logs: each works (the log replayed
/// in memory) and no file changes. Skipped where user namespaces are unavailable, unless
/// `TSUMIKI_RO_REQUIRED=1`.
#[test]
fn reading_tools_work_on_a_read_only_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let ns = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1""#,
            "sh",
        ])
        .arg(tmp.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ns {
        assert!(
            std::env::var("TSUMIKI_RO_REQUIRED").as_deref() != Ok("1"),
            "TSUMIKI_RO_REQUIRED=1: no user namespaces"
        );
        eprintln!("skipped: user namespaces (unshare --user --mount) are not available");
        return;
    }
    fill(&db, 3000);
    let d = Db::open(&db, Options::default()).unwrap();
    d.run(|t| t.put("after", "the crash")).unwrap();
    d.abandon_for_tests();
    let before = files_and_mtimes(&db);
    // One shell in the namespace runs every tool; each prints a marker and its exit code.
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 9
        touch "$1/probe" 2>/dev/null && { echo "probe: writable"; exit 8; }
        "$2" get "$1" after; echo "get=$?"
        "$2" scan --keys-only "$1" | wc -l; echo "scan=$?"
        "$2" dump "$1" | wc -c; echo "dump=$?"
        "$2" check "$1" >/dev/null; echo "check=$?"
        "$2" stats "$1" >/dev/null; echo "stats=$?""#;
    let o = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"])
        .arg(&db)
        .arg(env!("CARGO_BIN_EXE_tsumiki"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    for tool in ["get", "scan", "dump", "check", "stats"] {
        assert!(stdout.contains(&format!("{tool}=0")), "{tool} failed on a read-only mount:\n{stdout}\n{stderr}");
    }
    assert!(stdout.contains("the crash\n"), "get read the replayed log: {stdout}");
    assert!(stdout.contains("\n3001\n"), "scan listed every record: {stdout}");
    assert_eq!(files_and_mtimes(&db), before, "the reading tools changed the database");
    // The files still hold the crash: a read-write open replays it.
    let d = Db::open(&db, Options::default()).unwrap();
    assert!(d.recovery_stats().unwrap().replayed);
    assert_eq!(d.begin().get("after").unwrap(), Some(b"the crash".to_vec()));
    d.close().unwrap();
}
