//! Log segment files: each created at its full length before a lane writes into it (a
//! recycled segment renamed, or a new one zero-filled), in the background by one thread
//! per log, so that a rollover does not stall the commit that crosses it.

use crate::background::Background;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use super::format;
use crate::storage::{self, Storage, StorageFile};

static ZEROS: [u8; 1 << 16] = [0; 1 << 16];

/// Log segments that no durable state needs any more, kept to be renamed into a later
/// generation and overwritten in place: a lane then writes each block once, where a new
/// segment costs a zero-fill of its whole length first. Their old blocks fail the checksum
/// of the new generation (it salts every block's checksum), so they read as never written.
#[derive(Default)]
pub(crate) struct Recycled {
    /// `(file name, length)`. Held across each rename, so that [`super::Wal::retire`] never
    /// deletes a file that is being renamed.
    pub(crate) free: Mutex<Vec<(String, u64)>>,
    /// Segments created by a zero-fill, and reused instead.
    pub(crate) zeroed: AtomicU64,
    pub(crate) reused: AtomicU64,
}

/// Creates log segment `name`: a recycled segment of its length, or one preallocated
/// with zeros, under a temporary name; its header ([`format::segment_header`]) written
/// into its first block and made durable; then renamed into place (directory synced), so
/// that a commit's fdatasync never has to carry a size change, and a segment under its
/// own name always has its full length and its header: a shorter one, or one without its
/// header, is damage, never a creation cut by a crash.
pub(crate) fn prepare_segment(
    storage: &dyn Storage,
    recycled: &Recycled,
    name: &str,
    size: u64,
    prealloc: bool,
    sync: bool,
) -> io::Result<Box<dyn StorageFile>> {
    let (generation, lane, seg) = format::parse_segment_name(name)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{name} is not a log segment's name")))?;
    let header = format::segment_header(generation, lane, seg);
    if !prealloc {
        let f = storage::create_fresh(storage, name)?;
        f.write_at(&header, 0)?;
        return Ok(f);
    }
    let tmp = format!("{name}.tmp");
    let mut reused = None;
    {
        let mut free = recycled.free.lock();
        if let Some(i) = free.iter().position(|&(_, len)| len == size) {
            // `remove`, not `swap_remove`: the list stays oldest first for `retire`.
            let (old, _) = free.remove(i);
            match storage.rename(&old, &tmp) {
                Ok(()) => reused = Some(()),
                // Removed meanwhile (by hand, or an older-log removal): zero-fill one.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    let f = match reused {
        Some(()) => {
            recycled.reused.fetch_add(1, Ordering::Relaxed);
            storage.open(&tmp, false)?
        }
        None => {
            recycled.zeroed.fetch_add(1, Ordering::Relaxed);
            let f = storage::create_fresh(storage, &tmp)?;
            let mut off = 0;
            while off < size {
                let n = (size - off).min(ZEROS.len() as u64) as usize;
                f.write_at(&ZEROS[..n], off)?;
                off += n as u64;
            }
            f
        }
    };
    f.write_at(&header, 0)?;
    if sync {
        f.sync_data()?;
    }
    storage.rename(&tmp, name)?;
    if sync {
        storage.sync_dir()?;
    }
    Ok(f)
}

/// A segment being prepared: its file, once ready.
pub(crate) type Prepared = mpsc::Receiver<io::Result<Box<dyn StorageFile>>>;

/// Waits for a segment being prepared.
pub(crate) fn wait(p: Prepared) -> io::Result<Box<dyn StorageFile>> {
    p.recv().unwrap_or_else(|_| Err(io::Error::other("segment preparation ended without a result")))
}

struct Job {
    name: String,
    size: u64,
    sync: bool,
    reply: mpsc::SyncSender<io::Result<Box<dyn StorageFile>>>,
}

/// The thread that prepares a log's segments, one request at a time, started at the first
/// one. One thread per log, not per segment: a thread per segment (about 25 a second in
/// a synced fill) left each one's allocations that outlive it, such as the file handle
/// the lane keeps, in allocator pages that an ended thread abandons (780 threads and
/// 548 such pages at the peak of a 30 s `bench cache`).
pub(crate) struct Preparer {
    storage: Arc<dyn Storage>,
    recycled: Arc<Recycled>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<Background>>,
}

impl Preparer {
    pub(crate) fn new(storage: Arc<dyn Storage>, recycled: Arc<Recycled>) -> Preparer {
        Preparer { storage, recycled, jobs: Mutex::new(None), thread: Mutex::new(None) }
    }

    /// Starts preparing segment `name` of `size` bytes (synced and its directory synced
    /// if `sync`).
    pub(crate) fn start(&self, name: String, size: u64, sync: bool) -> Prepared {
        let (reply, ready) = mpsc::sync_channel(1);
        let mut jobs = self.jobs.lock();
        if jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let (storage, recycled) = (self.storage.clone(), self.recycled.clone());
            // Ends once the last sender (`jobs`) is dropped.
            let spawned = Background::spawn("tsumiki-segments", move |_| {
                for j in rx {
                    // The lane may have stopped waiting (a closed generation): nothing to do.
                    let _ = j.reply.send(prepare_segment(&*storage, &recycled, &j.name, j.size, true, j.sync));
                }
            });
            match spawned {
                Ok(h) => {
                    *self.thread.lock() = Some(h);
                    *jobs = Some(tx);
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return ready;
                }
            }
        }
        let job = Job { name, size, sync, reply };
        if let Err(mpsc::SendError(j)) = jobs.as_ref().expect("started above").send(job) {
            let _ = j.reply.send(Err(io::Error::other("the segment preparation thread ended")));
        }
        ready
    }
}

impl Drop for Preparer {
    /// Ends the thread after the requests made so far, so that nothing writes into the
    /// directory once the log is gone.
    fn drop(&mut self) {
        drop(self.jobs.lock().take());
        drop(self.thread.lock().take());
    }
}
