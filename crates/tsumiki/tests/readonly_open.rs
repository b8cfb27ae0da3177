//! Read-only opens (`Options::read_only`, `OpenOptions::read_only`) write nothing: they
//! open a database whose files and directory the process may not write (modes 0400 and
//! 0500, in a child process without root's override) and one on a read-only bind mount,
//! after a clean close and after a SIGKILL (the crashed tail replayed in memory only),
//! read every record, and leave every file byte for byte and every mtime as it was; a
//! read-write open afterwards still recovers the same records. Writes through a
//! read-only open are refused with `ReadOnly`; read-only opens share the directory's lock
//! (`LOCK_SH`), a writer's excludes them and theirs excludes a writer (`Locked`).
//!
//! The tests run as root in CI, and root ignores permission bits: the opener then runs in
//! a child process inside `unshare --user` (no root mapping, so no `CAP_DAC_OVERRIDE`
//! where the files are), or in `unshare --user --map-root-user --mount` for the read-only
//! bind mount. The child first checks that it really cannot write there. Without user
//! namespaces these tests print why and pass, unless `TSUMIKI_RO_REQUIRED=1` (CI).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use tsumiki::{Db, Error, ErrorKind, OpenOptions, Options, StoreOptions};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-").repeat(1 + (i % 13) as usize).into_bytes()
}

/// Small checkpoints, so that the crashed database has pages and logs after them.
fn options() -> Options {
    Options { store: StoreOptions { checkpoint_bytes: 64 << 10, ..StoreOptions::default() }, ..Options::default() }
}

fn read_only() -> Options {
    Options { read_only: true, ..options() }
}

/// Every file of `dir` (and the directory itself, as "."): its bytes and mtime.
type Snapshot = BTreeMap<String, (Vec<u8>, SystemTime)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut s = Snapshot::new();
    s.insert(".".into(), (Vec::new(), std::fs::metadata(dir).unwrap().modified().unwrap()));
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let m = e.metadata().unwrap();
        assert!(m.is_file(), "{name} is not a file");
        s.insert(name, (std::fs::read(e.path()).unwrap(), m.modified().unwrap()));
    }
    s
}

fn assert_unchanged(before: &Snapshot, after: &Snapshot, what: &str) {
    let names = |s: &Snapshot| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(before), names(after), "{what}: files created or removed");
    for (name, (bytes, mtime)) in before {
        let (b, m) = &after[name];
        assert!(bytes == b, "{what}: {name} changed ({} bytes before, {} after)", bytes.len(), b.len());
        assert_eq!(mtime, m, "{what}: {name}'s mtime changed");
    }
}

/// Reads every record through `db`: keys `0..acked` must hold their values; keys past
/// them (committed, not yet acknowledged when killed) may. Returns the records seen.
fn check_records(db: &Db, acked: u64) -> u64 {
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.view(|r| r.iter().collect::<Result<_, _>>()).unwrap();
    for (i, (k, v)) in got.iter().enumerate() {
        let i = i as u64;
        assert_eq!((k, v), (&key(i), &value(i)), "record {i} of {}", got.len());
    }
    assert!(got.len() as u64 >= acked, "{} records, {acked} acknowledged", got.len());
    let t = db.begin();
    for i in [0, acked / 2, acked.saturating_sub(1)] {
        if i < acked {
            assert_eq!(t.get(key(i)).unwrap(), Some(value(i)), "get {i}");
        }
    }
    got.len() as u64
}

/// The names of this process's threads that tsumiki started ("tsumiki-...").
fn tsumiki_threads() -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let comm = std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap_or_default();
        if comm.starts_with("tsumiki-") {
            out.push(comm.trim().to_string());
        }
    }
    out
}

