//! The storage layer the log writes through: real files in a directory ([`DirStorage`]),
//! an in-memory disk that can lose power ([`SimStorage`]), and an NVM emulation that only
//! charges a latency per write ([`NvmStorage`]).
//!
//! Calls here are per I/O (a flush, a sync), never per key: a trait object costs nothing
//! next to the system call.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A directory of files the database owns.
pub trait Storage: Send + Sync {
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens `name` (never through a symbolic link). With `create`, makes a new file (mode
    /// 0600) and fails with [`io::ErrorKind::AlreadyExists`] if the name is taken: a file is
    /// never created through a name someone planted ([`create_fresh`] removes it first).
    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes creations, renames and removals durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Takes the directory's exclusive lock, held while the returned guard lives; a second
    /// holder (another process, or another open in this one) gets an error.
    fn lock(&self) -> io::Result<Box<dyn Send + Sync>>;
}

/// One file of a [`Storage`].
pub trait StorageFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `off`; fewer only at the end of the file.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// The file's length.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// Creates `name` anew: a leftover of that name (a temporary file of an interrupted write,
/// a preallocated segment never used, or a planted link) is removed first, so the new file
/// is ours and nothing outside the directory is written.
pub fn create_fresh(storage: &dyn Storage, name: &str) -> io::Result<Box<dyn StorageFile>> {
    match storage.open(name, true) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            storage.remove(name)?;
            storage.open(name, true)
        }
        r => r,
    }
}

/// Reads the whole file.
pub fn read_all(f: &dyn StorageFile) -> io::Result<Vec<u8>> {
    let len = f.len()?;
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large"))?;
    let mut buf = vec![0; len];
    let mut at = 0;
    while at < len {
        let n = f.read_at(&mut buf[at..], at as u64)?;
        if n == 0 {
            buf.truncate(at);
            break;
        }
        at += n;
    }
    Ok(buf)
}

/// Real files in one directory.
pub struct DirStorage {
    dir: std::path::PathBuf,
}

impl DirStorage {
    /// The directory `dir`, created (mode 0700) if missing.
    pub fn new(dir: impl Into<std::path::PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&dir)?;
        Ok(DirStorage { dir })
    }
}

struct RealFile(std::fs::File);

impl StorageFile for RealFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, off)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for DirStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            if let Ok(name) = e.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true).create_new(create);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        let f = o.open(self.dir.join(name)).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(e.kind(), format!("{name} is a symbolic link, which the database never follows"))
            } else {
                e
            }
        })?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{name} is not a regular file")));
        }
        Ok(Box::new(RealFile(f)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        std::fs::File::open(&self.dir)?.sync_all()
    }

    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        // The lock is on the directory itself, not on a file in it: a file can be deleted
        // and created again, letting a second process lock the new one.
        let f = std::fs::File::open(&self.dir)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(f)),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("database {} is already open (another process or handle holds its lock)", self.dir.display()),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// An NVM emulation: every write costs a fixed latency (spun, as a store to persistent
/// memory would stall the CPU), syncs cost nothing, and the bytes are dropped: only for
/// measuring the logging path without a disk (paper 001), never for recovery.
pub struct NvmStorage {
    latency: Duration,
    lens: Mutex<HashMap<String, Arc<Mutex<u64>>>>,
}

impl NvmStorage {
    /// An emulated device charging `latency` per write.
    pub fn new(latency: Duration) -> Self {
        NvmStorage { latency, lens: Mutex::new(HashMap::new()) }
    }
}

struct NvmFile {
    latency: Duration,
    len: Arc<Mutex<u64>>,
}

impl StorageFile for NvmFile {
    fn read_at(&self, _buf: &mut [u8], _off: u64) -> io::Result<usize> {
        Ok(0)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let start = Instant::now();
        {
            let mut l = self.len.lock();
            *l = (*l).max(off + buf.len() as u64);
        }
        while start.elapsed() < self.latency {
            std::hint::spin_loop();
        }
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(*self.len.lock())
    }
}

