//! The storage floor under the log and the page store: real files in a directory
//! ([`DirStorage`]: files 0600, O_NOFOLLOW, new files O_EXCL, flock on the directory),
//! the same directory read without writing ([`ReadOnlyDir`]: read-only opens, `check`,
//! `inspect`), an in-memory disk that can lose power ([`SimStorage`]), and an NVM emulation that only
//! charges a latency per write ([`NvmStorage`]).
//!
//! Calls here are per I/O (a flush, a sync), never per key: a trait object costs nothing
//! next to the system call.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;

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
    /// Takes the directory's lock shared, for an open that writes nothing: readers share
    /// it with each other, and exclude [`lock`](Self::lock)'s holder as it excludes
    /// them ([`io::ErrorKind::WouldBlock`]). A storage without shared locks takes the
    /// exclusive one.
    fn lock_shared(&self) -> io::Result<Box<dyn Send + Sync>> {
        self.lock()
    }
    /// While `on`, [`list`](Self::list) may answer from the last listing, kept up to date
    /// by this storage's own creations, renames and removals: for an open, which lists
    /// the directory a dozen times under the exclusive lock (no one else changes it).
    /// Does nothing by default.
    fn cache_listing(&self, _on: bool) {}
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
    /// Asks that later writes bypass the OS page cache (`O_DIRECT`); returns whether they
    /// will. Only worth it for a file whose every write is followed by a sync, and only
    /// for whole 4 KiB blocks at 4 KiB offsets. A file system without direct I/O (tmpfs)
    /// and the emulated storages keep writing as before.
    fn set_direct(&self) -> bool {
        false
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

/// Writes `name` whole: `bytes` under `name.tmp`, synced, renamed, directory synced (a
/// crash leaves the old file or the new one).
pub fn write_whole(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<(), Error> {
    let tmp = format!("{name}.tmp");
    let f = create_fresh(storage, &tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_at(bytes, 0).map_err(|e| Error::io(&tmp, e))?;
    f.sync_data().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    storage.rename(&tmp, name).map_err(|e| Error::io(name, e))?;
    storage.sync_dir().map_err(|e| Error::io("syncing the database directory", e))
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
    /// The last listing, while [`Storage::cache_listing`] is on.
    listing: Mutex<Listing>,
}

#[derive(Default)]
struct Listing {
    on: bool,
    names: Option<Vec<String>>,
    /// Counts the changes: a listing taken while one happened is not kept.
    changes: u64,
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
        Ok(DirStorage { dir, listing: Mutex::default() })
    }
}

/// Sets or clears `O_DIRECT` on an open file; returns whether that took (a file system
/// without direct I/O, such as tmpfs, refuses it). Writes through the file must then be
/// aligned (see [`StorageFile::set_direct`]).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // fcntl
pub fn set_direct_io(file: &std::fs::File, on: bool) -> bool {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    let want = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, want) == 0 }
}

/// Direct I/O is not used off Linux.
#[cfg(not(target_os = "linux"))]
pub fn set_direct_io(_file: &std::fs::File, _on: bool) -> bool {
    false
}

/// The alignment direct I/O asks of buffers, offsets and lengths (at most a page on the
/// devices Linux supports).
const DIRECT_ALIGN: usize = 4096;

struct RealFile {
    file: std::fs::File,
    /// Opened for direct I/O ([`StorageFile::set_direct`]).
    direct: AtomicBool,
}

impl RealFile {
    fn new(file: std::fs::File) -> Self {
        RealFile { file, direct: AtomicBool::new(false) }
    }

    /// A direct write: `buf` copied to a page-aligned buffer (direct I/O reads the memory
    /// itself). A write the kernel refuses as unaligned, or cuts short mid-block, goes
    /// on through the page cache: the caller syncs after it either way.
    fn write_direct(&self, buf: &[u8], off: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if !buf.len().is_multiple_of(DIRECT_ALIGN) || !off.is_multiple_of(DIRECT_ALIGN as u64) {
            return self.write_buffered(buf, off);
        }
        thread_local! {
            static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BOUNCE.with_borrow_mut(|bounce| {
            if bounce.len() < buf.len() + DIRECT_ALIGN {
                bounce.resize(buf.len() + DIRECT_ALIGN, 0);
            }
            let start = bounce.as_ptr().align_offset(DIRECT_ALIGN);
            let aligned = &mut bounce[start..start + buf.len()];
            aligned.copy_from_slice(buf);
            let mut done = 0;
            while done < aligned.len() {
                match self.file.write_at(&aligned[done..], off + done as u64) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) if (done + n).is_multiple_of(DIRECT_ALIGN) => done += n,
                    Ok(n) => {
                        done += n;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                    Err(e) => return Err(e),
                }
            }
            if done < aligned.len() {
                return self.write_buffered(&aligned[done..], off + done as u64);
            }
            Ok(())
        })
    }