/// The child that opens read-only where it cannot write. Does nothing unless started by
/// [`run_reader`].
#[test]
fn readonly_child() {
    let Ok(dir) = std::env::var("TSUMIKI_RO_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let acked: u64 = std::env::var("TSUMIKI_RO_ACKED").unwrap().parse().unwrap();
    // The setup must deny writes, or this test proves nothing.
    match std::fs::File::create_new(dir.join("probe")) {
        Ok(_) => panic!("SETUP: the child could create a file in {}", dir.display()),
        Err(e) => assert!(
            matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)),
            "SETUP: creating a file: {e}"
        ),
    }
    match std::fs::OpenOptions::new().write(true).open(dir.join("MASTER")) {
        Ok(_) => panic!("SETUP: the child could open MASTER for writing"),
        Err(e) => assert!(matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)), "SETUP: {e}"),
    }
    let db = Db::open(&dir, read_only()).unwrap_or_else(|e| panic!("read-only open: {e:?}"));
    assert_eq!(tsumiki_threads(), Vec::<String>::new(), "a read-only open starts no background thread");
    let seen = check_records(&db, acked);
    // A second read-only open beside it (the shared lock), through the bindings' path.
    let second = OpenOptions::new().read_only(true).open(&dir, options()).unwrap_or_else(|e| panic!("second: {e:?}"));
    assert_eq!(check_records(&second, acked), seen);
    // Writes are refused as read-only, not as I/O errors.
    assert_eq!(db.run(|t| t.put(b"new", b"x")).unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(second.run(|t| t.delete(key(0))).unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(db.checkpoint().unwrap_err().kind(), ErrorKind::ReadOnly);
    let recovered = db.recovery_stats().unwrap();
    assert_eq!(tsumiki_threads(), Vec::<String>::new(), "nor do reads");
    second.close().unwrap();
    db.close().unwrap();
    println!("RO-OK records={seen} replayed={}", recovered.replayed);
}

/// How the child is kept from writing.
#[derive(Clone, Copy, Debug)]
enum Denied {
    /// Files 0400, the directory 0500, the child without root's override.
    Permissions,
    /// A read-only bind mount of the directory.
    RoMount,
}

/// Whether user namespaces work here (with a mount namespace for `RoMount`); if not, the
/// test is skipped with a printed reason, unless `TSUMIKI_RO_REQUIRED=1`.
fn available(how: Denied) -> bool {
    let probe = tempfile::tempdir().unwrap();
    let ok = match how {
        Denied::Permissions if unsafe_geteuid() != 0 => true,
        Denied::Permissions => Command::new("unshare").args(["--user", "true"]).status().is_ok_and(|s| s.success()),
        Denied::RoMount => Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
            .arg(r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1""#)
            .args(["sh"])
            .arg(probe.path())
            .status()
            .is_ok_and(|s| s.success()),
    };
    if !ok {
        let why = format!("user namespaces (unshare --user) are not available for {how:?}");
        assert!(std::env::var("TSUMIKI_RO_REQUIRED").as_deref() != Ok("1"), "TSUMIKI_RO_REQUIRED=1 but {why}");
        eprintln!("skipped: {why}");
    }
    ok
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::geteuid()
    }
}

/// Runs [`readonly_child`] on `dir`, denied writes as `how`; returns its "RO-OK" line.
fn run_reader(dir: &Path, acked: u64, how: Denied) -> String {
    let exe = std::env::current_exe().unwrap();
    let args = ["readonly_child", "--exact", "--nocapture", "--test-threads=1"];
    let mut cmd = match how {
        Denied::Permissions if unsafe_geteuid() != 0 => Command::new(&exe),
        Denied::Permissions => {
            let mut c = Command::new("unshare");
            c.arg("--user").arg(&exe);
            c
        }
        Denied::RoMount => {
            let mut c = Command::new("unshare");
            c.args(["--user", "--map-root-user", "--mount", "sh", "-c"])
                .arg(r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#)
                .arg("sh")
                .arg(dir)
                .arg(&exe);
            c
        }
    };
    let mut perms = Vec::new();
    if matches!(how, Denied::Permissions) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            perms.push((p.clone(), std::fs::metadata(&p).unwrap().permissions()));
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        perms.push((dir.to_path_buf(), std::fs::metadata(dir).unwrap().permissions()));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    }
    let before = snapshot(dir);
    let out = cmd
        .args(args)
        .env("TSUMIKI_RO_CHILD", dir)
        .env("TSUMIKI_RO_ACKED", acked.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let after = snapshot(dir);
    for (p, m) in perms.into_iter().rev() {
        std::fs::set_permissions(p, m).unwrap();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "read-only child ({how:?}) failed: {}\n{stdout}\n{stderr}", out.status);
    // The harness prints the test's name before the child's line.
    let line = stdout.lines().find_map(|l| l.find("RO-OK").map(|at| &l[at..]));
    let line = line.unwrap_or_else(|| panic!("no result: {stdout}"));
    assert_unchanged(&before, &after, &format!("read-only open ({how:?})"));
    line.to_string()
}

/// A database of `n` records, closed cleanly.
fn clean_db(n: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), options()).unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        db.run(|t| chunk.iter().try_for_each(|&i| t.put(key(i), value(i)))).unwrap();
    }
    db.close().unwrap();
    dir
}

#[test]
fn clean_close_without_write_permission() {
    if !available(Denied::Permissions) {
        return;
    }
    let dir = clean_db(5000);
    let line = run_reader(dir.path(), 5000, Denied::Permissions);
    assert!(line.contains("records=5000 "), "{line}");
}

#[test]
fn clean_close_on_a_read_only_mount() {
    if !available(Denied::RoMount) {
        return;
    }
    let dir = clean_db(5000);
    let line = run_reader(dir.path(), 5000, Denied::RoMount);
    assert!(line.contains("records=5000 "), "{line}");
}

/// The writer killed by [`crashed_db`]: commits key after key, each synced before it is
/// acknowledged on standard output, a checkpoint at 1,000.
#[test]
fn readonly_writer_child() {
    let Ok(dir) = std::env::var("TSUMIKI_RO_WRITER") else { return };
    let db = Db::create(&dir, options()).unwrap();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        db.run(|t| t.put(key(i), value(i))).unwrap();
        if i == 1000 {
            db.checkpoint().unwrap();
        }
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
}

