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
//! changed keys' values (or tombstones), or, when its chain is long or its deltas pass
//! their share of its base ([`DELTA_SHARE`]), a new consolidated base (split into several
//! pages when it grew past twice [`PAGE_TARGET`]; an empty page is dropped and its range
//! joins its left neighbour).
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
use crate::decode::{DecodeError, Reader};
use crate::error::{Corruption, Error, MAX_VALUE_LEN};
use crate::index::MAX_KEY_LEN;
use crate::storage::{create_fresh, Storage, StorageFile};

mod append;
pub use append::{check_appended, AppendError, Appended};
mod apply;
use apply::range_end;
#[cfg(test)]
use apply::{PARALLEL_MIN_PAGES, PREPARE_MAX_CHANGES};
mod clean;
mod entries;
#[doc(hidden)]
pub mod fuzz;
mod table;

use entries::{
    encode_entries, encode_entries_into, entries_len, entry_len, for_each_entry, merge_newest_first, Decoded, Entries,
    Layer,
};

/// The trailer lane id of page-store blocks.
pub const STORE_LANE: u16 = 0xFFFE;
/// A page's target size in encoded bytes: a consolidation splits a page larger than
/// twice this into pieces of about this size.
pub const PAGE_TARGET: usize = 8 << 10;
/// Images in a chain beyond which the next change consolidates the page.
pub const MAX_CHAIN: usize = 8;
/// A page is consolidated once its deltas would exceed its base times this fraction
/// (numerator, denominator), spread per page (`delta_limit`: between a third and
/// the whole of the base, at least an eighth of [`PAGE_TARGET`]). The deltas then cost
/// about a third of a page's bytes on average (and of a read of it), and a base is
/// written once per about two thirds of a page of changes: ten minutes of uniform
/// overwrites wrote 4.9x the updated bytes with a quarter (most of it bases), 3.3x with
/// two thirds, for about 10% more live bytes (`docs/bench/writes-issue37.md`).
pub const DELTA_SHARE: (u64, u64) = (2, 3);
/// The deltas page `pid` may carry on a base of `base_bytes`: the base's
/// [`DELTA_SHARE`], scaled by a factor between 1/2 and 3/2 drawn from the page id. Pages
/// filled together and changed at the same rate (uniform overwrites after a fill) would
/// otherwise all consolidate in the same checkpoint, writing a second copy of the data
/// before the first could be freed: the directory passed 2x the data there (2.02-2.11x
/// a second into `examples/overwrite`).
fn delta_limit(pid: u64, base_bytes: u64) -> u64 {
    let spread = pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
    ((base_bytes * DELTA_SHARE.0 / DELTA_SHARE.1) * (512 + spread) / 1024).max(PAGE_TARGET as u64 / 8)
}
/// Cleaning runs while the segment files hold more than this times the live images
/// (plus two segments of slack, so a small store never churns). Under uniform overwrites
/// most segments empty by themselves as their pages consolidate: at 1.1 cleaning wrote
/// about half the updated bytes again to hold the files at 1.45-1.49x the data, at 1.2
/// under a tenth for 1.53-1.57x.
pub const SPACE_GOAL: f64 = 1.2;
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

    fn decode(r: &mut Reader<'_>) -> Result<ImageRef, DecodeError> {
        Ok(ImageRef { seg: r.u32()?, off: r.u64()?, len: r.u32()?, crc: r.u32()? })
    }

    /// The block after the image's last byte.
    fn end_block(&self) -> u64 {
        (self.off + self.len as u64).div_ceil(PAYLOAD as u64)
    }
}

/// One page: the keys from `low` up to the next page's `low`, and its chain on disk,
/// newest image first (the last is a base). An empty chain is an empty page.
#[derive(Debug, Clone)]
struct Page {
    low: Vec<u8>,
    pid: u64,
    chain: Vec<ImageRef>,
    /// Bytes of the base's entries that the chain's delete markers are estimated to
    /// remove ([`PageStore::entry_bytes`] each). A page whose dead bytes (twice: see
    /// `clean::DEAD_WEIGHT`) and deltas pass its delta room is due for a rewrite, which
    /// cleaning paces (`PageStore::pick_reclaim`): its markers take a tenth of what they
    /// remove, and the deltas alone kept such pages, at twice to ten times their live
    /// data, until `tsumiki compact`. Kept in the table (see `table::encode_page`).
    dead: u32,
}

