//! The thread that takes checkpoints in the background, started on first need.
//!
//! A short-lived handle (open, one put, close) never needs it: its log is small and its
//! close writes or keeps it. Starting the thread at open and joining it at close was about
//! a tenth of such a cycle (a spawn, two wake-ups and an exit on a 2-core VM). So the thread
//! starts when a commit finds a checkpoint due, when eviction is blocked by dirty ranges,
//! at an explicit checkpoint, or at the first logged commit once the database has been
//! open for one poll interval (from then on it also takes checkpoints by time). A database
//! whose only commits came in its first poll interval takes its time-based checkpoint at
//! its next commit or its close instead; nothing is less durable for that (the log is
//! synced as before), only its log waits longer to become pages.

use std::io;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::background::Background;
use crate::cc::Protocol;

use super::Engine;

/// How often the thread checks whether a checkpoint is due, and how long a database is
/// open before a commit starts the thread.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Starts the thread (set by [`Checkpointer::arm`]).
type Starter = Box<dyn Fn() -> io::Result<Background> + Send + Sync>;

/// The checkpoint thread of one database, not started until needed.
pub(crate) struct Checkpointer {
    /// Set once the engine is shared, for databases that take checkpoints (durable and
    /// writable); unset, the thread never starts.
    starter: OnceLock<Starter>,
    /// The running thread; `stopped` once the database closes (no start after that).
    state: Mutex<State>,
    /// The thread's handle once started: commits unpark it without the lock.
    thread: OnceLock<Thread>,
    /// When the database opened (see [`POLL`]).
    opened: Instant,
}

#[derive(Default)]
struct State {
    running: Option<Background>,
    stopped: bool,
}

impl Checkpointer {
    pub(crate) fn new() -> Self {
        Checkpointer {
            starter: OnceLock::new(),
            state: Mutex::default(),
            thread: OnceLock::new(),
            opened: Instant::now(),
        }
    }

    /// Lets the thread start for `eng` (a durable, writable database): the thread holds it
    /// weakly, and ends when its database is gone or stopped.
    pub(crate) fn arm<P: Protocol>(eng: &Arc<Engine<P>>) {
        let weak = Arc::downgrade(eng);
        let starter: Starter = Box::new(move || {
            let weak = weak.clone();
            Background::every("tsumiki-checkpoint", POLL, move || {
                let Some(eng) = weak.upgrade() else { return false };
                if eng.checkpoint_due() || eng.checkpoint_due_by_time() {
                    // A failure poisons the log; commits report it.
                    let _ = eng.checkpoint_now();
                } else {
                    eng.release_idle_segments();
                }
                true
            })
        });
        let _ = eng.checkpointer.starter.set(starter);
    }

    /// Wakes the thread, starting it if needed. An error: it could not be spawned (the
    /// caller poisons the log, as no checkpoint would come and commits would wait for one
    /// forever).
    pub(crate) fn wake(&self) -> io::Result<()> {
        if self.thread.get().is_none() {
            self.start()?;
        }
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        Ok(())
    }

    /// After a logged commit that made no checkpoint due: starts the thread once the
    /// database has been open for [`POLL`] (it then takes checkpoints by time too).
    #[inline]
    pub(crate) fn after_commit(&self) {
        if self.thread.get().is_none() && self.starter.get().is_some() && self.opened.elapsed() >= POLL {
            // A failed spawn is tried again when a checkpoint comes due (see `wake`).
            let _ = self.start();
        }
    }

    /// Starts the thread unless it runs, was stopped (closing) or is not armed.
    fn start(&self) -> io::Result<()> {
        let Some(starter) = self.starter.get() else { return Ok(()) };
        let mut st = self.state.lock();
        if st.running.is_some() || st.stopped {
            return Ok(());
        }
        let bg = starter()?;
        if let Some(t) = bg.thread() {
            let _ = self.thread.set(t.clone());
        }
        st.running = Some(bg);
        Ok(())
    }

    /// Stops the thread (waiting for a checkpoint it runs) and keeps it from starting
    /// again: the database is closing.
    pub(crate) fn stop(&self) {
        // Joined outside the lock: the thread may wake itself (eviction under a checkpoint)
        // and finds its handle set, so it never takes the lock, but nothing else should
        // wait on a join either.
        let running = {
            let mut st = self.state.lock();
            st.stopped = true;
            st.running.take()
        };
        if let Some(mut bg) = running {
            bg.stop();
        }
    }

    /// Whether the thread has started (its handle is set once, when it does).
    #[cfg(feature = "test-plants")]
    pub(crate) fn started(&self) -> bool {
        self.thread.get().is_some()
    }
}
