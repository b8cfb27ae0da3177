//! The page store (paper 004, LLAMA): the committed state as pages of key ranges, each a
//! chain of images on disk (a base, then deltas that name the page and the address of its
//! previous state), found through a translation table from page to chain.
//!
//! Images are packed into a byte stream cut into the 4 KiB blocks of [`crate::block`]
//! (trailer lane [`STORE_LANE`], sequence = block number in its segment, `lo` = the
//! generation that wrote it), in segment files `pages-<n>.seg`. Writes only append: each
//! checkpoint starts at a fresh block after the last one written, and a block is never
//! rewritten while a durable translation table may name it. A segment whose images are all
//! dead is reused only once the table that no longer names it is durable (the master
//! record naming that table is written): a crash before that recovers from the previous
//! table, whose images are all still there.
//!
//! A checkpoint changes only the pages whose keys changed: a page gets a delta with the
//! changed keys' values (or tombstones), or, when its chain is long or its deltas outweigh
//! its base, a new consolidated base (split into several pages when it grew past twice
//! [`PAGE_TARGET`]; an empty page is dropped and its range joins its left neighbour).
//! Cleaning picks segments by cost-benefit (Rosenblum and Ousterhout's `(1 - u) * age /
//! (1 + u)`) whenever the files hold more than [`SPACE_GOAL`] times the live images, and
//! relocates their live pages as consolidated bases.
//!
//! Every image is checksummed, names its page and (deltas) its predecessor by address and
//! checksum; the table names every image of every chain the same way, and the master
//! record names the table: a stale, foreign or damaged image is always
//! [`Error::Corrupt`], never read as data.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::block::{open_block, seal_block, Trailer, BLOCK, PAYLOAD, TRAILER};
use crate::error::{Corruption, Error, MAX_VALUE_LEN};
use crate::index::MAX_KEY_LEN;
use crate::storage::{create_fresh, Storage, StorageFile};

mod entries;
#[doc(hidden)]
pub mod fuzz;
mod table;

use entries::{encode_entries, entries_len, entry_len, for_each_entry, merge_newest_first, Decoded, Layer};

/// The trailer lane id of page-store blocks.
pub const STORE_LANE: u16 = 0xFFFE;
/// A page's target size in encoded bytes: a consolidation splits a page larger than
/// twice this into pieces of about this size.
pub const PAGE_TARGET: usize = 8 << 10;
/// Images in a chain beyond which the next change consolidates the page.
pub const MAX_CHAIN: usize = 8;
/// A page is consolidated once its deltas would exceed its base divided by this: the
/// deltas cost at most a quarter of the live bytes (and of a read of the page).
pub const DELTA_SHARE: u64 = 4;
/// The deltas page `pid` may carry on a base of `base_bytes`: the base over
/// [`DELTA_SHARE`], scaled by a factor between 1/2 and 3/2 drawn from the page id. Pages
/// filled together and changed at the same rate (uniform overwrites after a fill) would
/// otherwise all consolidate in the same checkpoint, writing a second copy of the data
/// before the first could be freed: the directory passed 2x the data there (2.02-2.11x
/// a second into `examples/overwrite`).
fn delta_limit(pid: u64, base_bytes: u64) -> u64 {
    let spread = pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
    ((base_bytes / DELTA_SHARE) * (512 + spread) / 1024).max(PAGE_TARGET as u64 / 8)
}
/// Cleaning runs while the segment files hold more than this times the live images
/// (plus two segments of slack, so a small store never churns).
pub const SPACE_GOAL: f64 = 1.1;
/// Cleaning rewrites at most this fraction (1/n) of the live data per checkpoint.
const RELOCATION_SHARE: u64 = 8;
/// Segments relocated by one checkpoint at most (cleaning is incremental).
const CLEAN_PER_CHECKPOINT: usize = 16;
/// ... and at most this many times the bytes the changes take.
const CLEANING_PACE: u64 = 4;
/// The longest image accepted when reading (a page holding one maximal value, with room).
const MAX_IMAGE: u32 = (MAX_VALUE_LEN + MAX_KEY_LEN + (64 << 10)) as u32 * 2;

const KIND_BASE: u8 = 1;
const KIND_DELTA: u8 = 2;
const KIND_TABLE: u8 = 3;
const KIND_TABLE_DELTA: u8 = 4;
/// Image header: crc (4), body length (4), kind (1), page id (8), previous image (20),
/// entry count (4).
const IMAGE_HEADER: usize = 4 + 4 + 1 + 8 + REF_LEN + 4;
const REF_LEN: usize = 4 + 8 + 4 + 4;
/// Bytes of blocks gathered before they are written.
const WRITE_BATCH: usize = 1 << 20;
/// Changes a checkpoint reads from memory at once (see [`PageStore::apply`]).
const CHANGE_BATCH: usize = 256;

/// A checkpoint writes an intermediate table each time it has written this fraction of
/// the live data (see [`PageStore::milestone_bytes`]).
const MILESTONE_SHARE: u64 = 16;

/// Called by [`PageStore::apply`] at a milestone, with the store's pages so far as its
/// table: writes that table and makes it durable (then [`PageStore::commit`]).
pub type Milestone<'a> = &'a mut dyn FnMut(&mut PageStore) -> Result<(), Error>;

/// Where an image lies: segment, offset in the segment's payload stream (block number
/// times [`PAYLOAD`] plus the offset in that block), length and CRC32C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImageRef {
    /// The segment file number.
    pub seg: u32,
    /// Payload offset in the segment.
    pub off: u64,
    /// The image's length in bytes.
    pub len: u32,
    /// The image's CRC32C (its first four bytes).
    pub crc: u32,
}

impl ImageRef {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.seg.to_le_bytes());
        out.extend_from_slice(&self.off.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<ImageRef, String> {
        Ok(ImageRef { seg: r.u32()?, off: r.u64()?, len: r.u32()?, crc: r.u32()? })
    }

    /// The block after the image's last byte.
    fn end_block(&self) -> u64 {
        (self.off + self.len as u64).div_ceil(PAYLOAD as u64)
    }
}

/// A bounded reader over an image's bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("an image ends inside an entry".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// A length, checked against `max` before use.
    fn len(&mut self, max: usize, what: &str) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(format!("{what} length {n} exceeds {max}"));
        }
        Ok(n)
    }
}

/// One page: the keys from `low` up to the next page's `low`, and its chain on disk,
/// newest image first (the last is a base). An empty chain is an empty page.
#[derive(Debug, Clone)]
struct Page {
    low: Vec<u8>,
    pid: u64,
    chain: Vec<ImageRef>,
}

/// One segment file.
#[derive(Default)]
struct Segment {
    /// Bytes of live images in it (named by the table being built).
    live: u64,
    /// The generation that last wrote into it (cleaning's age).
    gen: u64,
}

/// Counters of the page store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Pages in the translation table.
    pub pages: u64,
    /// Segment files, and how many of them are free for reuse.
    pub segments: u64,
    /// Free segment files.
    pub free_segments: u64,
    /// Bytes of images the current table names (including the table itself).
    pub live_bytes: u64,
    /// Bytes of segment files on disk.
    pub file_bytes: u64,
    /// Bytes of blocks written since open.
    pub written_bytes: u64,
    /// Base images written since open (consolidations, splits, relocations).
    pub bases_written: u64,
    /// Delta images written since open.
    pub deltas_written: u64,
    /// Pages relocated by cleaning since open.
    pub relocated_pages: u64,
    /// Bytes the translation table takes in memory (each page's entry, low key and
    /// chain of image addresses).
    pub table_memory: u64,
    /// Segments cleaned since open.
    pub segments_cleaned: u64,
    /// Records loaded from pages into memory since open (lazily, as keys are first used).
    pub records_loaded: u64,
}