impl Page {
    /// The bytes of the page's base and of its deltas.
    fn base_and_deltas(&self) -> (u64, u64) {
        let deltas = self.chain.iter().rev().skip(1).map(|r| u64::from(r.len)).sum();
        (self.chain.last().map_or(0, |r| u64::from(r.len)), deltas)
    }

    /// About the bytes of the page's entries once consolidated: its images less its dead
    /// bytes.
    fn live_estimate(&self) -> u64 {
        let (base, deltas) = self.base_and_deltas();
        base + deltas - u64::from(self.dead).min(base)
    }
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
    /// Bytes of the delta images written since open (the rest of `written_bytes` is
    /// bases, tables and block trailers).
    pub delta_bytes: u64,
    /// Bytes cleaning wrote since open (pages relocated without a change).
    pub relocated_bytes: u64,
    /// Bytes of translation tables written since open (bases and deltas).
    pub table_bytes: u64,
    /// Pages rewritten whole by cleaning since open: relocated out of a cleaned segment,
    /// or reclaimed after deletes (with the neighbours merged into them).
    pub relocated_pages: u64,
    /// Bytes the translation table takes in memory (each page's entry, low key and
    /// chain of image addresses).
    pub table_memory: u64,
    /// Segments cleaned since open.
    pub segments_cleaned: u64,
    /// Records loaded from pages into memory since open (lazily, as keys are first used).
    pub records_loaded: u64,
    /// CPU time checkpoints took since open, in microseconds: the checkpointing thread's
    /// and its helpers' (reading the log back, sorting, preparing and writing pages).
    pub checkpoint_cpu_micros: u64,
    /// Wall-clock time checkpoints took since open, in microseconds.
    pub checkpoint_micros: u64,
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
    /// Test only: a freed segment is reused at once, before the table that frees it is
    /// durable (a planted bug for the crash tests).
    early_reuse: bool,
    /// The read side, shared with loads that run while a checkpoint builds the next table.
    reads: Arc<PageReads>,
    /// Threads that prepare a pass's pages (see [`PageStore::apply_pass`]).
    helpers: usize,
    /// The bytes of a base entry a delete marker is taken to remove (0: unknown, markers
    /// count their own bytes only); see [`PageStore::set_records`].
    entry_bytes: u64,
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

