//! Temporary databases that do not outlive an interrupted benchmark.
//!
//! Every temporary directory a benchmark creates is a [`TempDir`] (a `tempfile` directory
//! registered here while it lives), and every child process is waited for by [`wait_child`]. On SIGINT or
//! SIGTERM the handler installed by [`install_handler`] sends SIGTERM to the registered
//! children, removes the registered directories and exits with status 130, so a Ctrl-C
//! leaves no database behind in the temp directory.
//!
//! While it removes them, the benchmark's own threads may fail (their files vanish): such a
//! thread must not end the process first, with another status and the removal unfinished.
//! So once interrupted, a panicking thread waits instead of unwinding, and the benchmark's
//! return waits ([`hold_if_interrupted`]) until the handler exits.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// What an interrupted run must clean up.
#[derive(Default)]
struct Live {
    dirs: Vec<PathBuf>,
    children: Vec<u32>,
}

static LIVE: Mutex<Live> = Mutex::new(Live { dirs: Vec::new(), children: Vec::new() });

/// Set when the handler starts.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn live() -> std::sync::MutexGuard<'static, Live> {
    // The registry holds plain paths and ids: a panic elsewhere leaves it usable.
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Installs the SIGINT/SIGTERM handler (once per process), and a panic hook that keeps a
/// thread failing during the cleanup from ending the process first.
pub fn install_handler() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            hold_if_interrupted();
            default(info)
        }));
        result = ctrlc::set_handler(on_signal).map_err(|e| format!("installing the Ctrl-C handler: {e}"));
    });
    result
}

/// Once interrupted, never returns: the handler ends the process when it has cleaned up.
pub fn hold_if_interrupted() {
    while INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn on_signal() {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let dirs = {
        let mut l = live();
        // Under the registry's lock: `wait_child` unregisters a child under it before it
        // reaps the child, so every id here is a live child or an unreaped zombie.
        for pid in std::mem::take(&mut l.children) {
            // SAFETY: a plain system call on a process id this process spawned and has not
            // reaped (so the id cannot have been reused by another process).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        std::mem::take(&mut l.dirs)
    };
    // Threads of the benchmark (or a child) may still be writing inside a directory while it
    // is removed: retry until it stays gone, for a few seconds at most.
    let deadline = Instant::now() + Duration::from_secs(5);
    for d in dirs.iter().rev() {
        while d.exists() {
            let _ = std::fs::remove_dir_all(d);
            if Instant::now() > deadline {
                break;
            }
            if d.exists() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).collect();
    if left.is_empty() {
        // Not eprintln!: it panics on a closed stderr, and this thread must reach the exit.
        let _ = writeln!(std::io::stderr(), "\ntsumiki: interrupted; removed {} temporary director(ies)", dirs.len());
    } else {
        let _ = writeln!(std::io::stderr(), "\ntsumiki: interrupted; could not remove {left:?}");
    }
    std::process::exit(130);
}

/// A temporary directory (created with `tempfile`), removed when dropped or on Ctrl-C.
pub struct TempDir {
    inner: Option<tempfile::TempDir>,
}

impl TempDir {
    /// A fresh directory `PREFIX...` under `base` (the system temp dir when `None`), 0700.
    pub fn new(prefix: &str, base: Option<&Path>) -> Result<Self, String> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&base)
            .map_err(|e| format!("creating a temporary directory under {}: {e}", base.display()))?;
        live().dirs.push(dir.path().to_path_buf());
        Ok(TempDir { inner: Some(dir) })
    }

    pub fn path(&self) -> &Path {
        self.inner.as_ref().expect("present until dropped").path()
    }

    /// Removes the directory, reporting a failure.
    pub fn close(mut self) -> Result<(), String> {
        let dir = self.inner.take().expect("present until dropped");
        let path = dir.path().to_path_buf();
        unregister_dir(&path);
        dir.close().map_err(|e| format!("removing {}: {e}", path.display()))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(dir) = self.inner.take() {
            unregister_dir(dir.path());
        }
    }
}

fn unregister_dir(path: &Path) {
    live().dirs.retain(|d| d != path);
}

/// Waits for `child`, which is sent SIGTERM on Ctrl-C meanwhile, and returns its output
/// (its stdout, when piped; stderr is left to the caller's setup).
///
/// The child is unregistered only once it has exited and before it is reaped, under the
/// registry's lock: the handler, which signals under that lock, can never send SIGTERM to
/// an id that a reaped child left for another process to reuse.
pub fn wait_child(mut child: Child) -> std::io::Result<Output> {
    let pid = child.id();
    live().children.push(pid);
    let mut stdout = Vec::new();
    let read = child.stdout.take().map_or(Ok(0), |mut s| s.read_to_end(&mut stdout));
    let exited = wait_exit_unreaped(pid);
    live().children.retain(|p| *p != pid);
    let status = child.wait()?;
    read?;
    exited?;
    Ok(Output { status, stdout, stderr: Vec::new() })
}

/// Blocks until child `pid` has exited, leaving it a zombie (not reaped).
fn wait_exit_unreaped(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: `siginfo_t` is plain data that `waitid` fills in; all zeroes is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable `siginfo_t`; WNOWAIT leaves the child unreaped.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_registered_while_they_live() {
        let base = tempfile::tempdir().unwrap();
        let a = TempDir::new("a-", Some(base.path())).unwrap();
        let b = TempDir::new("b-", Some(base.path())).unwrap();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        assert!(live().dirs.contains(&pa) && live().dirs.contains(&pb));
        a.close().unwrap();
        assert!(!pa.exists() && !live().dirs.contains(&pa));
        drop(b);
        assert!(!pb.exists() && !live().dirs.contains(&pb));
    }

    #[test]
    fn children_are_registered_until_they_exit() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _; echo out; exit 3"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut stdin = child.stdin.take().unwrap();
        let waiter = std::thread::spawn(move || wait_child(child).unwrap());
        // Still running (it waits for a line): registered.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !live().children.contains(&pid) {
            assert!(Instant::now() < deadline, "the child was never registered");
            std::thread::sleep(Duration::from_millis(5));
        }
        writeln!(stdin, "go").unwrap();
        drop(stdin);
        let out = waiter.join().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert!(!live().children.contains(&pid), "an exited child stays registered");
    }
}