/// A database whose writer was SIGKILLed after at least 3,000 acknowledged commits;
/// returns it and the acknowledged count (keys `0..acked`).
fn crashed_db() -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["readonly_writer_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("TSUMIKI_RO_WRITER", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = 0;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start = std::time::Instant::now();
    while acked < 3000 {
        let line = lines.next().expect("the writer ended").unwrap();
        if let Some(i) = line.strip_prefix("ack ") {
            acked = i.parse::<u64>().unwrap() + 1;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the writer is too slow");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Acknowledgements printed before the kill and not read yet.
    for line in lines.map_while(Result::ok) {
        if let Some(i) = line.strip_prefix("ack ") {
            acked = i.parse::<u64>().unwrap() + 1;
        }
    }
    (dir, acked)
}

#[test]
fn after_a_crash_replays_in_memory_only() {
    let (perm, mount) = (available(Denied::Permissions), available(Denied::RoMount));
    if !perm && !mount {
        return;
    }
    let (dir, acked) = crashed_db();
    let before = snapshot(dir.path());
    let mut seen = Vec::new();
    for (how, on) in [(Denied::Permissions, perm), (Denied::RoMount, mount)] {
        if on {
            let line = run_reader(dir.path(), acked, how);
            assert!(line.contains("replayed=true"), "the crashed tail was replayed: {line}");
            seen.push(line);
        }
    }
    // Both saw the same state, and it is on disk only in the logs still.
    seen.dedup();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_unchanged(&before, &snapshot(dir.path()), "read-only opens after a crash");
    // A read-write open recovers the same records: the read-only ones damaged nothing.
    let db = Db::open(dir.path(), options()).unwrap();
    assert!(db.recovery_stats().unwrap().replayed);
    let n = check_records(&db, acked);
    assert!(seen[0].contains(&format!("records={n} ")), "{} vs {n} records", seen[0]);
    db.close().unwrap();
    let db = Db::open(dir.path(), read_only()).unwrap();
    assert_eq!(check_records(&db, acked), n);
}

/// In this process (root's override or not, nothing is written), the locks and refusals.
#[test]
fn readers_share_the_lock_writers_exclude() {
    let dir = clean_db(2000);
    let path = dir.path();
    let before = snapshot(path);
    // One read-only open and close, alone: not one byte written (it rewrote MASTER twice).
    Db::open(path, read_only()).unwrap().close().unwrap();
    assert_unchanged(&before, &snapshot(path), "a read-only open and close");
    let a = Db::open(path, read_only()).unwrap();
    let b = OpenOptions::new().read_only(true).open(path, options()).unwrap();
    assert_eq!(check_records(&a, 2000), 2000);
    assert_eq!(check_records(&b, 2000), 2000);
    // A writer is locked out while readers have it open.
    assert!(matches!(Db::open(path, options()), Err(Error::Locked(_))));
    assert!(matches!(OpenOptions::new().open(path, options()), Err(Error::Locked(_))));
    // Every write is refused as read-only.
    assert_eq!(a.run(|t| t.put(key(1), b"x")).unwrap_err().kind(), ErrorKind::ReadOnly);
    let mut t = b.begin();
    assert_eq!(t.delete(key(2)).unwrap_err().kind(), ErrorKind::ReadOnly);
    drop(t);
    assert_eq!(a.checkpoint().unwrap_err().kind(), ErrorKind::ReadOnly);
    // A backup reads the source and writes only the copy.
    let copy = tempfile::tempdir().unwrap();
    assert_eq!(a.backup_to(copy.path().join("b")).unwrap(), 2000);
    a.close().unwrap();
    drop(b);
    assert_unchanged(&before, &snapshot(path), "read-only opens, writes refused, a backup");
    // A writer's lock excludes readers.
    let w = Db::open(path, options()).unwrap();
    assert!(matches!(Db::open(path, read_only()), Err(Error::Locked(_))));
    assert!(matches!(OpenOptions::new().read_only(true).open(path, options()), Err(Error::Locked(_))));
    w.run(|t| t.put(b"zz", b"1")).unwrap();
    w.close().unwrap();
    let c = Db::open(copy.path().join("b"), read_only()).unwrap();
    assert_eq!(check_records(&c, 2000), 2000);
}

/// A read-only open of what is not a database creates nothing.
#[test]
fn read_only_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    assert_eq!(Db::create(&missing, read_only()).err().unwrap().kind(), ErrorKind::NotFound);
    assert_eq!(OpenOptions::new().read_only(true).open(&missing, options()).err().unwrap().kind(), ErrorKind::NotFound);
    assert!(!missing.exists());
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(Db::open(&empty, read_only()).err().unwrap().kind(), ErrorKind::NotFound);
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}