/// The page store of one database directory.
pub struct PageStore {
    storage: Arc<dyn Storage>,
    segment_bytes: u64,
    /// The table being built (between checkpoints: the durable one, shared with
    /// [`PageReads`] rather than copied).
    pages: Arc<Vec<Arc<Page>>>,
    next_pid: u64,
    segs: BTreeMap<u32, Segment>,
    /// Segments no durable table names: reusable.
    free: BTreeSet<u32>,
    /// Segments the table being built no longer names: free once it is durable.
    freed: Vec<u32>,
    /// The images of the durable table's chain, newest first (the last is its base: the
    /// master record names the first), and the pages it names (a new table is written as
    /// a delta of those, see [`table`]).
    table_chain: Vec<ImageRef>,
    table_pages: Arc<Vec<Arc<Page>>>,
    /// The segment being appended to and its next block, with the bytes not yet in a
    /// written block (`buf`) and sealed blocks not yet written (`out`, from `out_block`).
    cur: Option<(u32, Box<dyn StorageFile>)>,
    next_block: u64,
    buf: Vec<u8>,
    out: Vec<u8>,
    out_block: u64,
    /// Files written since the last sync, and whether one was created.
    touched: Vec<(u32, Box<dyn StorageFile>)>,
    created: bool,
    /// Whether this checkpoint appended an image yet: its first goes right after the
    /// durable table, whatever the segment's fill, so that a block there newer than the
    /// master record proves a later checkpoint ran (see [`PageStore::newest_unnamed`]).
    started: bool,
    gen: u64,
    stats: StoreStats,
    /// [`PageStore::appended`] when the last table was written.
    table_written_at: u64,
    /// Bytes the last checkpoint's changes wrote (what the next one's cleaning expects).
    last_pass: u64,
    /// Bytes cleaning wrote since open (pages relocated without a change).
    relocated_bytes: u64,
    /// Test only: a freed segment is reused at once, before the table that frees it is
    /// durable (a planted bug for the crash tests).
    early_reuse: bool,
    /// The read side, shared with loads that run while a checkpoint builds the next table.
    reads: Arc<PageReads>,
    /// Threads that prepare a pass's pages (see [`PageStore::apply_pass`]).
    helpers: usize,
}

/// The read side of the store: the pages of the durable table and the segment files open
/// for reading. Loads go through it without the store itself, so a load never waits for a
/// running checkpoint (which holds the store while it writes, syncs and waits for the
/// master record).
///
/// A load reads the durable table's images: a key range that is not in memory was not
/// written since the checkpoint that table belongs to (it would have been loaded to be
/// written, and a range leaves memory only once a durable checkpoint covers its writes).
/// Those images stay where they are until a newer table is durable; the swap to that table
/// ([`PageStore::commit`]) takes the write lock, so it waits for the loads reading the old
/// one, and only after it are the segments the old table alone named reused or deleted.
pub struct PageReads {
    storage: Arc<dyn Storage>,
    /// Segment files opened for reading, kept open: pages load one at a time, each a few
    /// images (a deleted segment's handle is dropped with it).
    readers: Mutex<HashMap<u32, Arc<dyn StorageFile>>>,
    durable: RwLock<Arc<Vec<Arc<Page>>>>,
    /// Records [`load_range`](Self::load_range) handed out.
    loaded: AtomicU64,
}

impl PageReads {
    /// Streams the live keys `low <= key < high` (no upper bound: `None`) with their
    /// values to `load`, in key order, reading only the durable table's pages covering that
    /// range.
    pub fn load_range(&self, low: &[u8], high: Option<&[u8]>, load: &mut Sink<'_>) -> Result<u64, Error> {
        let pages = self.durable.read();
        let mut n = 0;
        let first = pages.partition_point(|p| p.low.as_slice() <= low).saturating_sub(1);
        for i in first..pages.len() {
            if high.is_some_and(|h| pages[i].low.as_slice() >= h) {
                break;
            }
            self.page_entries(&pages, i, &[], |k, v| {
                if k >= low && high.is_none_or(|h| k < h) {
                    n += 1;
                    load(k, v)?;
                }
                Ok(())
            })?;
        }
        self.loaded.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }

    /// Segment `n` open for reading (kept open for the next read).
    fn reader(&self, n: u32) -> Result<Arc<dyn StorageFile>, Error> {
        if let Some(f) = self.readers.lock().get(&n) {
            return Ok(f.clone());
        }
        let f: Arc<dyn StorageFile> = Arc::from(open_segment(&*self.storage, n)?);
        self.readers.lock().insert(n, f.clone());
        Ok(f)
    }

    /// Reads the image at `r`, checking every block and the image's checksum (and, with
    /// `pid`, that it belongs to that page). Returns its bytes.
    fn read_image(&self, r: ImageRef, pid: Option<u64>) -> Result<Vec<u8>, Error> {
        let what = || format!("the page image at {}:{} ({} bytes)", segment_file(r.seg), r.off, r.len);
        // Names the segment and the byte offset of the image's first block in it.
        let bad = |why: String| {
            let at = r.off / PAYLOAD as u64 * BLOCK as u64;
            Error::Corrupt(Corruption::in_file(segment_file(r.seg), Some(at), why))
        };
        if r.len as usize > MAX_IMAGE as usize || (r.len as usize) < IMAGE_HEADER {
            return Err(bad(format!("{}: invalid length", what())));
        }
        let first = r.off / PAYLOAD as u64;
        let blocks = r.end_block() - first;
        let mut raw = vec![0u8; (blocks as usize) * BLOCK];
        let file = self.reader(r.seg)?;
        let mut at = 0;
        while at < raw.len() {
            match file.read_at(&mut raw[at..], first * BLOCK as u64 + at as u64) {
                Ok(0) => return Err(bad(format!("{}: the segment ends before it", what()))),
                Ok(n) => at += n,
                Err(e) => return Err(Error::io(what(), e)),
            }
        }
        let mut img = Vec::with_capacity(r.len as usize);
        let mut skip = (r.off % PAYLOAD as u64) as usize;
        for (i, block) in raw.chunks(BLOCK).enumerate() {
            let t = match open_block(block, 0) {
                Some(t) if t.lane == STORE_LANE && t.seq as u64 == first + i as u64 => t,
                _ => return Err(bad(format!("{}: block {} is damaged", what(), first + i as u64))),
            };
            let want = (r.len as usize - img.len()).min(PAYLOAD - skip);
            if (t.used as usize) < skip + want {
                return Err(bad(format!("{}: block {} is shorter than the image", what(), first + i as u64)));
            }
            img.extend_from_slice(&block[skip..skip + want]);
            skip = 0;
        }
        let stored = u32::from_le_bytes(img[0..4].try_into().expect("4 bytes"));
        let body = u32::from_le_bytes(img[4..8].try_into().expect("4 bytes"));
        if stored != r.crc || crc32c::crc32c(&img[4..]) != stored || body as usize + 8 != img.len() {
            return Err(bad(format!("{}: checksum mismatch (damaged, stale or foreign)", what())));
        }
        if let Some(pid) = pid {
            let got = u64::from_le_bytes(img[9..17].try_into().expect("8 bytes"));
            if got != pid || !matches!(img[8], KIND_BASE | KIND_DELTA) {
                return Err(bad(format!("{}: not an image of page {pid}", what())));
            }
        }
        Ok(img)
    }