    /// Writes through the page cache, leaving direct I/O for good.
    fn write_buffered(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.leave_direct();
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, off)
    }

    fn leave_direct(&self) {
        if self.direct.swap(false, Ordering::Relaxed) {
            set_direct_io(&self.file, false);
        }
    }
}

impl StorageFile for RealFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        // Direct reads need aligned buffers too; a log segment is never read through the
        // handle that writes it, so a read simply leaves direct I/O.
        self.leave_direct();
        std::os::unix::fs::FileExt::read_at(&self.file, buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if self.direct.load(Ordering::Relaxed) {
            self.write_direct(buf, off)
        } else {
            std::os::unix::fs::FileExt::write_all_at(&self.file, buf, off)
        }
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_direct(&self) -> bool {
        let on = set_direct_io(&self.file, true);
        self.direct.store(on, Ordering::Relaxed);
        on
    }
}

impl DirStorage {
    /// Forgets a cached listing: the directory changed (called once the change is made).
    fn changed(&self) {
        let mut l = self.listing.lock();
        l.names = None;
        l.changes += 1;
    }

    fn open_file(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
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
        Ok(Box::new(RealFile::new(f)))
    }
}

impl Storage for DirStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let changes = {
            let l = self.listing.lock();
            if let Some(names) = &l.names {
                return Ok(names.clone());
            }
            l.changes
        };
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            if let Ok(name) = e.file_name().into_string() {
                out.push(name);
            }
        }
        let mut l = self.listing.lock();
        if l.on && l.changes == changes {
            l.names = Some(out.clone());
        }
        Ok(out)
    }

    fn cache_listing(&self, on: bool) {
        let mut l = self.listing.lock();
        l.on = on;
        l.names = None;
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let opened = self.open_file(name, create);
        if create {
            self.changed();
        }
        opened
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let r = std::fs::remove_file(self.dir.join(name));
        self.changed();
        r
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let r = std::fs::rename(self.dir.join(from), self.dir.join(to));
        self.changed();
        r
    }

    fn sync_dir(&self) -> io::Result<()> {
        std::fs::File::open(&self.dir)?.sync_all()
    }

    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        Ok(Box::new(lock_directory(&self.dir, false)?))
    }

    fn lock_shared(&self) -> io::Result<Box<dyn Send + Sync>> {
        Ok(Box::new(lock_directory(&self.dir, true)?))
    }
}

/// A database directory read without writing anything: files opened `O_RDONLY` (so a
/// read-only mount, or files and a directory the process may not write, still open), the
/// directory never created, its lock taken shared, and every write, sync, rename or
/// removal refused (`PermissionDenied`: a read-only open never asks for one, so a refusal
/// here is a bug caught, not a file changed). Read-only opens
/// ([`Options::read_only`](crate::Options::read_only)), `tsumiki check` and
/// `tsumiki stats` read through it.
pub struct ReadOnlyDir {
    dir: std::path::PathBuf,
}

impl ReadOnlyDir {
    /// The directory `dir`, which must exist ([`Error::NotFound`] otherwise).
    pub fn new(dir: &std::path::Path) -> Result<ReadOnlyDir, Error> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(ReadOnlyDir { dir: dir.to_path_buf() }),
            Ok(_) => Err(Error::NotFound(format!("{} is not a directory", dir.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::NotFound(format!("{} does not exist", dir.display())))
            }
            Err(e) => Err(Error::io(dir.display().to_string(), e)),
        }
    }
}

fn refused() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the database is opened read-only: nothing may be written")
}

/// A file of a [`ReadOnlyDir`], opened `O_RDONLY`.
struct ReadOnlyFile(std::fs::File);

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, off)
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(refused())
    }
    fn sync_data(&self) -> io::Result<()> {
        Err(refused())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for ReadOnlyDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            if let Ok(name) = e?.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        if create {
            return Err(refused());
        }
        // Never through a link, as the database itself.
        let f =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(self.dir.join(name)).map_err(
                |e| {
                    if e.raw_os_error() == Some(libc::ELOOP) {
                        io::Error::new(e.kind(), format!("{name} is a symbolic link, which the database never follows"))
                    } else {
                        e
                    }
                },
            )?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{name} is not a regular file")));
        }
        Ok(Box::new(ReadOnlyFile(f)))
    }

    fn remove(&self, _name: &str) -> io::Result<()> {
        Err(refused())
    }

    fn rename(&self, _from: &str, _to: &str) -> io::Result<()> {
        Err(refused())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Err(refused())
    }

    /// Shared, as [`lock_shared`](Storage::lock_shared): nothing here writes, so readers
    /// need not exclude each other; a writer's lock still excludes them.
    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        self.lock_shared()
    }

    fn lock_shared(&self) -> io::Result<Box<dyn Send + Sync>> {
        Ok(Box::new(lock_directory(&self.dir, true)?))
    }
}

