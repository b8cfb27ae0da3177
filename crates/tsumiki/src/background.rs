//! The owner of the engine's background threads (the checkpointer, Silo's epoch ticker, the
//! log's segment preparer): each is started here under its name and joined by its owner's
//! `stop` or drop, so that no thread outlives the database that started it and none is
//! left running after close.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// The CPU time the calling thread has used so far (zero where the clock is missing): a
/// checkpoint's cost is counted on the threads that do it, whatever else the process runs.
#[allow(unsafe_code)] // clock_gettime
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration; the clock id is
    // a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// A background thread and its stop request. Dropping it stops and joins it.
#[derive(Debug)]
pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// What a background thread polls to learn that its owner is stopping it.
#[derive(Debug, Clone)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Whether the owner asked the thread to end.
    pub(crate) fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Background {
    /// Starts a thread named `name` running `body`, which returns once its [`StopFlag`]
    /// says so (or once it has nothing left to do).
    pub(crate) fn spawn(name: &str, body: impl FnOnce(StopFlag) + Send + 'static) -> io::Result<Background> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = StopFlag(stop.clone());
        let handle = std::thread::Builder::new().name(name.into()).spawn(move || body(flag))?;
        Ok(Background { stop, handle: Some(handle) })
    }

    /// Starts a thread named `name` that calls `tick` every `interval` (sooner when its
    /// [`thread`](Self::thread) is unparked) until stopped, or until `tick` returns false.
    pub(crate) fn every(
        name: &str,
        interval: Duration,
        mut tick: impl FnMut() -> bool + Send + 'static,
    ) -> io::Result<Background> {
        Self::spawn(name, move |stop| {
            while !stop.stopped() {
                std::thread::park_timeout(interval);
                if stop.stopped() || !tick() {
                    return;
                }
            }
        })
    }

    /// The thread, to unpark it.
    pub(crate) fn thread(&self) -> Option<&Thread> {
        self.handle.as_ref().map(JoinHandle::thread)
    }

    /// Asks the thread to end, wakes it and waits for it. A second call does nothing.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            // A panic in the thread was already reported by its panic hook; the owner is
            // shutting down and has nothing to add.
            let _ = h.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_periodic_thread_ticks_until_stopped_and_is_joined() {
        let ticks = Arc::new(AtomicU64::new(0));
        let t = ticks.clone();
        let mut b = Background::every("tsumiki-test", Duration::from_millis(1), move || {
            t.fetch_add(1, Ordering::Relaxed);
            true
        })
        .unwrap();
        while ticks.load(Ordering::Relaxed) < 3 {
            b.thread().unwrap().unpark();
            std::thread::yield_now();
        }
        b.stop();
        let after = ticks.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(ticks.load(Ordering::Relaxed), after, "no tick after stop returned");
        assert!(b.thread().is_none());
        b.stop();
    }

    #[test]
    fn a_tick_that_returns_false_ends_the_thread_and_drop_still_joins() {
        let b = Background::every("tsumiki-test", Duration::from_millis(1), || false).unwrap();
        drop(b);
    }
}