impl Storage for NvmStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(Vec::new())
    }
    fn open(&self, name: &str, _create: bool) -> io::Result<Box<dyn StorageFile>> {
        let len = self.lens.lock().entry(name.to_string()).or_default().clone();
        Ok(Box::new(NvmFile { latency: self.latency, len }))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.lens.lock().remove(name);
        Ok(())
    }
    fn rename(&self, _from: &str, _to: &str) -> io::Result<()> {
        Ok(())
    }
    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        Ok(Box::new(()))
    }
}

/// The sector size the simulated disk tears writes at.
pub const SIM_SECTOR: usize = 512;

/// A small deterministic generator (splitmix64), so that a crash is reproducible by seed
/// without a dependency in the library.
#[derive(Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[derive(Default)]
struct SimFile {
    /// What survives a power loss.
    durable: Vec<u8>,
    /// What reads see: `durable` plus the writes since the last sync.
    live: Vec<u8>,
    /// Writes since the last sync, in order.
    pending: Vec<(u64, Vec<u8>)>,
}

#[derive(Default)]
struct SimState {
    files: Vec<SimFile>,
    /// Names as the running program sees them.
    live_names: HashMap<String, usize>,
    /// Names as of the last directory sync.
    durable_names: HashMap<String, usize>,
    /// Storage operations so far.
    ops: u64,
    /// Crash (freeze the disk, fail every later call) at this operation.
    crash_at: Option<u64>,
    /// Fail the n-th sync with an I/O error, and every later one.
    fail_sync_at: Option<u64>,
    syncs: u64,
    crashed: bool,
    locked: bool,
    /// Bytes the disk holds (live files); a write past it fails with `StorageFull`.
    capacity: Option<u64>,
    /// The disk image taken at the crash.
    image: Option<SimImage>,
}

/// What a simulated disk holds after a power loss: a durable image.
#[derive(Clone, Default)]
pub struct SimImage {
    files: HashMap<String, Vec<u8>>,
}

impl SimImage {
    /// The file names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.files.keys().cloned().collect();
        v.sort();
        v
    }

    /// A file's bytes, to inspect or damage.
    pub fn file_mut(&mut self, name: &str) -> Option<&mut Vec<u8>> {
        self.files.get_mut(name)
    }

    /// Adds or replaces a file.
    pub fn insert(&mut self, name: &str, data: Vec<u8>) {
        self.files.insert(name.to_string(), data);
    }

    /// Removes a file.
    pub fn remove(&mut self, name: &str) {
        self.files.remove(name);
    }
}

/// An in-memory disk that loses power on command. Unsynced writes of each file are
/// independently kept, dropped or torn at sector granularity; unsynced renames, creations
/// and removals are all kept or all lost. Everything is decided by the seed.
#[derive(Clone)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
    seed: u64,
}

fn crashed() -> io::Error {
    io::Error::other("simulated power loss: the disk is gone")
}

impl SimStorage {
    /// An empty disk.
    pub fn new(seed: u64) -> Self {
        SimStorage { state: Arc::new(Mutex::new(SimState::default())), seed }
    }

    /// A disk holding `image` (what survived an earlier crash).
    pub fn from_image(image: &SimImage, seed: u64) -> Self {
        let mut st = SimState::default();
        for (name, data) in &image.files {
            let id = st.files.len();
            st.files.push(SimFile { durable: data.clone(), live: data.clone(), pending: Vec::new() });
            st.live_names.insert(name.clone(), id);
            st.durable_names.insert(name.clone(), id);
        }
        SimStorage { state: Arc::new(Mutex::new(st)), seed }
    }

    /// Loses power after `ops` more storage operations.
    pub fn crash_after(&self, ops: u64) {
        let mut st = self.state.lock();
        st.crash_at = Some(st.ops + ops);
    }

    /// Makes the disk hold at most `bytes` (over the files it can reach): a write that
    /// would grow past it fails with [`io::ErrorKind::StorageFull`]; `None` lifts the limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

    /// Bytes in the files the disk can reach.
    pub fn used(&self) -> u64 {
        let st = self.state.lock();
        Self::used_in(&st)
    }

    fn used_in(st: &SimState) -> u64 {
        st.live_names.values().map(|&id| st.files[id].live.len() as u64).sum()
    }

    /// Fails the `n`-th sync from now (0: the next) and every one after it.
    pub fn fail_sync_after(&self, n: u64) {
        let mut st = self.state.lock();
        st.fail_sync_at = Some(st.syncs + n);
    }