/// Removes from `parent` the directories named `prefix` + a suffix of ASCII letters,
/// digits and '-' that a killed process left: the temporary copies of a backup
/// ([`crate::Db::backup_to`]) or of `tsumiki compact`. Only what is provably dead: a
/// running copier holds an exclusive lock on its temporary directory while it exists, so
/// one whose lock is free is removed and one whose lock is held is left alone. Never
/// follows a link. Returns how many were removed.
pub fn remove_dead_copies(parent: &std::path::Path, prefix: &str) -> io::Result<usize> {
    let mut removed = 0;
    for e in std::fs::read_dir(parent)? {
        let e = e?;
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        if rest.is_empty() || rest.len() > 64 || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            continue;
        }
        let path = e.path();
        if !std::fs::symlink_metadata(&path)?.is_dir() {
            continue;
        }
        let held = std::fs::File::open(&path)?;
        match held.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        std::fs::remove_dir_all(&path)?;
        removed += 1;
    }
    Ok(removed)
}

/// A file in a database directory that the engine creates and locks never: the C
/// library's `dbm_dirfno` hands out a descriptor of it, for callers to lock among
/// themselves (the engine's own lock is an flock on the directory itself).
pub const CALLER_LOCK_FILE: &str = "dbm.lock";

/// Takes the database's lock: a flock on the directory itself, not on a file in it (a file
/// can be deleted and created again, letting a second process lock the new one), through
/// a descriptor opened read-only (flock needs no write access, so a read-only mount
/// locks too). Exclusive for an open that may write, `shared` for one that never does
/// (readers share it; a writer and readers exclude each other). Held while the returned
/// handle lives; `WouldBlock` when another holds it in a conflicting mode.
pub(crate) fn lock_directory(dir: &std::path::Path, shared: bool) -> io::Result<std::fs::File> {
    let f = std::fs::File::open(dir)?;
    let locked = if shared { f.try_lock_shared() } else { f.try_lock() };
    match locked {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("database {} is already open (another process or handle holds its lock)", dir.display()),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
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

    /// File syncs so far (`sync_data`; directory syncs are not counted).
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cached listing follows the storage's own creations, renames and removals, is
    /// used (a file made behind its back stays unseen while it is on), and goes when
    /// turned off.
    #[test]
    fn cached_listings_follow_the_storages_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = DirStorage::new(dir.path()).unwrap();
        let sorted = |s: &DirStorage| {
            let mut v = s.list().unwrap();
            v.sort();
            v
        };
        drop(s.open("a", true).unwrap());
        s.cache_listing(true);
        assert_eq!(sorted(&s), ["a"]);
        drop(s.open("b", true).unwrap());
        assert_eq!(sorted(&s), ["a", "b"]);
        s.rename("a", "c").unwrap();
        assert_eq!(sorted(&s), ["b", "c"]);
        s.remove("b").unwrap();
        assert_eq!(sorted(&s), ["c"]);
        std::fs::write(dir.path().join("d"), b"").unwrap();
        assert_eq!(sorted(&s), ["c"], "not listed again while cached");
        s.cache_listing(false);
        assert_eq!(sorted(&s), ["c", "d"]);
        std::fs::write(dir.path().join("e"), b"").unwrap();
        assert_eq!(sorted(&s), ["c", "d", "e"]);
    }

    /// Direct writes take any buffer (copied to an aligned one) and land where buffered
    /// reads through another handle see them; a write direct I/O cannot take (an unaligned
    /// offset or length) goes through the page cache and leaves direct I/O. Wherever the
    /// file system refuses direct I/O (tmpfs), the same holds through the page cache.
    #[test]
    fn direct_writes_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let s = DirStorage::new(dir.path()).unwrap();
        let f = s.open("seg", true).unwrap();
        f.write_at(&vec![0u8; 4 * 4096], 0).unwrap();
        f.sync_data().unwrap();
        let direct = f.set_direct();
        // An unaligned source: one byte into the vector.
        let src: Vec<u8> = (0..2 * 4096 + 1).map(|i| (i % 251) as u8).collect();
        f.write_at(&src[1..], 4096).unwrap();
        f.sync_data().unwrap();
        let mut back = vec![0u8; 2 * 4096];
        let g = s.open("seg", false).unwrap();
        assert_eq!(g.read_at(&mut back, 4096).unwrap(), back.len());
        assert_eq!(back, src[1..], "direct I/O: {direct}");
        // Unaligned: through the page cache from now on.
        f.write_at(b"tail", 3 * 4096 + 10).unwrap();
        f.sync_data().unwrap();
        let mut t = [0u8; 4];
        g.read_at(&mut t, 3 * 4096 + 10).unwrap();
        assert_eq!(&t, b"tail");
        f.write_at(&src[1..4097], 0).unwrap();
        let mut first = vec![0u8; 4096];
        f.read_at(&mut first, 0).unwrap();
        assert_eq!(first, src[1..4097]);
        assert_eq!(f.len().unwrap(), 4 * 4096);
    }
}
