//! `tsumiki stats`: what a database directory holds, read from the block trailers (paper
//! 004's log multiplexing puts each block's lane, position, record count, timestamp range
//! and watermark in its 40-byte trailer, so no record is parsed), from the page store's
//! translation table (live bytes per segment), and from its pages (the record count: every
//! page is read). Nothing is written: files are opened read-only.

use std::path::Path;

use crate::block::{open_block, BLOCK, FLAG_FLUSH_END};
use crate::error::Error;
use crate::storage::Storage;
use crate::wal::format::{parse_registry_name, parse_segment_name};
use crate::wal::recovery::read_registry;

use super::master::{read_master, MASTER};
use super::pages::{parse_segment_file, PageStore, STORE_LANE};
use crate::storage::ReadOnlyDir;

/// What one file holds, block by block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileReport {
    /// The file's name.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Log segments: generation and lane. Page segments: `None`.
    pub log: Option<(u64, u16)>,
    /// Blocks with a valid trailer (checksum and magic).
    pub valid_blocks: u64,
    /// Blocks that are all zeros (preallocated, not written yet), and log segments' headers.
    pub zero_blocks: u64,
    /// Other blocks: torn, damaged, or stale beyond a lane's end (a recycled segment's
    /// blocks of its earlier generation).
    pub bad_blocks: u64,
    /// Log records ending in the valid blocks (commit records).
    pub records: u64,
    /// Valid blocks that end a flush (one per group commit or sync).
    pub flushes: u64,
    /// Log segments: the smallest and largest timestamp or LSN of those records (0 if
    /// none). Page segments: the oldest and newest generation that wrote its valid blocks.
    pub lo: u64,
    /// See `lo`.
    pub hi: u64,
    /// Log segments: the lane's durable watermark at its last flush in this file (ELR; 0
    /// under NLR or without a flush).
    pub watermark: u64,
    /// Page segments: bytes of images the table names, and the generation that last wrote
    /// it (`None`: no table names it, free for reuse).
    pub live: Option<(u64, u64)>,
}

/// What a database directory holds.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    /// The master record's generation, whether the last exit was clean, and whether the
    /// logs use early lock release.
    pub generation: u64,
    /// See `generation`.
    pub last_exit: bool,
    /// See `generation`.
    pub elr: bool,
    /// Pages in the translation table.
    pub pages: u64,
    /// Live records in the pages, and the bytes of their keys and values (a database left
    /// open or crashed has more in its logs: see the log files' `records`).
    pub records: u64,
    /// See `records`.
    pub key_bytes: u64,
    /// See `records`.
    pub value_bytes: u64,
    /// Bytes of the images the table names (the table included).
    pub live_bytes: u64,
    /// Page segment files, and how many of them the table does not use (kept for reuse).
    pub segments: u64,
    /// See `segments`.
    pub free_segments: u64,
    /// Every log and page segment, in name order.
    pub files: Vec<FileReport>,
    /// Each lane registry (`lanes-<generation>`): the generation and its lane count, or
    /// why it cannot be read (`Error::Corrupt`: damaged; `Error::NotFound`: removed while
    /// it was inspected).
    pub lane_registries: Vec<(u64, Result<u32, Error>)>,
}

/// Reads the database in `dir` without changing it. Takes the database's lock, so a
/// database open in another process is refused (`Error::Locked`).
pub fn inspect(dir: &Path) -> Result<Inspection, Error> {
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(ReadOnlyDir::new(dir)?);
    let _lock = storage.lock().map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(e.to_string()),
        _ => Error::io("locking the database", e),
    })?;
    let m = read_master(&*storage)?
        .ok_or_else(|| Error::NotFound(format!("{} holds no tsumiki database", dir.display())))?;
    let pages = PageStore::open(storage.clone(), 4 << 20, super::table_ref(m.table), false)?;
    let usage = pages.segment_usage();
    let stats = pages.stats();
    let mut out = Inspection {
        generation: m.generation,
        last_exit: m.last_exit,
        elr: m.elr,
        pages: stats.pages,
        live_bytes: stats.live_bytes,
        segments: stats.segments,
        free_segments: stats.free_segments,
        ..Default::default()
    };
    pages.load_all(&[], &mut |k, v| {
        out.records += 1;
        out.key_bytes += k.len() as u64;
        out.value_bytes += v.len() as u64;
        Ok(())
    })?;
    let mut names = storage.list().map_err(|e| Error::io("listing the database directory", e))?;
    names.sort();
    for name in names {
        if let Some(g) = parse_registry_name(&name).filter(|_| !name.ends_with(".tmp")) {
            let count = read_registry(&*storage, g)
                .and_then(|c| c.ok_or_else(|| Error::NotFound(format!("{name} was removed meanwhile"))));
            out.lane_registries.push((g, count));
            continue;
        }
        let log = parse_segment_name(&name).map(|(g, l, _)| (g, l));
        let seg = parse_segment_file(&name);
        if name == MASTER || (log.is_none() && seg.is_none()) {
            continue;
        }
        // A log block's checksum is salted with its generation; a page block's with 0.
        let mut r = scan_blocks(&*storage, &name, log.map_or(0, |(g, _)| g))?;
        r.log = log;
        if let Some(n) = seg {
            r.live = usage.iter().find(|u| u.0 == n).map(|u| (u.1, u.2));
        }
        out.files.push(r);
    }
    Ok(out)
}

/// Reads `name` a megabyte at a time and tallies its blocks' trailers.
fn scan_blocks(storage: &dyn Storage, name: &str, salt: u64) -> Result<FileReport, Error> {
    let f = storage.open(name, false).map_err(|e| Error::io(name, e))?;
    let mut r =
        FileReport { name: name.to_string(), bytes: f.len().map_err(|e| Error::io(name, e))?, ..Default::default() };
    let mut buf = vec![0u8; 256 * BLOCK];
    let mut off = 0u64;
    while off < r.bytes {
        let want = ((r.bytes - off) as usize).min(buf.len());
        let got = f.read_at(&mut buf[..want], off).map_err(|e| Error::io(name, e))?;
        if got == 0 {
            break;
        }
        for block in buf[..got].chunks(BLOCK) {
            if block.len() < BLOCK {
                r.bad_blocks += 1;
                continue;
            }
            match open_block(block, salt) {
                Some(t) => {
                    r.valid_blocks += 1;
                    r.records += u64::from(t.records);
                    if t.flags & FLAG_FLUSH_END != 0 {
                        r.flushes += 1;
                        r.watermark = t.watermark;
                    }
                    if t.lane == STORE_LANE {
                        // A page block's `lo` is the generation that wrote it.
                        r.lo = if r.lo == 0 { t.lo } else { r.lo.min(t.lo) };
                        r.hi = r.hi.max(t.lo);
                    } else if t.records > 0 {
                        r.lo = if r.lo == 0 { t.lo } else { r.lo.min(t.lo) };
                        r.hi = r.hi.max(t.hi);
                    }
                }
                // A log segment's header holds no log data: counted with the empty blocks.
                None if block.iter().all(|&b| b == 0) || crate::wal::format::is_any_segment_header(block) => {
                    r.zero_blocks += 1
                }
                None => r.bad_blocks += 1,
            }
        }
        off += got as u64;
    }
    Ok(r)
}