    /// Loses power now (if it has not already) and returns what survived.
    pub fn crash(&self) -> SimImage {
        let mut st = self.state.lock();
        if !st.crashed {
            Self::power_loss(&mut st, self.seed);
        }
        st.image.clone().unwrap_or_default()
    }

    /// Storage operations so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    fn power_loss(st: &mut SimState, seed: u64) {
        let mut rng = SimRng::new(seed ^ 0xC0FF_EE00);
        st.crashed = true;
        let names = if rng.below(2) == 0 { st.live_names.clone() } else { st.durable_names.clone() };
        let mut image = SimImage::default();
        for (name, id) in names {
            let f = &st.files[id];
            let mut data = f.durable.clone();
            for (off, bytes) in &f.pending {
                match rng.below(3) {
                    0 => {} // dropped
                    1 => write_into(&mut data, *off, bytes),
                    _ => {
                        // Torn: each sector independently reaches the disk or not.
                        for (i, chunk) in bytes.chunks(SIM_SECTOR).enumerate() {
                            if rng.below(2) == 0 {
                                write_into(&mut data, *off + (i * SIM_SECTOR) as u64, chunk);
                            }
                        }
                    }
                }
            }
            image.files.insert(name, data);
        }
        st.image = Some(image);
    }

    fn step(&self) -> io::Result<parking_lot::MutexGuard<'_, SimState>> {
        let mut st = self.state.lock();
        if st.crashed {
            return Err(crashed());
        }
        st.ops += 1;
        if st.crash_at.is_some_and(|c| st.ops > c) {
            Self::power_loss(&mut st, self.seed);
            return Err(crashed());
        }
        Ok(st)
    }
}

fn write_into(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    if data.len() < off + bytes.len() {
        data.resize(off + bytes.len(), 0);
    }
    data[off..off + bytes.len()].copy_from_slice(bytes);
}

struct SimHandle {
    disk: SimStorage,
    id: usize,
}

impl StorageFile for SimHandle {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let st = self.disk.step()?;
        let live = &st.files[self.id].live;
        let off = (off as usize).min(live.len());
        let n = buf.len().min(live.len() - off);
        buf[..n].copy_from_slice(&live[off..off + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut st = self.disk.step()?;
        if let Some(cap) = st.capacity {
            let grow = (off + buf.len() as u64).saturating_sub(st.files[self.id].live.len() as u64);
            if SimStorage::used_in(&st) + grow > cap {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk full (ENOSPC)"));
            }
        }
        let f = &mut st.files[self.id];
        write_into(&mut f.live, off, buf);
        f.pending.push((off, buf.to_vec()));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.disk.step()?;
        st.syncs += 1;
        if st.fail_sync_at.is_some_and(|n| st.syncs > n) {
            return Err(io::Error::other("simulated fsync failure"));
        }
        let f = &mut st.files[self.id];
        f.durable.clone_from(&f.live);
        f.pending.clear();
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.disk.step()?;
        Ok(st.files[self.id].live.len() as u64)
    }
}

impl Storage for SimStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.step()?.live_names.keys().cloned().collect())
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut st = self.step()?;
        let id = match st.live_names.get(name) {
            Some(_) if create => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{name}: already exists")));
            }
            Some(&id) => id,
            None if create => {
                let id = st.files.len();
                st.files.push(SimFile::default());
                st.live_names.insert(name.to_string(), id);
                id
            }
            None => return Err(io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))),
        };
        drop(st);
        Ok(Box::new(SimHandle { disk: self.clone(), id }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut st = self.step()?;
        st.live_names.remove(name).map(|_| ()).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_string()))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.step()?;
        let id = st.live_names.remove(from).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, from.to_string()))?;
        st.live_names.insert(to.to_string(), id);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut st = self.step()?;
        st.durable_names = st.live_names.clone();
        Ok(())
    }

    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        let mut st = self.state.lock();
        if st.locked {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "the simulated database is already open"));
        }
        st.locked = true;
        Ok(Box::new(SimLock(self.state.clone())))
    }
}

struct SimLock(Arc<Mutex<SimState>>);

impl Drop for SimLock {
    fn drop(&mut self) {
        self.0.lock().locked = false;
    }
}