    /// Calls `f` with every live key and value of page `i` of `pages`, in key order, after applying
    /// `changes` (sorted, all within the page's range).
    fn page_entries(
        &self,
        pages: &[Arc<Page>],
        i: usize,
        changes: &[Change],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let page = &pages[i];
        let high = pages.get(i + 1).map(|p| p.low.as_slice());
        let imgs = page.chain.iter().map(|&r| self.read_image(r, Some(page.pid))).collect::<Result<Vec<_>, _>>()?;
        // Each image names the one before it.
        for (w, img) in imgs.iter().enumerate() {
            let kind = img[8];
            let last = w + 1 == imgs.len();
            let prev = ImageRef::decode(&mut Reader(&img[17..17 + REF_LEN])).map_err(corrupt)?;
            let ok = if last { kind == KIND_BASE } else { kind == KIND_DELTA && prev == page.chain[w + 1] };
            if !ok {
                return Err(corrupt(format!("page {}: its chain is broken at image {w}", page.pid)));
            }
        }
        let in_range = |k: &[u8]| k >= page.low.as_slice() && high.is_none_or(|h| k < h);
        if imgs.len() == 1 && changes.is_empty() {
            return for_each_entry(&imgs[0], page.pid, |k, v| match v {
                Some(v) if in_range(k) => f(k, v),
                _ => Err(corrupt(format!("page {}: a base holds a key outside its range or a tombstone", page.pid))),
            });
        }
        // Each layer is sorted: merge them, the newest first (the changes, then the images
        // from the newest), so that the first layer holding a key gives its value.
        let decoded = imgs
            .iter()
            .map(|img| {
                Decoded::new(img, page.pid, |k| {
                    if in_range(k) {
                        Ok(())
                    } else {
                        Err(corrupt(format!("page {}: an image holds a key outside its range", page.pid)))
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut layers: Vec<Layer<'_>> = Vec::with_capacity(imgs.len() + 1);
        layers.push(changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect());
        layers.extend(decoded.iter().map(Decoded::layer));
        merge_newest_first(&layers, |k, v| match v {
            Some(v) => f(k, v),
            None => Ok(()),
        })
    }
}

/// Opens segment `n` of `storage`; a missing one is corruption (a table names it).
fn open_segment(storage: &dyn Storage, n: u32) -> Result<Box<dyn StorageFile>, Error> {
    let name = segment_file(n);
    storage.open(&name, false).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => corrupt(format!("{name}, which the translation table names, is missing")),
        _ => Error::io(name, e),
    })
}

/// The name of segment `n`.
pub fn segment_file(n: u32) -> String {
    format!("pages-{n:08}.seg")
}

/// The number in a segment file name.
pub fn parse_segment_file(name: &str) -> Option<u32> {
    let n = name.strip_prefix("pages-")?.strip_suffix(".seg")?;
    (n.len() == 8).then(|| n.parse().ok()).flatten()
}

fn corrupt(m: impl Into<String>) -> Error {
    Error::Corrupt(Corruption::new(m))
}

/// A change to apply: a key and its new value (`None`: deleted).
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Changed keys in strictly increasing order, whose new values are read a few at a time
/// (a checkpoint reads them from memory one page at a time).
pub trait Changes: Sync {
    /// Keys listed.
    fn len(&self) -> usize;
    /// Key `i`.
    fn key(&self, i: usize) -> &[u8];
    /// Appends keys `range` with their values (`None`: deleted) to `out`.
    fn values(&self, range: std::ops::Range<usize>, out: &mut Vec<Change>) -> Result<(), Error>;
    /// Called on each helper thread of a checkpoint before it reads values: sets up
    /// what a read needs on that thread.
    fn on_helper_thread(&self) {}
}

impl Changes for &[Change] {
    fn len(&self) -> usize {
        <[Change]>::len(self)
    }
    fn key(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn values(&self, range: std::ops::Range<usize>, out: &mut Vec<Change>) -> Result<(), Error> {
        out.extend_from_slice(&self[range]);
        Ok(())
    }
}

/// Receives live keys and their values, in key order.
pub type Sink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), Error> + 'a;

impl PageStore {
    /// Opens the store whose translation table is `table` (none: an empty store, whose one
    /// page is empty). Reads only the table; pages are read when loaded.
    pub fn open(
        storage: Arc<dyn Storage>,
        segment_bytes: u64,
        table: Option<ImageRef>,
        early_reuse: bool,
    ) -> Result<PageStore, Error> {
        let mut s = PageStore {
            storage: storage.clone(),
            segment_bytes: segment_bytes.max(2 * BLOCK as u64),
            pages: Arc::new(vec![Arc::new(Page { low: Vec::new(), pid: 0, chain: Vec::new() })]),
            next_pid: 1,
            segs: BTreeMap::new(),
            free: BTreeSet::new(),
            freed: Vec::new(),
            table_chain: Vec::new(),
            table_pages: Arc::new(Vec::new()),
            cur: None,
            next_block: 0,
            buf: Vec::new(),
            out: Vec::new(),
            out_block: 0,
            touched: Vec::new(),
            created: false,
            started: false,
            gen: 0,
            stats: StoreStats::default(),
            table_written_at: 0,
            last_pass: 0,
            relocated_bytes: 0,
            early_reuse,
            helpers: 0,
            reads: Arc::new(PageReads {
                storage: storage.clone(),
                readers: Mutex::new(HashMap::new()),
                durable: RwLock::new(Arc::new(Vec::new())),
                loaded: AtomicU64::new(0),
            }),
        };
        let files: Vec<u32> = s
            .storage
            .list()
            .map_err(|e| Error::io("listing the database directory", e))?
            .iter()
            .filter_map(|n| parse_segment_file(n))
            .collect();
        if let Some(t) = table {
            s.read_table(t)?;
            let refs: Vec<ImageRef> =
                s.pages.iter().flat_map(|p| p.chain.iter().copied()).chain(s.table_chain.iter().copied()).collect();
            for r in refs {
                s.segs.entry(r.seg).or_default().live += r.len as u64;
            }
            let file = s.open_segment(t.seg)?;
            s.cur = Some((t.seg, file));
            s.next_block = t.end_block();
            s.out_block = s.next_block;
        }
        for n in files {
            if !s.segs.contains_key(&n) {
                s.free.insert(n);
            }
        }
        *s.reads.durable.write() = s.pages.clone();
        Ok(s)
    }

    /// The read side, for loads that must not wait for a checkpoint.
    pub fn reads(&self) -> Arc<PageReads> {
        self.reads.clone()
    }

    /// The generation of the newest write the durable table does not name, if one is on
    /// disk where the next checkpoint writes first: the block after the table (without a
    /// table: the first block of any segment). A master record older than the store
    /// shows up here: a later checkpoint wrote after the table it names.
    pub fn newest_unnamed(&self) -> Result<Option<u64>, Error> {
        let mut newest = None;
        let mut probe = |n: u32, block: u64| -> Result<(), Error> {
            let f = self.open_segment(n)?;
            let mut b = vec![0u8; BLOCK];
            let got = f.read_at(&mut b, block * BLOCK as u64).map_err(|e| Error::io(segment_file(n), e))?;
            if got == BLOCK {
                if let Some(t) = open_block(&b, 0).filter(|t| t.lane == STORE_LANE && t.seq as u64 == block) {
                    newest = newest.max(Some(t.lo));
                }
            }
            Ok(())
        };
        match self.table_chain.first().copied() {
            Some(t) => probe(t.seg, t.end_block())?,
            None => {
                for &n in &self.free {
                    probe(n, 0)?;
                }
            }
        }
        Ok(newest)
    }

    fn open_segment(&self, n: u32) -> Result<Box<dyn StorageFile>, Error> {
        open_segment(&*self.storage, n)
    }

    /// Sets the threads that prepare a pass's pages (see
    /// [`LogOptions::checkpoint_helpers`](crate::wal::LogOptions::checkpoint_helpers)).
    pub fn set_helpers(&mut self, helpers: usize) {
        self.helpers = helpers;
    }

    /// Bytes of blocks written since open.
    pub fn written(&self) -> u64 {
        self.stats.written_bytes
    }

    /// Bytes of images the current table names (including the table itself).
    pub fn live_bytes(&self) -> u64 {
        self.segs.values().map(|g| g.live).sum()
    }

    /// The store's counters.
    pub fn stats(&self) -> StoreStats {
        let mut s = self.stats;
        s.records_loaded = self.reads.loaded.load(Ordering::Relaxed);
        s.pages = self.pages.len() as u64;
        s.free_segments = self.free.len() as u64;
        s.segments = (self.segs.len() + self.free.len()) as u64;
        s.live_bytes = self.live_bytes();
        let each = std::mem::size_of::<Page>() + 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Arc<Page>>();
        s.table_memory = self
            .pages
            .iter()
            .map(|p| (each + p.low.capacity() + p.chain.capacity() * std::mem::size_of::<ImageRef>()) as u64)
            .sum();
        s.file_bytes = 0;
        for n in self.segs.keys().chain(&self.free) {
            if let Ok(f) = self.storage.open(&segment_file(*n), false) {
                s.file_bytes += f.len().unwrap_or(0);
            }
        }
        s
    }

    /// Reads the table whose newest image is `t`: back along its chain to the base, then
    /// the deltas applied in order.
    fn read_table(&mut self, t: ImageRef) -> Result<(), Error> {
        let bad = |m: String| corrupt(format!("the translation table: {m}"));
        let mut chain = vec![t];
        let mut imgs = vec![self.reads.read_image(t, None)?];
        loop {
            let img = imgs.last().expect("one image at least");
            match img[8] {
                KIND_TABLE => break,
                KIND_TABLE_DELTA if chain.len() < table::TABLE_CHAIN => {
                    let prev = ImageRef::decode(&mut Reader(&img[17..17 + REF_LEN])).map_err(bad)?;
                    imgs.push(self.reads.read_image(prev, None)?);
                    chain.push(prev);
                }
                KIND_TABLE_DELTA => return Err(bad(format!("a chain of over {} images", table::TABLE_CHAIN))),
                k => return Err(bad(format!("an image of kind {k}, not a table"))),
            }
        }
        let mut pages = None;
        let mut segs = Vec::new();
        for img in imgs.iter().rev() {
            let (p, sg) = table::decode(&img[IMAGE_HEADER..], pages)?;
            pages = Some(p);
            segs = sg;
        }
        let pages = pages.expect("a base at least");
        self.next_pid = u64::from_le_bytes(imgs[0][9..17].try_into().expect("8 bytes"));
        table::check(&pages, self.next_pid)?;
        for (seg, gen) in segs {
            self.segs.insert(seg, Segment { live: 0, gen });
        }
        self.pages = Arc::new(pages);
        self.table_pages = self.pages.clone();
        self.table_chain = chain;
        Ok(())
    }

    /// Calls `f` with every live key and value of page `i` of the table being built, in
    /// key order, after applying `changes` (sorted, all within the page's range).
    fn page_entries(
        &self,
        i: usize,
        changes: &[Change],
        f: impl FnMut(&[u8], &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.reads.page_entries(&self.pages, i, changes, f)
    }

    /// Streams the whole state to `load`, in key order, with `changes` (sorted) applied
    /// over the pages (recovery's replayed writes).
    pub fn load_all(&self, changes: &[Change], load: &mut Sink<'_>) -> Result<u64, Error> {
        let mut n = 0;
        let mut at = 0;
        for i in 0..self.pages.len() {
            let end = range_end(&self.pages, i, &changes, at);
            self.page_entries(i, &changes[at..end], |k, v| {
                n += 1;
                load(k, v)
            })?;
            at = end;
        }
        Ok(n)
    }

    /// Each segment the table names: its number, the bytes of live images in it, and the
    /// generation that last wrote it.
    pub fn segment_usage(&self) -> Vec<(u32, u64, u64)> {
        self.segs.iter().map(|(n, s)| (*n, s.live, s.gen)).collect()
    }

    /// The low keys of the pages, in key order (the first is empty): page `i` holds the
    /// keys from its low key to the next page's.
    pub fn page_lows(&self) -> Vec<Vec<u8>> {
        self.pages.iter().map(|p| p.low.clone()).collect()
    }

    /// Applies `changes` (sorted by key, unique) for generation `gen`: deltas or new
    /// bases for the pages they touch, and relocation of the pages of the segments
    /// cleaning picks. Then [`write_table`](Self::write_table) (several calls may come
    /// before it: each one's pages are the next one's). The changes' values are read
    /// a page at a time (a page with over [`PREPARE_MAX_CHANGES`] changes [`CHANGE_BATCH`]
    /// at a time), so a checkpoint never holds all it writes.
    ///
    /// With `milestone`, each time the images written since the last table pass
    /// [`milestone_bytes`](Self::milestone_bytes), the table of the pages so far (the
    /// pages done, then the rest as they were) is made current and `milestone` is called
    /// with the store: it writes that table and, once a master record names it, calls
    /// [`commit`](Self::commit), so that the segments it frees are reused within the
    /// same checkpoint instead of piling up until its end.
    pub fn apply(
        &mut self,
        gen: u64,
        changes: &dyn Changes,
        mut milestone: Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        self.gen = gen;
        let before = (self.appended(), self.relocated_bytes);
        // Cleaning's first pick goes with the changes (counting the room the last
        // checkpoint's changes took, with twice the relocation budget), so that with
        // milestones the segments it empties are reused within this checkpoint: picked
        // only after the changes' writes, they stayed on disk beside them until its end
        // (a steady overwrite's page store peaked at 1.8x the data instead of 1.5x). A
        // second pick after the changes covers what their writes took beyond that.
        let early = if milestone.is_some() { self.pick_victims(self.last_pass, 2) } else { BTreeSet::new() };
        self.stats.segments_cleaned += early.len() as u64;
        self.apply_pass(changes, &early, &mut milestone)?;
        self.last_pass = (self.appended() - before.0) - (self.relocated_bytes - before.1);
        let victims = self.pick_victims(0, 1);
        if !victims.is_empty() {
            self.stats.segments_cleaned += victims.len() as u64;
            // The pass reads back images the first one wrote.
            self.write_pending()?;
            let none: &[Change] = &[];
            self.apply_pass(&none, &victims, &mut milestone)?;
        }
        Ok(())
    }

    /// Bytes of images after which a checkpoint writes an intermediate table: a sixteenth
    /// of the live data, at least two segments (a table costs a few bytes per page, and
    /// the segments a milestone frees hold at most what was written since the last one).
    fn milestone_bytes(&self) -> u64 {
        (self.live_bytes() / MILESTONE_SHARE).max(2 * self.segment_bytes)
    }

    /// Bytes of images appended since open (written or not).
    fn appended(&self) -> u64 {
        self.stats.written_bytes + (self.out.len() + self.buf.len()) as u64
    }

    /// One pass over the pages: `changes` applied, and every page with an image in
    /// `victims` rewritten as a consolidated base.
    ///
    /// What a touched page needs before its images are appended (its changes' values, and
    /// its entries read back when it is consolidated) is prepared ahead, in order, by
    /// helper threads (see [`ReadAhead`]) when the store has some and the pass touches
    /// many pages: a uniform update touches most pages each checkpoint, and on one thread
    /// the checkpoint capped the commit rate on 16 cores. The appends stay on this
    /// thread, in page order (addresses, page ids, segments).
    fn apply_pass(
        &mut self,
        changes: &dyn Changes,
        victims: &BTreeSet<u32>,
        milestone: &mut Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        // The table as the pass found it: the pass reads it while it builds the new list
        // (unchanged pages are shared), and a milestone's table is the pages done followed
        // by the rest of it.
        let before = self.pages.clone();
        let mut touched: Vec<Touched> = Vec::new();
        let mut at = 0;
        for (i, page) in before.iter().enumerate() {
            let end = range_end(&before, i, changes, at);
            let relocate = page.chain.iter().any(|r| victims.contains(&r.seg));
            if end > at || relocate {
                touched.push(Touched { page: i, changes: at..end, relocate });
            }
            at = end;
        }
        let helpers = if touched.len() >= PARALLEL_MIN_PAGES { self.helpers } else { 0 };
        let reads = self.reads.clone();
        let ctx = Prepare { reads: &reads, before: &before, changes, touched: &touched };
        let ahead = ReadAhead::new(touched.len().div_ceil(PREPARE_CHUNK), helpers);
        std::thread::scope(|s| {
            // Helpers blocked for room wake and leave however this ends (a failed spawn
            // included: the scope would otherwise wait for them).
            let _stop = ahead.stop_on_drop();
            // A thread the system refuses is one helper fewer (none: the pass prepares
            // its pages itself).
            let started = (0..helpers)
                .filter(|_| std::thread::Builder::new().spawn_scoped(s, || ahead.help(&ctx)).is_ok())
                .count();
            self.apply_touched(&ctx, &ahead, started > 0, milestone)
        })
    }

    /// The sequential half of [`apply_pass`](Self::apply_pass): every page in order, the
    /// touched ones rewritten with what `ahead`'s helpers prepared (`helped`), or prepared
    /// here.
    fn apply_touched(
        &mut self,
        ctx: &Prepare<'_>,
        ahead: &ReadAhead,
        helped: bool,
        milestone: &mut Option<Milestone<'_>>,
    ) -> Result<(), Error> {
        let before = ctx.before;
        let mut out: Vec<Arc<Page>> = Vec::with_capacity(before.len());
        let every = self.milestone_bytes();
        let mut next_touched = ctx.touched.iter().enumerate().peekable();
        let mut chunk: std::vec::IntoIter<Option<Prepared>> = Vec::new().into_iter();
        for i in 0..before.len() {
            if let Some(m) = milestone.as_mut() {
                if self.appended() >= self.table_written_at + every {
                    let mut now: Vec<Arc<Page>> = out.iter().chain(&before[i..]).cloned().collect();
                    if !now[0].low.is_empty() {
                        Arc::make_mut(&mut now[0]).low.clear();
                    }
                    self.pages = Arc::new(now);
                    m(self)?;
                }
            }
            let page = before[i].clone();
            let Some((n, t)) = next_touched.next_if(|(_, t)| t.page == i) else {
                out.push(page);
                continue;
            };
            let prepared = if !helped {
                ctx.prepare(t)?
            } else {
                if n % PREPARE_CHUNK == 0 {
                    chunk = ahead.take(n / PREPARE_CHUNK)?.into_iter();
                }
                chunk.next().expect("a prepared chunk holds each of its pages")
            };
            self.apply_page(ctx, page, t, prepared, &mut out)?;
        }
        if out.is_empty() {
            out.push(Arc::new(Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new() }));
        }
        // The first page always starts at the empty key (an emptied first page was
        // dropped: its right neighbour now covers its range too).
        if !out[0].low.is_empty() {
            Arc::make_mut(&mut out[0]).low.clear();
        }
        self.pages = Arc::new(out);
        Ok(())
    }

    /// Rewrites one touched page: a delta of its changes, or a consolidated base (several
    /// when it grew), with `prepared` (or, for a page with too many changes to prepare at
    /// once, its changes read a batch at a time).
    fn apply_page(
        &mut self,
        ctx: &Prepare<'_>,
        page: Arc<Page>,
        t: &Touched,
        prepared: Option<Prepared>,
        out: &mut Vec<Arc<Page>>,
    ) -> Result<(), Error> {
        let to = t.changes.end;
        if t.relocate {
            self.stats.relocated_pages += 1;
        }
        // What cleaning alone writes (the page has no change) is not what the next
        // checkpoint's changes are expected to take.
        let relocation_from = t.changes.is_empty().then(|| self.appended());
        let (mut mine, mut next, old, delta) = match prepared {
            Some(p) => {
                let delta = p.old.is_none();
                (p.mine, to, p.old, delta)
            }
            None => {
                // Changes are read a batch at a time: the last page of an ascending fill
                // gets every new key of the interval, and holding them all would cost as
                // much memory as the interval wrote.
                let mut mine = Vec::new();
                let mut next = t.changes.start;
                let room = delta_room(&page, t.relocate);
                if let Some(room) = room {
                    let mut delta_len = 0u64;
                    while next < to && delta_len <= room {
                        let end = (next + CHANGE_BATCH).min(to);
                        let seen = mine.len();
                        ctx.changes.values(next..end, &mut mine)?;
                        let prev = if seen > 0 { mine[seen - 1].0.as_slice() } else { &[] };
                        delta_len += changes_len(prev, &mine[seen..]);
                        next = end;
                    }
                    let delta = next == to && delta_len <= room;
                    (mine, next, None, delta)
                } else {
                    (mine, next, None, false)
                }
            }
        };
        if delta {
            let (count, body) = encode_entries(mine.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
            let r = self.append_image(KIND_DELTA, page.pid, page.chain[0], count, &body)?;
            self.stats.deltas_written += 1;
            let mut p = Arc::unwrap_or_clone(page);
            p.chain.insert(0, r);
            out.push(Arc::new(p));
            return Ok(());
        }
        // Consolidate: the page's entries (one page: bounded) merged with the changes
        // read so far and the rest, a batch at a time, written as bases of about
        // `PAGE_TARGET` as they fill.
        let old = match old {
            Some(old) => old,
            None => ctx.entries(t.page)?,
        };
        for r in &page.chain {
            self.dead(*r);
        }
        let mut bases = Bases::new(Arc::unwrap_or_clone(page));
        let mut old = old.into_iter().peekable();
        loop {
            for (k, v) in mine.drain(..) {
                while let Some((ok, ov)) = old.next_if(|(ok, _)| ok.as_slice() <= k.as_slice()) {
                    if ok != k {
                        bases.push(self, ok, ov, out)?;
                    }
                }
                if let Some(v) = v {
                    bases.push(self, k, v, out)?;
                }
            }
            if next == to {
                break;
            }
            let end = (next + CHANGE_BATCH).min(to);
            ctx.changes.values(next..end, &mut mine)?;
            next = end;
        }
        for (k, v) in old {
            bases.push(self, k, v, out)?;
        }
        bases.finish(self, out)?;
        if let Some(at) = relocation_from {
            self.relocated_bytes += self.appended() - at;
        }
        Ok(())
    }

    /// Replaces the whole store with `entries` (key order): every page new, every old
    /// image dead. For databases whose changes are not known from the log.
    pub fn rebuild(&mut self, gen: u64, fill: &mut dyn FnMut(&mut Sink<'_>) -> Result<(), Error>) -> Result<(), Error> {
        self.gen = gen;
        for r in self.pages.iter().flat_map(|p| p.chain.clone()).collect::<Vec<_>>() {
            self.dead(r);
        }
        let mut out: Vec<Arc<Page>> = Vec::new();
        let first = Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new() };
        let mut bases = Bases::new(first);
        fill(&mut |k, v| bases.push(self, k.to_vec(), v.to_vec(), &mut out))?;
        bases.finish(self, &mut out)?;
        if out.is_empty() {
            out.push(Arc::new(Page { low: Vec::new(), pid: self.take_pid(), chain: Vec::new() }));
        }
        self.pages = Arc::new(out);
        Ok(())
    }

    fn take_pid(&mut self) -> u64 {
        self.next_pid += 1;
        self.next_pid - 1
    }

    /// Writes `entries` (the whole content of `page`) as one base, or as several pages
    /// when it is more than twice [`PAGE_TARGET`]; an empty page is dropped.
    fn write_bases(
        &mut self,
        page: Page,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        out: &mut Vec<Arc<Page>>,
    ) -> Result<(), Error> {
        if entries.is_empty() {
            return Ok(());
        }
        let total = entries_len(entries.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
        let pieces = if total > 2 * PAGE_TARGET { total.div_ceil(PAGE_TARGET) } else { 1 };
        let per = total.div_ceil(pieces);
        let mut start = 0;
        let mut first = true;
        while start < entries.len() {
            let mut size = 0;
            let mut end = start;
            while end < entries.len() && (end == start || size < per) {
                let prev = if end > start { entries[end - 1].0.as_slice() } else { &[] };
                size += entry_len(prev, &entries[end].0, Some(&entries[end].1));
                end += 1;
            }
            let (pid, low) =
                if first { (page.pid, page.low.clone()) } else { (self.take_pid(), entries[start].0.clone()) };
            first = false;
            let (count, body) =
                encode_entries(entries[start..end].iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
            let r = self.append_image(KIND_BASE, pid, ImageRef::default(), count, &body)?;
            self.stats.bases_written += 1;
            out.push(Arc::new(Page { low, pid, chain: vec![r] }));
            start = end;
        }
        Ok(())
    }

    /// Marks the image at `r` dead (its page moved on).
    fn dead(&mut self, r: ImageRef) {
        let cur = self.cur.as_ref().map(|c| c.0);
        if let Some(s) = self.segs.get_mut(&r.seg) {
            s.live = s.live.saturating_sub(r.len as u64);
            if s.live == 0 && cur != Some(r.seg) {
                self.segs.remove(&r.seg);
                if self.early_reuse {
                    self.free.insert(r.seg);
                } else {
                    self.freed.push(r.seg);
                }
            }
        }
    }

    /// The segments cleaning relocates this time: while the files (with `coming` bytes
    /// about to be written) hold more than [`SPACE_GOAL`] times the live bytes, the best by
    /// cost-benefit, within `shares` eighths of the live data.
    fn pick_victims(&self, coming: u64, shares: u64) -> BTreeSet<u32> {
        let cur = self.cur.as_ref().map(|c| c.0);
        let live: u64 = self.segs.values().map(|s| s.live).sum();
        let mut files = (self.segs.len() as u64) * self.segment_bytes + coming;
        let slack = 2 * self.segment_bytes;
        // What cleaning a segment costs: every page with an image in it is rewritten whole.
        // A segment of one checkpoint's deltas names most pages: cleaning it would rewrite
        // the database (those pages consolidate by themselves as their deltas grow).
        let mut cost: HashMap<u32, u64> = HashMap::new();
        for p in self.pages.iter() {
            let bytes: u64 = p.chain.iter().map(|r| u64::from(r.len)).sum();
            let mut seen: Vec<u32> = p.chain.iter().map(|r| r.seg).collect();
            seen.sort_unstable();
            seen.dedup();
            for n in seen {
                *cost.entry(n).or_default() += bytes;
            }
        }
        let mut cands: Vec<(f64, u32, u64, u64)> = self
            .segs
            .iter()
            .filter(|(n, _)| Some(**n) != cur)
            .map(|(n, s)| {
                let freed = self.segment_bytes.saturating_sub(s.live) as f64;
                let age = self.gen.saturating_sub(s.gen) as f64 + 1.0;
                let c = cost.get(n).copied().unwrap_or(0);
                (freed * age / (c as f64 + 1.0), *n, s.live, c)
            })
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0));
        // Rewrites per checkpoint stay a fraction of the data, and a few times what the
        // changes take (cleaning keeps pace with the space they use: a checkpoint of a
        // few synced commits must not relocate an eighth of the data).
        let mut budget = (live * shares / RELOCATION_SHARE).min((CLEANING_PACE * self.last_pass).max(slack));
        let mut victims = BTreeSet::new();
        for (_, n, l, c) in cands {
            if files as f64 <= SPACE_GOAL * live as f64 + slack as f64 || victims.len() >= CLEAN_PER_CHECKPOINT {
                break;
            }
            if c > budget {
                continue;
            }
            budget -= c;
            victims.insert(n);
            // Its live bytes are written again elsewhere.
            files = files.saturating_sub(self.segment_bytes - l.min(self.segment_bytes));
        }
        victims
    }

    /// Appends one image; returns where it lies.
    fn append_image(&mut self, kind: u8, pid: u64, prev: ImageRef, count: u32, body: &[u8]) -> Result<ImageRef, Error> {
        self.append_image_with(kind, pid, prev, count, body.len(), &mut |out| out.extend_from_slice(body))
    }

    /// Appends one image whose body, `body_len` bytes, `fill` writes straight into the
    /// pending bytes (a large table is never copied whole).
    fn append_image_with(
        &mut self,
        kind: u8,
        pid: u64,
        prev: ImageRef,
        count: u32,
        body_len: usize,
        fill: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<ImageRef, Error> {
        let len =
            u32::try_from(IMAGE_HEADER + body_len).map_err(|_| Error::Config("a page image over 4 GiB".into()))?;
        // A new segment when this one is full (an image never spans two; one larger than
        // a segment gets a segment of its own).
        let used = self.next_block * BLOCK as u64 + self.buf.len() as u64;
        let reuse_now = self.early_reuse && self.started && !self.free.is_empty();
        if self.cur.is_none() || reuse_now || (self.started && !self.fits(len as usize) && used > 0) {
            self.next_segment()?;
        }
        let start = self.buf.len();
        let img = &mut self.buf;
        img.extend_from_slice(&[0; 4]);
        img.extend_from_slice(&(len - 8).to_le_bytes());
        img.push(kind);
        img.extend_from_slice(&pid.to_le_bytes());
        prev.encode(img);
        img.extend_from_slice(&count.to_le_bytes());
        fill(img);
        assert_eq!(img.len() - start, len as usize, "an image's body has the length announced");
        let crc = crc32c::crc32c(&img[start + 4..]);
        img[start..start + 4].copy_from_slice(&crc.to_le_bytes());
        let seg = self.cur.as_ref().expect("a segment").0;
        let r = ImageRef { seg, off: self.next_block * PAYLOAD as u64 + start as u64, len, crc };
        self.segs.entry(seg).or_default().live += len as u64;
        self.started = true;
        self.emit(false)?;
        Ok(r)
    }

    /// Finishes the current segment and starts the next: a free one, or a new file.
    fn next_segment(&mut self) -> Result<(), Error> {
        self.emit(true)?;
        let (n, file) = match self.free.pop_first() {
            Some(n) => (n, self.open_segment(n)?),
            None => {
                let n = self.segs.keys().chain(&self.freed).max().map_or(0, |m| m + 1);
                let name = segment_file(n);
                let f = create_fresh(&*self.storage, &name).map_err(|e| Error::io(name, e))?;
                self.created = true;
                (n, f)
            }
        };
        if let Some(old) = self.cur.take() {
            self.touched.push(old);
        }
        self.segs.entry(n).or_default().gen = self.gen;
        self.cur = Some((n, file));
        self.next_block = 0;
        self.out_block = 0;
        Ok(())
    }

    /// Seals full blocks of `buf` (and, with `all`, the partly filled last one) and writes
    /// them out per [`WRITE_BATCH`] (with `all`, everything).
    fn emit(&mut self, all: bool) -> Result<(), Error> {
        let mut taken = 0;
        let mut block = vec![0u8; BLOCK];
        while self.buf.len() - taken >= PAYLOAD || (all && taken < self.buf.len()) {
            if self.out.len() >= WRITE_BATCH {
                self.write_out()?;
            }
            let n = (self.buf.len() - taken).min(PAYLOAD);
            block.fill(0);
            block[..n].copy_from_slice(&self.buf[taken..taken + n]);
            let t = Trailer {
                lane: STORE_LANE,
                used: n as u16,
                seq: self.next_block as u32,
                lo: self.gen,
                ..Default::default()
            };
            seal_block(&mut block, &t, 0);
            self.out.extend_from_slice(&block);
            self.next_block += 1;
            taken += n;
        }
        self.buf.drain(..taken);
        if (self.out.len() >= WRITE_BATCH || all) && !self.out.is_empty() {
            self.write_out()?;
        }
        // A large image (the table) leaves no large buffer behind.
        if self.buf.capacity() > 4 * WRITE_BATCH && self.buf.len() < WRITE_BATCH {
            self.buf.shrink_to(WRITE_BATCH);
        }
        Ok(())
    }

    /// Writes every image appended so far to its segment file (not synced; the last block
    /// padded), so that a later [`apply`](Self::apply) before the table can read them back:
    /// recovery applies its replayed writes in several batches.
    pub fn write_pending(&mut self) -> Result<(), Error> {
        if self.cur.is_none() {
            return Ok(());
        }
        self.emit(true)
    }

    /// Writes the sealed blocks of `out`.
    fn write_out(&mut self) -> Result<(), Error> {
        let (n, file) = self.cur.as_ref().expect("blocks belong to a segment");
        file.write_at(&self.out, self.out_block * BLOCK as u64).map_err(|e| Error::io(segment_file(*n), e))?;
        self.stats.written_bytes += self.out.len() as u64;
        self.out_block += (self.out.len() / BLOCK) as u64;
        self.out.clear();
        Ok(())
    }

    /// Writes the translation table as the last image of this checkpoint, and makes every
    /// block written since the last call durable. Returns the table's address for the
    /// master record; [`commit`](Self::commit) once that record is durable.
    pub fn write_table(&mut self) -> Result<ImageRef, Error> {
        if self.cur.is_none() {
            self.next_segment()?;
        }
        // A delta of the durable table while the chain stays short and its deltas smaller
        // than its base; otherwise a new base, and the old chain dies with it.
        let edits = match self.table_chain.len() {
            0 | table::TABLE_CHAIN.. => None,
            _ => table::diff(&self.table_pages, &self.pages),
        };
        let deltas: u64 = self.table_chain.iter().rev().skip(1).map(|r| u64::from(r.len)).sum();
        let base = self.table_chain.last().map_or(0, |r| u64::from(r.len));
        // The table lists the segments, its own included (one more, if it starts one).
        let segs = self.segs.len() + 1;
        let edits = edits.filter(|e| deltas + (IMAGE_HEADER + table::delta_len(e, segs)) as u64 <= base);
        if edits.is_none() {
            // Dead before the segments are listed: one that held only the old chain is
            // not named by the new table (it is reused once that table is durable).
            for old in std::mem::take(&mut self.table_chain) {
                self.dead(old);
            }
        }
        let upper = IMAGE_HEADER
            + match &edits {
                Some(e) => table::delta_len(e, segs),
                None => table::base_len(&self.pages, segs),
            };
        if !self.fits(upper) {
            self.next_segment()?;
        }
        let (pages, segs) = (self.pages.clone(), self.segs_list());
        let r = match &edits {
            Some(e) => {
                let prev = self.table_chain[0];
                let len = table::delta_len(e, segs.len());
                self.append_image_with(KIND_TABLE_DELTA, self.next_pid, prev, 0, len, &mut |body| {
                    table::encode_delta(pages.len(), e, &segs, body)
                })?
            }
            None => {
                let len = table::base_len(&pages, segs.len());
                self.append_image_with(KIND_TABLE, self.next_pid, ImageRef::default(), 0, len, &mut |body| {
                    table::encode_base(&pages, &segs, body)
                })?
            }
        };
        self.table_chain.insert(0, r);
        self.table_pages = pages;
        self.started = false;
        self.emit(true)?;
        self.table_written_at = self.appended();
        if let Some((n, f)) = &self.cur {
            f.sync_data().map_err(|e| Error::io(segment_file(*n), e))?;
        }
        for (n, f) in self.touched.drain(..) {
            f.sync_data().map_err(|e| Error::io(segment_file(n), e))?;
        }
        if std::mem::take(&mut self.created) {
            self.storage.sync_dir().map_err(|e| Error::io("syncing the database directory", e))?;
        }
        Ok(r)
    }

    /// The segments with the generation that last wrote each.
    fn segs_list(&self) -> Vec<(u32, u64)> {
        self.segs.iter().map(|(n, s)| (*n, s.gen)).collect()
    }

    /// Whether an image of `len` bytes fits in the current segment.
    fn fits(&self, len: usize) -> bool {
        let used = self.next_block * BLOCK as u64 + self.buf.len() as u64;
        self.cur.is_some()
            && used + len as u64 + (len as u64 / PAYLOAD as u64 + 1) * TRAILER as u64 <= self.segment_bytes
    }

    /// The table written last is durable (the master record names it): the segments it
    /// no longer names may be reused.
    /// Free segments beyond a reserve (a sixteenth of those in use, at least one) are
    /// deleted: recycling the reserve saves creating files, deleting the rest keeps the
    /// disk near the live data after a checkpoint that rewrote much of the store.
    /// (A deletion that fails leaves the segment free, for the next commit to retry.)
    pub fn commit(&mut self) {
        // Waits for the loads reading the old table: the segments freed below may be
        // deleted, and reused by the next checkpoint.
        *self.reads.durable.write() = self.pages.clone();
        self.free.extend(self.freed.drain(..));
        let reserve = (self.segs.len() / 16).max(1);
        while self.free.len() > reserve {
            let n = *self.free.last().expect("more than the reserve");
            self.reads.readers.lock().remove(&n);
            if self.storage.remove(&segment_file(n)).is_err() {
                break;
            }
            self.free.remove(&n);
        }
    }
}

/// A consolidated page being written as bases while its entries stream in: a base of
/// at most [`PAGE_TARGET`] leaves each time three times that has gathered (the first keeps the
/// page's id and low key, the rest get new ids), and [`finish`](Self::finish) splits what
/// is left evenly, as [`PageStore::write_bases`] does.
struct Bases {
    page: Option<Page>,
    piece: Vec<(Vec<u8>, Vec<u8>)>,
    size: usize,
}

impl Bases {
    fn new(page: Page) -> Bases {
        Bases { page: Some(page), piece: Vec::new(), size: 0 }
    }

    /// The next piece's page: the original one first, then new ids starting at `low`.
    fn header(&mut self, store: &mut PageStore, low: &[u8]) -> Page {
        match self.page.take() {
            Some(p) => p,
            None => Page { low: low.to_vec(), pid: store.take_pid(), chain: Vec::new() },
        }
    }

    fn push(&mut self, store: &mut PageStore, k: Vec<u8>, v: Vec<u8>, out: &mut Vec<Arc<Page>>) -> Result<(), Error> {
        self.size += entry_len(self.piece.last().map_or(&[], |(p, _)| p.as_slice()), &k, Some(&v));
        self.piece.push((k, v));
        if self.size < 3 * PAGE_TARGET {
            return Ok(());
        }
        let (mut cut, mut size) = (0, 0);
        while cut < self.piece.len() {
            let prev = if cut > 0 { self.piece[cut - 1].0.as_slice() } else { &[] };
            let len = entry_len(prev, &self.piece[cut].0, Some(&self.piece[cut].1));
            if cut > 0 && size + len > PAGE_TARGET {
                break;
            }
            size += len;
            cut += 1;
        }
        let rest = self.piece.split_off(cut);
        let first = std::mem::replace(&mut self.piece, rest);
        self.size -= size;
        let page = self.header(store, &first[0].0);
        store.write_bases(page, first, out)
    }

    fn finish(mut self, store: &mut PageStore, out: &mut Vec<Arc<Page>>) -> Result<(), Error> {
        if self.piece.is_empty() {
            // An emptied page is dropped (its range joins its left neighbour's).
            return Ok(());
        }
        let piece = std::mem::take(&mut self.piece);
        let page = self.header(store, &piece[0].0);
        store.write_bases(page, piece, out)
    }
}

/// Touched pages per chunk that a helper prepares at once (see [`ReadAhead`]).
const PREPARE_CHUNK: usize = 16;
/// Chunks prepared ahead of the pass per helper at most: what waits is bounded (each
/// page holds at most [`PREPARE_MAX_CHANGES`] changes and one page's entries).
const PREPARE_AHEAD: usize = 4;
/// A page with more changes than this is applied by the pass itself, its changes read a
/// batch at a time (the last page of an ascending fill gets every new key).
const PREPARE_MAX_CHANGES: usize = 4 * CHANGE_BATCH;
/// A pass touching fewer pages prepares them itself: a few pages are not worth threads.
const PARALLEL_MIN_PAGES: usize = 4 * PREPARE_CHUNK;
/// A page a pass rewrites: its index in the table, its changes, and whether cleaning
/// relocates it.
struct Touched {
    page: usize,
    changes: std::ops::Range<usize>,
    relocate: bool,
}

/// A touched page's inputs, read ahead: its changes with their values, and its current
/// entries if it is to be consolidated (`None`: it gets a delta).
struct Prepared {
    mine: Vec<Change>,
    old: Option<Vec<Entry>>,
}

/// A live key and its value.
type Entry = (Vec<u8>, Vec<u8>);

/// What preparing reads: the table as the pass found it, the changes, and the pages the
/// pass touches. Shared by the helpers (nothing in it changes during the pass: a milestone
/// frees only segments that no page after the pass's position names).
struct Prepare<'a> {
    reads: &'a PageReads,
    before: &'a [Arc<Page>],
    changes: &'a dyn Changes,
    touched: &'a [Touched],
}

impl Prepare<'_> {
    /// `t`'s inputs; `None` for a page with more than [`PREPARE_MAX_CHANGES`] changes.
    fn prepare(&self, t: &Touched) -> Result<Option<Prepared>, Error> {
        if t.changes.len() > PREPARE_MAX_CHANGES {
            return Ok(None);
        }
        let mut mine = Vec::with_capacity(t.changes.len());
        self.changes.values(t.changes.clone(), &mut mine)?;
        let page = &self.before[t.page];
        let fits = delta_room(page, t.relocate).is_some_and(|room| changes_len(&[], &mine) <= room);
        let old = if fits { None } else { Some(self.entries(t.page)?) };
        Ok(Some(Prepared { mine, old }))
    }

    /// The live entries of page `i` of the table as the pass found it.
    fn entries(&self, i: usize) -> Result<Vec<Entry>, Error> {
        let mut old = Vec::new();
        self.reads.page_entries(self.before, i, &[], |k, v| {
            old.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        Ok(old)
    }
}

/// The helpers' side of a pass: chunks of [`PREPARE_CHUNK`] touched pages claimed in
/// order, prepared at most [`PREPARE_AHEAD`] chunks per helper ahead of the pass, and
/// taken by the pass in order.
struct ReadAhead {
    chunks: usize,
    helpers: usize,
    claimed: AtomicUsize,
    state: Mutex<AheadState>,
    ready: Condvar,
    room: Condvar,
}

#[derive(Default)]
struct AheadState {
    done: BTreeMap<usize, Result<Vec<Option<Prepared>>, Error>>,
    taken: usize,
    stop: bool,
}

impl ReadAhead {
    fn new(chunks: usize, helpers: usize) -> ReadAhead {
        ReadAhead {
            chunks,
            helpers,
            claimed: AtomicUsize::new(0),
            state: Mutex::new(AheadState::default()),
            ready: Condvar::new(),
            room: Condvar::new(),
        }
    }

    /// A helper's loop: claim the next chunk, wait for room, prepare it, hand it over.
    fn help(&self, ctx: &Prepare<'_>) {
        ctx.changes.on_helper_thread();
        loop {
            let c = self.claimed.fetch_add(1, Ordering::Relaxed);
            if c >= self.chunks {
                return;
            }
            {
                let mut st = self.state.lock();
                // The chunk the pass waits for is always within reach: it was claimed
                // before every later one, and `taken` is at most it.
                while !st.stop && c >= st.taken + PREPARE_AHEAD * self.helpers {
                    self.room.wait(&mut st);
                }
                if st.stop {
                    return;
                }
            }
            let pages = &ctx.touched[c * PREPARE_CHUNK..((c + 1) * PREPARE_CHUNK).min(ctx.touched.len())];
            // A panic here would leave the pass waiting for this chunk forever.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pages.iter().map(|t| ctx.prepare(t)).collect::<Result<Vec<_>, _>>()
            }))
            .unwrap_or_else(|_| Err(Error::Corrupt("a checkpoint helper thread panicked".into())));
            self.state.lock().done.insert(c, r);
            self.ready.notify_all();
        }
    }

    /// Chunk `c`, once prepared (chunks are taken in order).
    fn take(&self, c: usize) -> Result<Vec<Option<Prepared>>, Error> {
        let mut st = self.state.lock();
        loop {
            if let Some(r) = st.done.remove(&c) {
                st.taken = c + 1;
                self.room.notify_all();
                return r;
            }
            self.ready.wait(&mut st);
        }
    }

    /// Stops the helpers when dropped (the pass ended, maybe early on an error).
    fn stop_on_drop(&self) -> impl Drop + '_ {
        struct Stop<'a>(&'a ReadAhead);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.state.lock().stop = true;
                self.0.room.notify_all();
            }
        }
        Stop(self)
    }
}