    /// The live entries of pages `pages[run]` (adjacent, so their entries follow one
    /// another), in key order.
    fn entries(&self, pages: &[Arc<Page>], run: std::ops::RangeInclusive<usize>) -> Result<Entries, Error> {
        let mut out = Entries::default();
        for i in run {
            self.page_entries(pages, i, &[], |k, v| {
                out.push(k, v);
                Ok(())
            })?;
        }
        Ok(out)
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
            let r = Some(page.chain[w]);
            let prev = ImageRef::decode(&mut Reader::new(&img[17..17 + REF_LEN]))
                .map_err(|e| decode_corrupt(r, 17, &format!("page {}", page.pid), &e))?;
            let ok = if last { kind == KIND_BASE } else { kind == KIND_DELTA && prev == page.chain[w + 1] };
            if !ok {
                return Err(corrupt_at(r, 0, format!("page {}: its chain is broken at image {w}", page.pid)));
            }
        }
        let in_range = |k: &[u8]| k >= page.low.as_slice() && high.is_none_or(|h| k < h);
        if imgs.len() == 1 && changes.is_empty() {
            let r = Some(page.chain[0]);
            return for_each_entry(&imgs[0], r, page.pid, |k, v| match v {
                Some(v) if in_range(k) => f(k, v),
                _ => Err(corrupt_at(
                    r,
                    0,
                    format!("page {}: a base holds a key outside its range or a tombstone", page.pid),
                )),
            });
        }
        // Each layer is sorted: merge them, the newest first (the changes, then the images
        // from the newest), so that the first layer holding a key gives its value.
        let decoded = imgs
            .iter()
            .zip(&page.chain)
            .map(|(img, &r)| {
                Decoded::new(img, Some(r), page.pid, |k| {
                    if in_range(k) {
                        Ok(())
                    } else {
                        Err(corrupt_at(
                            Some(r),
                            0,
                            format!("page {}: an image holds a key outside its range", page.pid),
                        ))
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

/// The byte of its segment file where byte `at` of the image at `r` lies.
fn image_byte(r: ImageRef, at: usize) -> u64 {
    let p = r.off + at as u64;
    p / PAYLOAD as u64 * BLOCK as u64 + p % PAYLOAD as u64
}

/// [`Error::Corrupt`] for damage at byte `at` of the image at `r`, naming its segment
/// file and the byte there (`None`: bytes not read from a segment, as the fuzz targets').
fn corrupt_at(r: Option<ImageRef>, at: usize, why: impl Into<String>) -> Error {
    match r {
        Some(r) => Error::Corrupt(Corruption::in_file(segment_file(r.seg), Some(image_byte(r, at)), why)),
        None => corrupt(why),
    }
}

/// The same for a decoder's error in the bytes of the image at `r` from its byte `skip`,
/// the reason led by `context` ("page 7", "the translation table").
fn decode_corrupt(r: Option<ImageRef>, skip: usize, context: &str, e: &DecodeError) -> Error {
    e.corrupt(r.map(|r| segment_file(r.seg)), r.map(|r| image_byte(r, skip + e.at)), context)
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

/// A page loaded whole at open (see [`PageStore::load_touched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLoad {
    /// Its place among the pages, in key order.
    pub page: usize,
    /// The records it gave.
    pub records: u64,
    /// Their keys' and values' bytes.
    pub bytes: u64,
}

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
            pages: Arc::new(vec![Arc::new(Page { low: Vec::new(), pid: 0, chain: Vec::new(), dead: 0 })]),
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
            early_reuse,
            helpers: 0,
            entry_bytes: 0,
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
    /// [`StoreOptions::checkpoint_helpers`](super::StoreOptions::checkpoint_helpers)).
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

    /// Tells the store how many records its pages hold (`None`: unknown), from which it
    /// takes the mean bytes of an entry that a delete marker removes (`Page::dead`). The
    /// live bytes include deltas and dead entries, so the mean errs high: a page mostly
    /// deleted is rewritten a little early rather than late.
    pub(crate) fn set_records(&mut self, records: Option<u64>) {
        self.entry_bytes = match records {
            Some(n) if n > 0 => self.live_bytes() / n,
            _ => 0,
        };
    }

    /// Counts a checkpoint's time: `cpu` on its own thread, `wall` from its start to its end
    /// (its helpers' CPU is counted by the pass that ran them).
    pub(crate) fn note_checkpoint_time(&mut self, cpu: std::time::Duration, wall: std::time::Duration) {
        self.stats.checkpoint_cpu_micros += cpu.as_micros() as u64;
        self.stats.checkpoint_micros += wall.as_micros() as u64;
    }

    /// Threads that help a checkpoint (see [`set_helpers`](Self::set_helpers)).
    pub fn helpers(&self) -> usize {
        self.helpers
    }

    /// Counts CPU that threads helping a checkpoint used outside a pass (reading the logs
    /// back).
    pub(crate) fn note_helper_cpu(&mut self, cpu: std::time::Duration) {
        self.stats.checkpoint_cpu_micros += cpu.as_micros() as u64;
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
        const TABLE: &str = "the translation table";
        let bad = |r: ImageRef, m: String| corrupt_at(Some(r), 0, format!("{TABLE}: {m}"));
        let mut chain = vec![t];
        let mut imgs = vec![self.reads.read_image(t, None)?];
        loop {
            let img = imgs.last().expect("one image at least");
            let r = *chain.last().expect("one image at least");
            match img[8] {
                KIND_TABLE => break,
                KIND_TABLE_DELTA if chain.len() < table::TABLE_CHAIN => {
                    let prev = ImageRef::decode(&mut Reader::new(&img[17..17 + REF_LEN]))
                        .map_err(|e| decode_corrupt(Some(r), 17, TABLE, &e))?;
                    imgs.push(self.reads.read_image(prev, None)?);
                    chain.push(prev);
                }
                KIND_TABLE_DELTA => return Err(bad(r, format!("a chain of over {} images", table::TABLE_CHAIN))),
                k => return Err(bad(r, format!("an image of kind {k}, not a table"))),
            }
        }
        let mut pages = None;
        let mut segs = Vec::new();
        for (img, &r) in imgs.iter().zip(&chain).rev() {
            let (p, sg) = table::decode(&img[IMAGE_HEADER..], pages)
                .map_err(|e| decode_corrupt(Some(r), IMAGE_HEADER, TABLE, &e))?;
            pages = Some(p);
            segs = sg;
        }
        let pages = pages.expect("a base at least");
        self.next_pid = u64::from_le_bytes(imgs[0][9..17].try_into().expect("8 bytes"));
        table::check(&pages, self.next_pid).map_err(|why| bad(t, why.to_string()))?;
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
        Ok(self.load_pages(changes, true, load)?.0)
    }

    /// Streams the pages `changes` (sorted) fall in, with the changes applied over them, to
    /// `load`, in key order (a lazy open's kept log: the other pages hold nothing it wrote,
    /// and load as they are used). Returns the records streamed and, for each page loaded,
    /// its place in [`page_lows`](Self::page_lows), its records and their keys' and
    /// values' bytes.
    pub fn load_touched(&self, changes: &[Change], load: &mut Sink<'_>) -> Result<(u64, Vec<PageLoad>), Error> {
        self.load_pages(changes, false, load)
    }

    /// [`load_all`](Self::load_all) (`every`), or [`load_touched`](Self::load_touched).
    fn load_pages(&self, changes: &[Change], every: bool, load: &mut Sink<'_>) -> Result<(u64, Vec<PageLoad>), Error> {
        let (mut n, mut loaded, mut at) = (0, Vec::new(), 0);
        for i in 0..self.pages.len() {
            if !every && at == changes.len() {
                break;
            }
            let end = range_end(&self.pages, i, &changes, at);
            if every || end > at {
                let mut page = PageLoad { page: i, records: 0, bytes: 0 };
                self.page_entries(i, &changes[at..end], |k, v| {
                    page.records += 1;
                    page.bytes += (k.len() + v.len()) as u64;
                    load(k, v)
                })?;
                n += page.records;
                loaded.push(page);
            }
            at = end;
        }
        Ok((n, loaded))
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
        let r = self.write_table_unsynced()?;
        self.sync_written()?;
        Ok(r)
    }

    /// [`write_table`](Self::write_table) without its sync: only for the planted bug
    /// `Plants::bulk_load_master_first`, whose master record names a table the disk may
    /// not hold yet.
    pub fn write_table_unsynced(&mut self) -> Result<ImageRef, Error> {
        if self.cur.is_none() {
            self.next_segment()?;
        }
        // A delta of the durable table while the chain stays short and its deltas smaller
        // than its base; otherwise a new base, and the old chain dies with it.
        let edits = match self.table_chain.len() {
            0 | table::WRITTEN_CHAIN.. => None,
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
        self.stats.table_bytes += u64::from(r.len);
        self.table_chain.insert(0, r);
        self.table_pages = pages;
        self.started = false;
        self.emit(true)?;
        self.table_written_at = self.appended();
        Ok(r)
    }

    /// Makes every block written since the last call durable (and the directory, if a
    /// segment was created).
    pub fn sync_written(&mut self) -> Result<(), Error> {
        if let Some((n, f)) = &self.cur {
            f.sync_data().map_err(|e| Error::io(segment_file(*n), e))?;
        }
        for (n, f) in self.touched.drain(..) {
            f.sync_data().map_err(|e| Error::io(segment_file(n), e))?;
        }
        if std::mem::take(&mut self.created) {
            self.storage.sync_dir().map_err(|e| Error::io("syncing the database directory", e))?;
        }
        Ok(())
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

#[cfg(test)]
mod tests;