/// The bytes `page` may still take in deltas (`None`: it must be consolidated: no base,
/// relocated, a full chain, or deltas past its limit).
fn delta_room(page: &Page, relocate: bool) -> Option<u64> {
    if page.chain.is_empty() || relocate || page.chain.len() >= MAX_CHAIN {
        return None;
    }
    let deltas: u64 = page.chain.iter().rev().skip(1).map(|r| r.len as u64).sum();
    let base = page.chain.last().map_or(0, |r| r.len as u64);
    delta_limit(page.pid, base).checked_sub(deltas)
}

/// The encoded length of `changes` after the key `prev`.
fn changes_len(prev: &[u8], changes: &[Change]) -> u64 {
    changes
        .iter()
        .scan(prev, |prev, (k, v)| Some(entry_len(std::mem::replace(prev, k), k, v.as_deref())))
        .sum::<usize>() as u64
}

/// The end (exclusive) in `changes` of the changes of page `i` of `pages`, from `at`.
fn range_end(pages: &[Arc<Page>], i: usize, changes: &dyn Changes, at: usize) -> usize {
    match pages.get(i + 1) {
        Some(next) => {
            // The first change at or past the next page's low key.
            let (mut lo, mut hi) = (at, changes.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if changes.key(mid) < next.low.as_slice() {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        }
        None => changes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::DirStorage;

    fn key(i: u64) -> Vec<u8> {
        format!("key{i:08}").into_bytes()
    }

    /// The store's whole state.
    fn contents(store: &PageStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut got = BTreeMap::new();
        store
            .load_all(&[], &mut |k, v| {
                got.insert(k.to_vec(), v.to_vec());
                Ok(())
            })
            .unwrap();
        got
    }

    /// Passes touching hundreds of pages (prepared by helper threads, in chunks, ahead of
    /// the appends) and a page with more changes than a helper prepares (read a batch at
    /// a time by the pass) leave the pages equal to a model, through deltas,
    /// consolidations, splits and emptied pages, and after reopening from the table.
    #[test]
    fn passes_prepared_by_helpers_agree_with_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(DirStorage::new(dir.path()).unwrap());
        let mut store = PageStore::open(storage.clone(), 1 << 20, None, false).unwrap();
        store.set_helpers(3);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..40_000).map(|i| (key(i * 2), vec![b'a'; 40])).collect();
        store
            .rebuild(1, &mut |f| {
                for (k, v) in &model {
                    f(k, v)?;
                }
                Ok(())
            })
            .unwrap();
        let mut table = store.write_table().unwrap();
        store.commit();
        assert!(store.pages.len() > 2 * PARALLEL_MIN_PAGES, "{} pages", store.pages.len());
        let mut rng = crate::storage::SimRng::new(7);
        for gen in 2..12u64 {
            let mut changes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for _ in 0..10_000 {
                let k = key(rng.below(80_000));
                let v = match rng.below(4) {
                    0 => None,
                    n => Some(vec![b'a' + gen as u8; 10 * n as usize]),
                };
                changes.insert(k, v);
            }
            if gen == 5 {
                // Past what a helper prepares, all in the last page.
                for i in 0..3 * PREPARE_MAX_CHANGES as u64 {
                    changes.insert(format!("zz{i:06}").into_bytes(), Some(vec![b'z'; 30]));
                }
            }
            for (k, v) in &changes {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
            let changes: Vec<Change> = changes.into_iter().collect();
            store.apply(gen, &changes.as_slice(), None).unwrap();
            table = store.write_table().unwrap();
            store.commit();
            assert_eq!(contents(&store), model, "after generation {gen}");
        }
        drop(store);
        let store = PageStore::open(storage, 1 << 20, Some(table), false).unwrap();
        assert_eq!(contents(&store), model, "reopened");
    }

    /// Consecutive page ids (a fill's pages) get delta limits spread over 1/2..3/2 of
    /// the base's share, so they do not all consolidate in the same checkpoint.
    #[test]
    fn delta_limits_spread_over_consecutive_pages() {
        let base = 8 * PAGE_TARGET as u64;
        let nominal = base / DELTA_SHARE;
        let limits: Vec<u64> = (1..=1000).map(|pid| delta_limit(pid, base)).collect();
        assert!(limits.iter().all(|&l| l >= nominal / 2 && l < nominal * 3 / 2), "{limits:?}");
        // Each tenth of the range holds some pages (a constant factor fails this).
        let mut tenths = [0u32; 10];
        for &l in &limits {
            tenths[((l - nominal / 2) * 10 / nominal) as usize] += 1;
        }
        assert!(tenths.iter().all(|&n| n >= 50), "{tenths:?}");
        // Small bases keep the floor.
        assert_eq!(delta_limit(7, 0), PAGE_TARGET as u64 / 8);
    }
}
